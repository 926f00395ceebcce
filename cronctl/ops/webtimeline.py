"""The dashboard's timeline: each job's runs in a window as bars, built incrementally.

A bar is [start_s, end_s, status, runs, late runs], seconds from the window's start; runs
of one status closer than `res` seconds (one pixel at the page's zoom) are one bar, so a
day of 1-minute runs is a few bars, not 1,440 elements. A slot that did not run (skipped,
not started) is a tick.

The page asks for a window whose start it rounds (the start moves by whole steps, not on
every poll), so each job's bars are kept between requests and only the records appended
since are merged in: a poll costs the runs that ended since the last one, not the day.
A job whose runs were replaced (a trim) or reordered is built again from its runs.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronctl.ops.webruns import CODE, NOT_RUN, STATUSES, RunIndex, last_outcome
from cronctl.timefmt import from_iso, to_iso


@dataclass
class _JobBars:
    base: float
    res: float
    index: RunIndex
    version: int
    done: int = 0  # runs merged so far
    bars: list[list[Any]] = field(default_factory=list)
    ticks: list[float] = field(default_factory=list)


class Timeline:
    """Bars per job, kept between calls (one instance per endpoint: one thread uses it)."""

    def __init__(self) -> None:
        self._jobs: dict[str, _JobBars] = {}

    def build(self, by_job: dict[str, RunIndex], since: datetime, until: datetime,
              res: float, audit: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """`audit`: rows whose skipped or missed slots are ticks too (`run.skipped`, `run.missed`:
        a slot refused by overlap, or coalesced after downtime, has no run record)."""
        base = since.timestamp()
        for gone in set(self._jobs) - set(by_job):
            del self._jobs[gone]
        jobs: dict[str, Any] = {}
        for job, index in by_job.items():
            kept = self._jobs.get(job)
            if kept is None or not _still_valid(kept, index, base, res):
                first = bisect_left(index.ends, base)  # NaN ends (unknown) sort first: skipped
                kept = self._jobs[job] = _JobBars(base, res, index, index.version, done=first)
            for position in range(kept.done, len(index)):
                _merge(kept, index, position)
            kept.done = len(index)
            recent = [[CODE.get(run.status or "", 1), run.run_id] for run in index.recent]
            jobs[job] = {"bars": kept.bars, "ticks": kept.ticks, "recent": recent, "last": last_outcome(index)}
        for job, slots in _audit_ticks(audit or [], base, to_iso(since) or "").items():
            entry = jobs.setdefault(job, {"bars": [], "ticks": [], "recent": [], "last": None})
            entry["ticks"] = sorted({*entry["ticks"], *slots})
        return {"since": to_iso(since), "until": to_iso(until), "res": res, "statuses": STATUSES, "jobs": jobs}


def timeline(by_job: dict[str, RunIndex], since: datetime, until: datetime, res: float,
             audit: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The timeline of `by_job` from nothing kept (tests, one-off reads)."""
    return Timeline().build(by_job, since, until, res, audit)


def _audit_ticks(rows: list[dict[str, Any]], base: float, since_text: str) -> dict[str, list[float]]:
    ticks: dict[str, list[float]] = {}
    for row in rows:
        if row.get("event") in ("run.skipped", "run.missed") and str(row.get("slot") or "") >= since_text:
            slot = _seconds(row.get("slot"), base)
            if slot is not None and row.get("job"):
                ticks.setdefault(str(row["job"]), []).append(round(slot, 1))
    return ticks


def _still_valid(kept: _JobBars, index: RunIndex, base: float, res: float) -> bool:
    return (kept.base == base and kept.res == res and kept.index is index and kept.version == index.version
            and len(index) >= kept.done)


def _merge(kept: _JobBars, index: RunIndex, position: int) -> None:
    code, start, end = index.codes[position], index.starts[position], index.ends[position]
    if code in NOT_RUN or start != start:  # never started: a tick at its slot
        slot = index.slots[position]
        at = slot if slot == slot else end
        if at == at:
            kept.ticks.append(round(at - kept.base, 1))
        return
    start = max(start - kept.base, 0.0)
    end = max(end - kept.base, start) if end == end else start
    late = bool(index.late[position])
    last = kept.bars[-1] if kept.bars else None
    if last is not None and last[2] == code and start - last[1] < kept.res and not late:
        last[1] = round(max(last[1], end), 1)
        last[3] += 1
        return
    kept.bars.append([round(start, 1), round(end, 1), code, 1, int(late)])


def _seconds(value: Any, base: float) -> float | None:
    try:
        instant = from_iso(value)
    except (TypeError, ValueError):
        return None
    return None if instant is None else instant.timestamp() - base
