"""The dashboard's JSON API on `cronctl run --http` (SPEC §14): read-only, on either store.

    GET /api/status                     the document of `cronctl status --json`
    GET /api/jobs, /api/jobs/NAME       definitions: schedule in words, zone, next fire
    GET /api/history?job=&since=&status=&chain=&n=        run records (`history --json`)
    GET /api/history?view=timeline&since=&res=SECONDS     the same runs as bars, for drawing
    GET /api/audit?since=&job=&event=&n=    the newest audit rows (`cronctl audit`'s filters)

Every handler runs on the endpoint's thread with a Context of its own (never the tick
thread's), so a page can never make the loop wait; a bad parameter is a 400 naming it.
"""

from __future__ import annotations

import heapq
import json
import time
from datetime import datetime, timedelta
from typing import Any, Callable

import msgspec

from cronctl.context import Context
from cronctl.durations import parse_duration
from cronctl.errors import CronctlError, JobNotFoundError
from cronctl.jobs.state import JobView
from cronctl.jobs.words import describe
from cronctl.loop.endpoint import Handler, Reply, Request
from cronctl.models import command_text
from cronctl.ops.status import status, status_json
from cronctl.ops.webreads import AuditReader, HistoryReader
from cronctl.ops.webruns import CODE, RunIndex
from cronctl.ops.webtimeline import Timeline
from cronctl.schedule.slots import fire_at
from cronctl.store.audit import filter_rows
from cronctl.timefmt import from_iso, to_iso

STATUS_TTL = 0.5  # pages polling at once share one status read per this many seconds
MAX_ROWS = 10_000
LOG_SHOWN = 1 << 20


class BadParameter(CronctlError):
    pass


def json_reply(data: Any, status_code: int = 200) -> Reply:
    return Reply(status_code, msgspec.json.encode(data) + b"\n")


def error_reply(status_code: int, message: str) -> Reply:
    return Reply(status_code, (json.dumps({"error": message}) + "\n").encode())


class WebApi:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.history_reader = HistoryReader(ctx)
        self.audit_reader = AuditReader(ctx)
        self.timeline = Timeline()
        self._status: tuple[float, Reply] | None = None

    def handlers(self) -> dict[str, Handler]:
        return {"/api/status": self._guarded(self.status), "/api/jobs": self._guarded(self.jobs),
                "/api/jobs/": self._guarded(self.job), "/api/history": self._guarded(self.history),
                "/api/audit": self._guarded(self.audit), "/api/logs/": self._guarded(self.log)}

    @staticmethod
    def _guarded(handler: Handler) -> Handler:
        def answer(request: Request) -> Reply:
            try:
                return handler(request)
            except BadParameter as exc:
                return error_reply(400, str(exc))
            except CronctlError as exc:  # an unknown job, a store that does not parse: said, not a 500
                return error_reply(404 if isinstance(exc, JobNotFoundError) else 503, str(exc))
        return answer

    def status(self, request: Request) -> Reply:
        cached = self._status
        if cached is not None and time.monotonic() - cached[0] < STATUS_TTL:
            return cached[1]
        data = status_json(status(self.ctx), only_stale=False)
        reply = Reply(200, (json.dumps(data, default=str) + "\n").encode())
        self._status = (time.monotonic(), reply)
        return reply

    def jobs(self, request: Request) -> Reply:
        # Without each job's state (the status has what the page shows of it): 1,000 jobs stay small.
        return json_reply({"jobs": [job_definition(view, with_state=False) for view in self.ctx.leases.jobs()]})

    def job(self, request: Request) -> Reply:
        name = request.path[len("/api/jobs/"):]
        if not name or "/" in name:
            return error_reply(404, "expected /api/jobs/NAME")
        return json_reply(job_definition(self.ctx.leases.job(name)))

    def history(self, request: Request) -> Reply:
        now = self.ctx.clock.now()
        since = since_param(request, now)
        by_job = self.history_reader.by_job()
        if one(request, "view") == "timeline":
            start = since or now - timedelta(hours=24)
            return json_reply(self.timeline.build(by_job, start, now, resolution(request), self.audit_reader.rows()))
        count = count_param(request, 100)
        wanted_status, chain = one(request, "status"), one(request, "chain")
        names = names_param(request)
        if names is None and chain is None:  # only the jobs that hold the newest `count` runs are read
            names = newest_jobs(by_job, since.timestamp() if since else None, wanted_status, count)
        since_text = to_iso(since) if since else None
        runs = [record for job in sorted(names if names is not None else by_job)
                for record in self.history_reader.records(job)
                if (since_text is None or str(record.get("ended_at") or "") >= since_text)
                and (wanted_status is None or record.get("status") == wanted_status)
                and (chain is None or record.get("chain") == chain)]
        runs.sort(key=lambda r: (r.get("ended_at") or "", r.get("run_id") or ""))
        return json_reply({"runs": runs[-count:]})

    def log(self, request: Request) -> Reply:
        """/api/logs/NAME/RUN_ID: the run's output as plain text (its last LOG_SHOWN bytes)."""
        from cronctl.ops.runs import StoredTail, log_path

        parts = request.path[len("/api/logs/"):].split("/")
        if len(parts) != 2 or not all(parts) or ".." in parts:
            return error_reply(404, "expected /api/logs/NAME/RUN_ID")
        _, where = log_path(self.ctx, parts[0], parts[1])
        if isinstance(where, StoredTail):
            data = where.text.encode()
        else:
            with open(where, "rb") as handle:
                size = handle.seek(0, 2)
                handle.seek(max(0, size - LOG_SHOWN))
                data = handle.read()
        return Reply(200, data, "text/plain; charset=utf-8")

    def audit(self, request: Request) -> Reply:
        since = since_param(request, self.ctx.clock.now())
        rows = filter_rows(iter(self.audit_reader.rows()), job=one(request, "job"), event=one(request, "event"),
                           since=since, limit=count_param(request, 50))
        return json_reply({"rows": rows})


