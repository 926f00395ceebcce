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

import json
import time
from datetime import datetime, timedelta
from typing import Any, Callable

import msgspec

from cronctl.context import Context
from cronctl.durations import parse_duration
from cronctl.errors import CronctlError
from cronctl.jobs.state import JobView
from cronctl.jobs.words import describe
from cronctl.loop.endpoint import Handler, Reply, Request
from cronctl.models import command_text
from cronctl.ops.status import status, status_json
from cronctl.ops.webreads import AuditReader, HistoryReader
from cronctl.schedule.slots import fire_at
from cronctl.store.audit import filter_rows
from cronctl.timefmt import from_iso, to_iso

STATUS_TTL = 0.5  # pages polling at once share one status read per this many seconds
MAX_ROWS = 10_000
RECENT = 20  # outcomes in a job's strip
LOG_SHOWN = 1 << 20
TIMELINE_STATUSES = ["success", "error", "timeout", "killed", "lost", "not_started", "skipped", "running"]


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
                return error_reply(404 if "no job named" in str(exc) else 503, str(exc))
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
        return json_reply({"jobs": [job_definition(view) for view in self.ctx.leases.jobs()]})

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
            return json_reply(timeline(by_job, start, now, resolution(request)))
        jobs = names_param(request)
        wanted_status, chain = one(request, "status"), one(request, "chain")
        since_text = to_iso(since) if since else None
        runs = [record for job, records in by_job.items() if jobs is None or job in jobs for record in records
                if (since_text is None or str(record.get("ended_at") or "") >= since_text)
                and (wanted_status is None or record.get("status") == wanted_status)
                and (chain is None or record.get("chain") == chain)]
        runs.sort(key=lambda r: (r.get("ended_at") or "", r.get("run_id") or ""))
        return json_reply({"runs": runs[-count_param(request, 100):]})

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


def job_definition(view: JobView) -> dict[str, Any]:
    """A job for people: its stored definition, the schedule in words, the next fire in UTC."""
    spec = view.spec
    data = spec.to_dict()
    data.update(name=spec.name, schedule_words=describe(spec), schedule=spec.schedule_text,
                command_text=command_text(spec.command), timezone=spec.timezone, after=list(spec.after or []),
                paused=view.paused, state=view.state)
    next_slot = view.next_run_at
    data["next_fire_at"] = to_iso(fire_at(spec, next_slot)) if next_slot and not view.paused else None
    return data


def timeline(by_job: dict[str, list[dict[str, Any]]], since: datetime, until: datetime,
             res: float) -> dict[str, Any]:
    """Each job's runs in [since, until] as bars [start_s, end_s, status, runs, late runs],
    seconds from `since`; runs of one status closer than `res` (a pixel at the page's zoom)
    are one bar, so a day of 1-minute runs is a few bars, not 1,440 elements. Also each
    job's last RECENT outcomes (its strip) and the slots it skipped (ticks)."""
    code = {name: index for index, name in enumerate(TIMELINE_STATUSES)}
    since_text = to_iso(since) or ""
    base = since.timestamp()
    jobs: dict[str, Any] = {}
    for job, records in by_job.items():
        bars: list[list[Any]] = []
        ticks: list[float] = []
        for record in records:
            if str(record.get("ended_at") or "") < since_text:
                continue
            status_code = code.get(str(record.get("status")), code["error"])
            start, end = _seconds(record.get("started_at"), base), _seconds(record.get("ended_at"), base)
            if record.get("status") in ("skipped", "not_started") or start is None:
                slot = _seconds(record.get("slot"), base)
                ticks.append(round(slot if slot is not None else end or 0.0, 1))
                continue
            _add_bar(bars, max(start, 0.0), max(end or start, start), status_code, bool(record.get("late")), res)
        recent = [[code.get(str(r.get("status")), code["error"]), r.get("run_id")] for r in records[-RECENT:]]
        jobs[job] = {"bars": bars, "ticks": ticks, "recent": recent, "last": _last(records)}
    return {"since": to_iso(since), "until": to_iso(until), "res": res, "statuses": TIMELINE_STATUSES, "jobs": jobs}


def _last(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not records:
        return None
    record = records[-1]
    return {key: record.get(key) for key in ("run_id", "status", "duration", "reason", "exit_code", "signal",
                                             "ended_at", "started_at", "late", "chain", "fault")}


def _add_bar(bars: list[list[Any]], start: float, end: float, status_code: int, late: bool, res: float) -> None:
    last = bars[-1] if bars else None
    if last is not None and last[2] == status_code and start - last[1] < res and not late:
        last[1] = round(max(last[1], end), 1)
        last[3] += 1
        return
    bars.append([round(start, 1), round(end, 1), status_code, 1, int(late)])


def _seconds(value: Any, base: float) -> float | None:
    try:
        instant = from_iso(value)
    except (TypeError, ValueError):
        return None
    return None if instant is None else instant.timestamp() - base


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
