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
from typing import Any, TypeGuard

from cronctl.durations import parse_duration
from cronctl.store.notify_owed import targets_of
from cronctl.timefmt import from_iso, to_iso

# default_grace (schedule/intervals.py) is half the cadence clamped to [2m, 2h]: never less than this.
DEFAULT_GRACE_FLOOR = 120.0


def late_bound(entry: dict[str, Any]) -> datetime | None:
    """The earliest instant the health rule (jobs/health.py) can call this job late; None when
    the health pass has no reason to look at it (no targets, paused, done, no slot)."""
    if not _watchable(entry):
        return None
    try:
        slot = from_iso(entry["state"].get("next_run_at"))
        explicit = entry.get("grace")
        grace = DEFAULT_GRACE_FLOOR if explicit is None else parse_duration(explicit, field="grace")
    except Exception:
        return None  # a bad entry: status and doctor say so
    return None if slot is None else slot + timedelta(seconds=grace)


def _watchable(entry: dict[str, Any]) -> bool:
    state = entry["state"]
    return bool(targets_of(entry)) and not (state.get("completed") or state.get("paused") or entry.get("paused"))


class LateWatch:
    """One read's share of the work: keep the jobs late by `cutoff`, note the next bound.

    Most jobs set no grace and hold their slot as the store's fixed-width UTC text: those are
    compared as text and only the earliest is parsed (as loop/due.py does for the slots), so a
    read of 10,000 jobs with targets parses none of them for this.
    """

    def __init__(self, cutoff: datetime | None) -> None:
        self.cutoff = cutoff
        # A default-grace slot at or before this text is late by the cutoff (at the least).
        floor = None if cutoff is None else cutoff - timedelta(seconds=DEFAULT_GRACE_FLOOR)
        self._cutoff_text = to_iso(floor)  # truncated to the millisecond, as slots are written
        self.reset()

    def reset(self) -> None:
        """Forget what was noted (a read that starts over)."""
        self._first_text: str | None = None  # the earliest default-grace slot not kept
        self._first_other: datetime | None = None  # the earliest other bound not kept

    @property
    def next_bound(self) -> datetime | None:
        """The earliest instant a job not kept may turn late; None: no such job."""
        bounds = [self._first_other] if self._first_other is not None else []
        try:
            first = from_iso(self._first_text)
        except ValueError:
            first = None  # text of the right shape that is no instant: status and doctor say so
        if first is not None:
            bounds.append(first + timedelta(seconds=DEFAULT_GRACE_FLOOR))
        return min(bounds) if bounds else None

    def keeps(self, entry: dict[str, Any]) -> bool:
        if not _watchable(entry):
            return False
        text = entry["state"].get("next_run_at")
        if entry.get("grace") is None and _canonical(text):
            if self._cutoff_text is not None and text <= self._cutoff_text:
                return True
            if self._first_text is None or text < self._first_text:
                self._first_text = text
            return False
        bound = late_bound(entry)
        if bound is None:
            return False
        if self.cutoff is not None and bound <= self.cutoff:
            return True
        if self._first_other is None or bound < self._first_other:
            self._first_other = bound
        return False


_CANONICAL_LENGTH = len("2026-01-01T00:00:00.000+00:00")  # to_iso's form: fixed width, UTC


def _canonical(text: Any) -> TypeGuard[str]:
    return isinstance(text, str) and len(text) == _CANONICAL_LENGTH and text.endswith("+00:00")
