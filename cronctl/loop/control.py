"""Requests from CLI commands to the running loop (force-run, kill), as files.

A request is one JSON file in control/, written atomically; the loop answers
with a reply file next to it. SIGUSR1 wakes the loop so it need not wait for
its next tick.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from cronctl.errors import CronctlError
from cronctl.paths import Paths
from cronctl.store.statefiles import read_json, write_json_atomic

if TYPE_CHECKING:  # the loop's side only; `cronctl force-run` must not import the engine
    from cronctl.store.claims import ClaimBatch

REQUEST_SUFFIX = ".req.json"
REPLY_SUFFIX = ".reply.json"


def send_request(paths: Paths, action: str, loop_pid: int | None, **fields: Any) -> str:
    paths.control_dir.mkdir(mode=0o700, exist_ok=True)
    request_id = uuid.uuid4().hex[:12]
    write_json_atomic(paths.control_dir / f"{request_id}{REQUEST_SUFFIX}",
                      {"id": request_id, "action": action, **fields})
    if loop_pid:
        try:
            os.kill(loop_pid, signal.SIGUSR1)
        except OSError:
            pass  # the loop polls control/ every tick anyway
    return request_id


def wait_reply(paths: Paths, request_id: str, timeout: float, alive: Callable[[], bool]) -> dict[str, Any] | None:
    """The loop's answer, or None if it did not answer in time (or died)."""
    path = paths.control_dir / f"{request_id}{REPLY_SUFFIX}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = read_json(path)
        if reply is not None:
            path.unlink(missing_ok=True)
            return reply
        if not alive():
            break
        time.sleep(0.05)
    (paths.control_dir / f"{request_id}{REQUEST_SUFFIX}").unlink(missing_ok=True)
    return None


def pending_requests(paths: Paths) -> list[tuple[Path, dict[str, Any]]]:
    try:
        names = sorted(e.name for e in os.scandir(paths.control_dir) if e.name.endswith(REQUEST_SUFFIX))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        path = paths.control_dir / name
        data = read_json(path)
        if data is not None:
            out.append((path, data))
    return out


def reply(paths: Paths, request: dict[str, Any], request_path: Path, answer: dict[str, Any]) -> None:
    write_json_atomic(paths.control_dir / f"{request['id']}{REPLY_SUFFIX}", answer)
    request_path.unlink(missing_ok=True)


# --- the loop's side --------------------------------------------------------------------


class Controls(Protocol):
    """What a request may ask of the loop (the engine offers it: loop/engine.py)."""

    def force(self, job: str) -> ClaimBatch:
        """Claim `job` now under its overlap rules and start it (no claim: its overlap skipped it)."""
        ...

    def kill_run(self, run_id: str, reason: str) -> bool:
        """End one run this loop supervises; False when it supervises no such run."""
        ...

    def kill_job(self, job: str, reason: str) -> list[str]:
        """End every run of `job` this loop supervises; their run ids."""
        ...


def serve(paths: Paths, controls: Controls) -> None:
    """Answer every pending request (on the tick thread, under the tick lock)."""
    for path, request in pending_requests(paths):
        try:
            answer = _answer(controls, request)
        except CronctlError as exc:
            answer = {"ok": False, "error": str(exc)}
        except Exception as exc:
            # Answered all the same: an unanswered request would fail again on every tick
            # and leave its command waiting out its timeout with no word of why.
            print(f"cronctl: error serving a {request.get('action')} request: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            answer = {"ok": False, "error": f"the loop could not serve it: {type(exc).__name__}: {exc}"}
        reply(paths, request, path, answer)


def _answer(controls: Controls, request: dict[str, Any]) -> dict[str, Any]:
    job = str(request.get("job"))
    if request.get("action") == "force_run":
        batch = controls.force(job)
        if not batch.claims:
            return {"ok": False, "skipped": True, "error": f"job '{job}' is running and its overlap is skip"}
        return {"ok": True, "run_id": batch.claims[0].run_id, "pid": os.getpid()}
    if request.get("action") == "kill":
        return {"ok": True, "run_ids": controls.kill_job(job, "operator")}
    return {"ok": False, "error": f"unknown request {request.get('action')!r}"}
