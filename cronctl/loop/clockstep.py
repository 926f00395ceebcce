"""Wall-clock steps seen by the loop (SPEC §4): NTP stepping, a restored VM snapshot, a hand.

The loop compares the wall clock with the monotonic clock at every tick; their
difference moves only when the wall clock is stepped (NTP's slewing moves it by
microseconds a second). A move of more than STEP_THRESHOLD_S either way is a step: it
is audited `clock.jumped`, said on stderr and kept in the heartbeat for `status`.

After a backward step, cron jobs wait for their next wall-clock slot (a slot never
fires twice), but `every` jobs follow elapsed time: their next slot is moved back by
the step, so an `every 5s` job fires 5 s after its last run instead of waiting out the
step. A forward step needs nothing here: the slots it jumped over are a misfire that
`catchup` handles. On PostgreSQL the database's clock judges what is due, so a step of
this host's clock is audited and shown, and moves no slot.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cronctl.clock import Clock
from cronctl.context import Context
from cronctl.loop.engine import Engine
from cronctl.models import AuditEvent
from cronctl.timefmt import from_iso, to_iso

STEP_THRESHOLD_S = 2.0


@dataclass(frozen=True)
class ClockStep:
    step_s: float  # positive: the wall clock jumped forward; negative: back
    wall_before: datetime  # what the wall clock would say without the step
    wall_after: datetime

    def to_dict(self) -> dict[str, Any]:
        return {"at": to_iso(self.wall_after), "step_s": round(self.step_s, 3)}


class ClockWatch:
    """Wall against monotonic, tick after tick."""

    def __init__(self, clock: Clock, threshold_s: float = STEP_THRESHOLD_S) -> None:
        self._clock = clock
        self._threshold = threshold_s
        self._offset = self._read()[2]

    def _read(self) -> tuple[datetime, float, float]:
        wall, mono = self._clock.now(), self._clock.monotonic()
        return wall, mono, wall.timestamp() - mono

    def stepped(self) -> bool:
        """Whether `check` would find a step now (without taking it: the next tick records it)."""
        return abs(self._read()[2] - self._offset) > self._threshold

    def check(self) -> ClockStep | None:
        """The step since the last check, if one over the threshold happened."""
        wall, _mono, offset = self._read()
        step = offset - self._offset
        # Followed at every check: a slow slew never adds up to a step.
        self._offset = offset
        if abs(step) <= self._threshold:
            return None
        return ClockStep(step, wall - timedelta(seconds=step), wall)


def shift_interval_slots(doc: dict[str, Any], step_s: float) -> list[str]:
    """Move the next slot of every `every` job by a (backward) step: elapsed-time cadence.

    A pending retry moves with it (it is timed from its failure, in elapsed time too).
    Returns the jobs moved.
    """
    moved = []
    delta = timedelta(seconds=step_s)
    for name, entry in doc["jobs"].items():
        if not entry.get("every") or entry.get("after"):
            continue
        state = entry["state"]
        retry = state.get("retry") if isinstance(state.get("retry"), dict) else None
        changed = _shift(state, "next_run_at", delta)
        changed = (retry is not None and _shift(retry, "due_at", delta)) or changed
        if changed:
            moved.append(name)
    return sorted(moved)


def _shift(holder: dict[str, Any], key: str, delta: timedelta) -> bool:
    value = holder.get(key)
    when = from_iso(value) if isinstance(value, str) else None
    if when is None:
        return False
    holder[key] = to_iso(when + delta)
    return True


def record_step(ctx: Context, step: ClockStep, moved: list[str]) -> None:
    """The audit row and the line on stderr."""
    ctx.audit.append(AuditEvent.CLOCK_JUMPED, step_s=round(step.step_s, 3), wall_before=to_iso(step.wall_before),
                     wall_after=to_iso(step.wall_after), direction="forward" if step.step_s > 0 else "backward",
                     every_jobs_moved=len(moved))
    way = "forward" if step.step_s > 0 else "back"
    then = (f"; the next slot of {len(moved)} 'every' job(s) moved with it (elapsed-time cadence)"
            if moved else "")
    print(f"cronctl: warning: the wall clock stepped {way} by {abs(step.step_s):.1f}s{then}", file=sys.stderr,
          flush=True)


def follow_backward_step(ctx: Context, engine: Engine, step: ClockStep) -> list[str]:
    """On the JSON store, after a backward step: runs held at their gate for a slot (now the
    length of the step away) are handed back, then every `every` job's next slot moves."""
    engine.cancel_held("clock_jumped")
    with ctx.store.transaction() as doc:
        moved = shift_interval_slots(doc, step.step_s)
    engine.due.invalidate()
    return moved
