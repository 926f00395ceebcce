"""The dashboard's timeline: each job's runs in a window as bars, built incrementally.

A bar is [start_s, end_s, status, runs, late runs], seconds from the window's start; runs
of one status closer than `res` seconds (one pixel at the page's zoom) are one bar, so a
day of 1-minute runs is a few bars, not 1,440 elements. A slot that did not run (skipped,
not started) is a tick.

The page asks for a window whose start it rounds (the start moves by whole steps, not on
every poll), so each job's bars are kept between requests and only the records appended
since are merged in: a poll costs the runs that ended since the last one, not the day.
A job whose records were replaced (a trim) or reordered is built again from its rows.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronctl.timefmt import from_iso, to_iso

RECENT = 20  # outcomes in a job's strip
STATUSES = ["success", "error", "timeout", "killed", "lost", "not_started", "skipped", "running"]
_CODE = {name: index for index, name in enumerate(STATUSES)}
_NOT_RUN = ("skipped", "not_started")


@dataclass
class _JobBars:
    base: float
    res: float
    rows: list[dict[str, Any]]
    done: int = 0  # rows merged so far
    last: dict[str, Any] | None = None  # the last row merged: still in its place, or rebuild
    bars: list[list[Any]] = field(default_factory=list)
    ticks: list[float] = field(default_factory=list)


class Timeline:
    """Bars per job, kept between calls (one instance per endpoint: one thread uses it)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _JobBars] = {}

    def build(self, by_job: dict[str, list[dict[str, Any]]], since: datetime, until: datetime,
              res: float, audit: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """`audit`: rows whose skipped or missed slots are ticks too (`run.skipped`, `run.missed`:
        a slot refused by overlap, or coalesced after downtime, has no run record)."""
        base = since.timestamp()
        since_text = to_iso(since) or ""
        for gone in set(self._jobs) - set(by_job):
            del self._jobs[gone]
        jobs: dict[str, Any] = {}
        for job, rows in by_job.items():
            kept = self._jobs.get(job)
            if kept is None or not _still_valid(kept, rows, base, res):
                first = bisect_left(rows, since_text, key=lambda r: str(r.get("ended_at") or ""))
                kept = self._jobs[job] = _JobBars(base, res, rows, done=first)
            for record in rows[kept.done:]:
                _merge(kept, record)
            kept.done, kept.last = len(rows), rows[-1] if rows else None
            recent = [[_CODE.get(str(r.get("status")), 1), r.get("run_id")] for r in rows[-RECENT:]]
            jobs[job] = {"bars": kept.bars, "ticks": kept.ticks, "recent": recent, "last": _last(rows)}
        for job, slots in _audit_ticks(audit or [], base, since_text).items():
            entry = jobs.setdefault(job, {"bars": [], "ticks": [], "recent": [], "last": None})
            entry["ticks"] = sorted({*entry["ticks"], *slots})
        return {"since": to_iso(since), "until": to_iso(until), "res": res, "statuses": STATUSES, "jobs": jobs}


def timeline(by_job: dict[str, list[dict[str, Any]]], since: datetime, until: datetime,
             res: float) -> dict[str, Any]:
    """The timeline of `by_job` from nothing kept (tests, one-off reads)."""
    return Timeline().build(by_job, since, until, res)


def _audit_ticks(rows: list[dict[str, Any]], base: float, since_text: str) -> dict[str, list[float]]:
    ticks: dict[str, list[float]] = {}
    for row in rows:
        if row.get("event") in ("run.skipped", "run.missed") and str(row.get("slot") or "") >= since_text:
            slot = _seconds(row.get("slot"), base)
            if slot is not None and row.get("job"):
                ticks.setdefault(str(row["job"]), []).append(round(slot, 1))
    return ticks


def _still_valid(kept: _JobBars, rows: list[dict[str, Any]], base: float, res: float) -> bool:
    if kept.base != base or kept.res != res or kept.rows is not rows or len(rows) < kept.done:
        return False
    return kept.done == 0 or rows[kept.done - 1] is kept.last


def _merge(kept: _JobBars, record: dict[str, Any]) -> None:
    status = str(record.get("status"))
    start, end = _seconds(record.get("started_at"), kept.base), _seconds(record.get("ended_at"), kept.base)
    if status in _NOT_RUN or start is None:
        slot = _seconds(record.get("slot"), kept.base)
        kept.ticks.append(round(slot if slot is not None else end or 0.0, 1))
        return
    start = max(start, 0.0)
    end = max(end or start, start)
    code, late = _CODE.get(status, _CODE["error"]), bool(record.get("late"))
    last = kept.bars[-1] if kept.bars else None
    if last is not None and last[2] == code and start - last[1] < kept.res and not late:
        last[1] = round(max(last[1], end), 1)
        last[3] += 1
        return
    kept.bars.append([round(start, 1), round(end, 1), code, 1, int(late)])


def _last(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not rows:
        return None
    record = rows[-1]
    return {key: record.get(key) for key in ("run_id", "status", "duration", "reason", "exit_code", "signal",
                                             "ended_at", "started_at", "late", "chain", "fault")}


def _seconds(value: Any, base: float) -> float | None:
    try:
        instant = from_iso(value)
    except (TypeError, ValueError):
        return None
    return None if instant is None else instant.timestamp() - base