def newest_jobs(by_job: dict[str, RunIndex], since: float | None, status: str | None, count: int) -> set[str]:
    """The jobs among whose runs are the newest `count` ending after `since` with `status`."""
    code = None if status is None else CODE.get(status, -1)
    newest: list[tuple[float, str]] = []
    for job, index in by_job.items():
        found = 0
        for position in range(len(index) - 1, -1, -1):
            end = index.ends[position]
            if since is not None and end < since or found == count:
                break
            if code is None or index.codes[position] == code:
                newest.append((end, job))
                found += 1
    return {job for _, job in heapq.nlargest(count, newest)}


def job_definition(view: JobView, with_state: bool = True) -> dict[str, Any]:
    """A job for people: its stored definition, the schedule in words, the next fire in UTC."""
    spec = view.spec
    data = spec.to_dict()
    data.update(name=spec.name, schedule_words=describe(spec), schedule=spec.schedule_text,
                command_text=command_text(spec.command), timezone=spec.timezone, after=list(spec.after or []),
                paused=view.paused, **({"state": view.state} if with_state else {}))
    next_slot = view.next_run_at
    data["next_fire_at"] = to_iso(fire_at(spec, next_slot)) if next_slot and not view.paused else None
    return data


# --- query parameters ------------------------------------------------------------------------


def one(request: Request, name: str) -> str | None:
    values = request.query.get(name)
    return values[-1] if values and values[-1] != "" else None


def names_param(request: Request) -> set[str] | None:
    values = [part for value in request.query.get("job", []) for part in value.split(",") if part]
    return set(values) if values else None


def since_param(request: Request, now: datetime) -> datetime | None:
    """`since=` as `cronctl history --since`: an ISO 8601 instant, or a duration ago (30m, 2d)."""
    text = one(request, "since")
    if text is None:
        return None
    return parse_when(text, now, "since")


def parse_when(text: str, now: datetime, name: str) -> datetime:
    try:
        return now - timedelta(seconds=parse_duration(text, field=name))
    except CronctlError:
        pass
    try:
        instant = from_iso(text)
    except (TypeError, ValueError):
        instant = None
    if instant is None:
        raise BadParameter(f"{name}={text!r}: expected an ISO 8601 instant or a duration ago like 30m, 24h")
    return instant


def count_param(request: Request, default: int) -> int:
    text = one(request, "n")
    if text is None:
        return default
    if not text.isdigit() or not 0 < int(text) <= MAX_ROWS:
        raise BadParameter(f"n={text!r}: expected a whole number from 1 to {MAX_ROWS}")
    return int(text)


def resolution(request: Request) -> float:
    text = one(request, "res") or "60"
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise BadParameter(f"res={text!r}: expected the seconds one pixel shows, 0 to 3600")
    return value


def api_routes(ctx: Context) -> dict[str, Callable[[Request], Reply]]:
    return WebApi(ctx).handlers()
