"""The runs an engine holds: those it supervises, and those claimed ahead of their slot.

Claiming ahead (DESIGN "Performance notes"): a slot is claimed a little before its
instant and its child spawned blocked at the gate, so forking hundreds costs no
lateness; just before the instant one write marks them dispatched, then the supervisor
opens their gates. The constants and pure functions here say how far ahead, how close
to the instant, and how long the burst of children is left alone; `HeldRuns` keeps an
engine's claim-ahead state (the engine does the writes and the supervisor calls).
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


class HeldRuns:
    """An engine's claim-ahead state: the runs waiting at their gates and what was measured
    of the writes and spawns that put them there. No I/O: the engine does the store writes
    and the supervisor calls, and tells this what came of them."""

    def __init__(self) -> None:
        self.runs: dict[str, HeldRun] = {}
        # Runs handed back before their gate opened: their not_started result is no news.
        self.discarded: set[str] = set()
        self.release_write = 0.0  # seconds the last release write took
        self.spawn_cost = SPAWN_COST_START  # seconds per gated child, as last measured
        self.lateness: list[float] = []  # observed, not yet persisted (the next release or finish writes it)
        self.quiet_until: datetime | None = None  # no result recording before (a burst starts)
        self.handed_back = 0  # runs claimed ahead that shutdown handed back unstarted

    def __len__(self) -> int:
        return len(self.runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self.runs

    def lead(self, configured: float, together: int) -> float:
        return lead(configured, together, self.spawn_cost, self.release_write)

    def margin(self) -> timedelta:
        return release_margin(self.release_write)

    def claimed(self, claim_write: float, spawned: int, spawn_took: float, claims: int) -> None:
        """A claim ahead of `claims` runs took `claim_write` seconds; `spawned` of them took `spawn_took`."""
        if claims and not self.release_write:
            # Before the first release is measured, the claim of the same runs tells its cost: a
            # margin of RELEASE_MARGIN alone opens the first gates late when that write is slow.
            # (An empty claim tells nothing: another loop took the burst.)
            self.release_write = claim_write
        if spawned:
            self.spawn_cost = max(0.0005, spawn_took / claims)

    def hold(self, run: HeldRun) -> None:
        self.runs[run.run_id] = run

    def to_release(self, now: datetime, force: bool) -> list[HeldRun]:
        """The held runs whose instant is within the release margin (all of them: `force`)."""
        margin = self.margin()
        return [h for h in self.runs.values() if not h.released and (force or h.due - now <= margin)]

    def released(self, kept: list[HeldRun], write_took: float) -> list[tuple[datetime, list[str]]]:
        """These were marked dispatched (in `write_took` seconds): the run ids whose gates open
        at each instant, in order; results wait while each burst starts."""
        self.lateness.clear()  # the release write persisted them
        self.release_write = write_took
        by_instant: dict[datetime, list[str]] = {}
        for held in kept:
            held.released = True
            by_instant.setdefault(held.due, []).append(held.run_id)
        for instant, run_ids in by_instant.items():
            quiet = quiet_after(instant, len(run_ids))
            if self.quiet_until is None or quiet > self.quiet_until:
                self.quiet_until = quiet
        return sorted(by_instant.items())

    def quiet(self, now: datetime) -> bool:
        """Whether results still wait (a burst starts); ends the quiet window once it passed."""
        if self.quiet_until is None:
            return False
        if now < self.quiet_until:
            return True
        self.quiet_until = None
        return False

    def end_quiet(self) -> None:
        """Results are recorded now, whatever burst was starting (the loop stops)."""
        self.quiet_until = None

    def to_report(self, now: datetime, ending: Iterable[str]) -> list[HeldRun]:
        """Released runs whose run.started is due: settled after their instant, or ending now."""
        ending = set(ending)
        if not ending and self.quiet_until is not None and now < self.quiet_until:
            return []
        settled = timedelta(seconds=STARTED_REPORT_DELAY)
        return [h for h in self.runs.values() if h.released and (h.run_id in ending or now - h.due >= settled)]

    def started(self, held: HeldRun, opened_wall: datetime) -> float:
        """Its gate opened at `opened_wall`: no longer held; its lateness, noted to persist."""
        self.runs.pop(held.run_id, None)
        late = (opened_wall - held.due).total_seconds()
        self.lateness.append(late)
        return late

    def wakeups(self, now: datetime) -> list[datetime]:
        return wakeups(self.runs.values(), now, self.margin(), self.quiet_until)

    def discard(self, run_id: str) -> None:
        """Handed back or refused before its gate opened: its not_started result is no news."""
        self.runs.pop(run_id, None)
        self.discarded.add(run_id)

    def was_discarded(self, run_id: str) -> bool:
        """Whether a result is of a discarded run (told once)."""
        if run_id in self.discarded:
            self.discarded.discard(run_id)
            return True
        return False
