"""The dashboard's actions: POST /api/jobs/NAME/{force-run,pause,resume,kill} (SPEC §14).

Only a loop started with `--http-token FILE` acts, and only on a request that carries
`Authorization: Bearer TOKEN` (compared in constant time); every other POST is a 403 and
changes nothing. A verb is the CLI's own use case (ops.runs, ops.definitions, ops.resume)
on a Context of its own whose audit rows all carry `by: http` and the client's address.
A kill, which the CLI records only through the loop's `run.killed`, also writes
`kill.requested` so the operator's request is audited whoever ends the run.

Runs on the endpoint's action worker: a kill may wait out a job's kill_grace.
"""

from __future__ import annotations

import hmac
import json
import os
import stat
from pathlib import Path
from typing import Any, Callable

from cronctl.context import Context
from cronctl.errors import ConflictError, CronctlError, JobNotFoundError, UsageError, no_job_named
from cronctl.loop.endpoint import Handler, Reply, Request

VERBS = ("force-run", "pause", "resume", "kill")


def read_token(path: str | Path) -> str:
    """The token in FILE (surrounding whitespace dropped); a missing, empty or world-readable file is refused."""
    try:
        st = os.stat(path)
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--http-token {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if st.st_mode & stat.S_IROTH:
        raise UsageError(f"--http-token {path}: readable by every user; chmod 600 it (it guards the actions)")
    if len(text) < 16 or any(ch.isspace() for ch in text):
        raise UsageError(f"--http-token {path}: expected one token of at least 16 characters and no spaces, "
                         "e.g. the output of: python3 -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return text


def _reply(status_code: int, data: dict[str, Any]) -> Reply:
    return Reply(status_code, (json.dumps(data, default=str) + "\n").encode())


def action_handler(open_context: Callable[[], Context], token: str | None) -> Handler:
    """The POST handler of the endpoint: 403 without a token configured or given, else the verb;
    `open_context` opens the Context its actions use (the loop's store, never the loop's own)."""
    opened: list[Context] = []  # one Context for every action (one worker thread: never shared)

    def act(request: Request) -> Reply:
        if token is None:
            return _reply(403, {"error": "actions are off: the loop was started without --http-token"})
        given = request.headers.get("authorization", "")
        scheme, _, secret = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(secret.strip().encode(), token.encode()):
            return _reply(403, {"error": "missing or wrong token (Authorization: Bearer TOKEN)"})
        parts = request.path.strip("/").split("/")
        if len(parts) != 4 or parts[:2] != ["api", "jobs"] or parts[3] not in VERBS:
            return _reply(404, {"error": f"expected POST /api/jobs/NAME/{{{','.join(VERBS)}}}"})
        if not opened:
            opened.append(open_context())
        ctx = opened[0]
        ctx.audit.tags = {"by": "http", "client": request.client}
        try:
            return _reply(200, {"job": parts[2], "action": parts[3], **VERB_BODIES[parts[3]](ctx, parts[2])})
        except JobNotFoundError as exc:
            return _reply(404, {"error": str(exc)})
        except (ConflictError, UsageError) as exc:
            return _reply(409, {"error": str(exc)})
        except CronctlError as exc:
            return _reply(500, {"error": str(exc)})

    return act


def _force_run(ctx: Context, name: str) -> dict[str, Any]:
    from cronctl.ops.runs import force_run

    result = force_run(ctx, name, wait=False)
    return {"run_id": result.run_id, "via_loop": result.via_loop, "run": result.record}


def _pause(ctx: Context, name: str) -> dict[str, Any]:
    from cronctl.ops.definitions import pause_job

    return {"changed": pause_job(ctx, name)}


def _resume(ctx: Context, name: str) -> dict[str, Any]:
    from cronctl.ops.resume import resume

    done = resume(ctx, [name])
    return {"released": done.released, "cleared": done.jobs[0].cleared if done.jobs else []}


def _kill(ctx: Context, name: str) -> dict[str, Any]:
    from cronctl.ops.runs import kill_job

    if not ctx.backend.has_job(name):
        raise no_job_named(name)
    ctx.audit.append("kill.requested", job=name)
    return {"killed": kill_job(ctx, name)}


VERB_BODIES: dict[str, Callable[[Context, str], dict[str, Any]]] = {
    "force-run": _force_run, "pause": _pause, "resume": _resume, "kill": _kill}
