"""Which jobs the JSON loop keeps in memory for the health pass to find them late (SPEC §12).

The loop holds only the jobs it watches (loop/due.py); a job that merely went late (its
slot passed, nothing claimed it: --max-parallel full, say) writes nothing, so it would
never be looked at and its `stale` never owed. Each read of the store therefore notes,
for the jobs with notify targets, the earliest instant one of them can turn late: its
next slot plus its grace (a lower bound: the default grace is at least DEFAULT_GRACE_FLOOR).
Only once that instant has passed does the health pass make the loop read again, keeping
the jobs whose bound has passed; an idle loop whose jobs run on time never reads for this.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cronctl.durations import parse_duration
from cronctl.store.notify_owed import targets_of
from cronctl.timefmt import from_iso

# default_grace (schedule/cron.py) is half the cadence clamped to [2m, 2h]: never less than this.
DEFAULT_GRACE_FLOOR = 120.0


def late_bound(entry: dict[str, Any]) -> datetime | None:
    """The earliest instant the health rule (jobs/health.py) can call this job late; None when
    the health pass has no reason to look at it (no targets, paused, done, no slot)."""
    if not targets_of(entry):
        return None
    state = entry["state"]
    if state.get("completed") or state.get("paused") or entry.get("paused"):
        return None
    try:
        slot = from_iso(state.get("next_run_at"))
        explicit = entry.get("grace")
        grace = DEFAULT_GRACE_FLOOR if explicit is None else parse_duration(explicit, field="grace")
    except Exception:
        return None  # a bad entry: status and doctor say so
    return None if slot is None else slot + timedelta(seconds=grace)


class LateWatch:
    """One read's share of the work: keep the jobs late by `cutoff`, note the next bound."""

    def __init__(self, cutoff: datetime | None) -> None:
        self.cutoff = cutoff
        self.next_bound: datetime | None = None  # the earliest bound of a job not kept

    def keeps(self, entry: dict[str, Any]) -> bool:
        bound = late_bound(entry)
        if bound is None:
            return False
        if self.cutoff is not None and bound <= self.cutoff:
            return True
        if self.next_bound is None or bound < self.next_bound:
            self.next_bound = bound
        return False
