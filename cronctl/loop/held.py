"""The runs an engine holds: those it supervises, and those claimed ahead of their slot.

Claiming ahead (DESIGN "Performance notes"): a slot is claimed a little before its
instant and its child spawned blocked at the gate, so forking hundreds costs no
lateness; just before the instant one write marks them dispatched, then the supervisor
opens their gates. The constants and pure functions here say how far ahead, how close
to the instant, and how long the burst of children is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from cronctl.models import JobSpec

# How long before its instant a slot is claimed and its child spawned at the gate, at
# least; more when many children are due at once (SPAWN_COST_START each, then measured).
PRESPAWN_LEAD = 2.0
SPAWN_COST_START = 0.004
# The "dispatched" write of runs claimed ahead is made this much (plus twice the last
# such write's duration) before their instant, then the supervisor opens their gates.
RELEASE_MARGIN = 0.05
# run.started rows of runs released at an instant are written this long after it, when
# the burst of children no longer needs the CPU.
STARTED_REPORT_DELAY = 0.3
# While a batch released at an instant starts, its children need every core: results
# are recorded (and run.started rows written) only after this many seconds per run
# released, at most BURST_QUIET_MAX.
BURST_QUIET_PER_RUN = 0.002
BURST_QUIET_MAX = 1.0


@dataclass
class ActiveRun:
    """A run this engine's supervisor watches, from its spawn to its recorded end."""

    job: str
    run_id: str
    spec: JobSpec
    slot: str
    attempt: int
    log_path: str


@dataclass
class HeldRun:
    """A run claimed ahead of its slot, its child waiting at the gate."""

    job: str
    run_id: str
    spec: JobSpec
    slot: str
    due: datetime  # slot + jitter: when the gate opens
    advanced_to: str | None  # what the claim set next_run_at to
    pid: int
    start_time: float
    released: bool = False  # marked dispatched, gate opening handed to the supervisor


def lead(configured: float, together: int, spawn_cost: float, release_write: float) -> float:
    """The configured lead, plus twice the time to spawn the children due together, plus
    room for the two store writes a big store makes slow (the claim ahead, then the
    release; the last release write tells their cost)."""
    return configured + 2 * together * spawn_cost + 3 * release_write


def release_margin(release_write: float) -> timedelta:
    return timedelta(seconds=RELEASE_MARGIN + 2 * release_write)


def quiet_after(instant: datetime, released: int) -> datetime:
    """Until when results wait after `released` runs had their gates opened at `instant`."""
    return instant + timedelta(seconds=min(BURST_QUIET_MAX, BURST_QUIET_PER_RUN * released))


def wakeups(held: Iterable[HeldRun], now: datetime, margin: timedelta, quiet: datetime | None) -> list[datetime]:
    """When the tick must run for the held runs: to release each, then to report it started."""
    wake: list[datetime] = []
    for run in held:
        if not run.released:
            wake.append(run.due - margin)
            continue
        # Never sooner than a moment from now: a gate the supervisor has yet to open, or
        # a result on its way, must not make the tick spin.
        report_at = max(run.due + timedelta(seconds=STARTED_REPORT_DELAY), now + timedelta(seconds=0.05))
        wake.append(max(report_at, quiet) if quiet is not None else report_at)
    return wake
