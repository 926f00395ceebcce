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
from cronctl.proc.burst import BURST_QUIET_MAX as BURST_QUIET_MAX
from cronctl.proc.burst import BURST_QUIET_PER_RUN as BURST_QUIET_PER_RUN
from cronctl.proc.burst import burst_quiet

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
# are recorded (and run.started rows written) only after BURST_QUIET_PER_RUN seconds per
# run released, at most BURST_QUIET_MAX (proc/burst.py: the supervisor waits as long).


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
    # How many runs of every loop fire at its instant (the store said so when it was claimed):
    # the burst whose children start together, of which this loop may hold only a share.
    together: int = 1


def lead(configured: float, together: int, spawn_cost: float, release_write: float) -> float:
    """The configured lead, plus twice the time to spawn the children due together, plus
    room for the two store writes a big store makes slow (the claim ahead, then the
    release; the last release write tells their cost)."""
    return configured + 2 * together * spawn_cost + 3 * release_write


# A write of more runs than any measured is judged in proportion, up to this many times
# the measured one: from a small write (its fixed cost counted once per run), the proportion
# would run to seconds and claim the next burst while this one starts.
WRITE_SCALE_MAX = 4.0


def write_for(runs: int, took: float, of: int) -> float:
    """How long a write of `runs` held runs may take, from one of `of` runs that took `took`:
    as long at least, and in proportion for more (each run's job row is read and written)."""
    return took * min(WRITE_SCALE_MAX, max(1.0, runs / max(1, of)))


def release_margin(release_write: float) -> timedelta:
    return timedelta(seconds=RELEASE_MARGIN + 2 * release_write)


def quiet_after(instant: datetime, released: int) -> datetime:
    """Until when results wait after `released` runs had their gates opened at `instant`."""
    return instant + timedelta(seconds=burst_quiet(released))


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
        # (seconds, runs) of the largest recent write of held runs, a claim ahead or a release:
        # what a release of more runs than the last one is judged by (write_for).
        self.sized_write: tuple[float, int] | None = None
        self.spawn_cost = SPAWN_COST_START  # seconds per gated child, as last measured
        # Children spawned by the claim that measured spawn_cost: a claim of fewer than half as
        # many (a share of a split burst) does not replace it, or the lead of the next whole
        # burst is judged by a few children spawned in a quiet moment.
        self.spawn_batch = 0
        self.lateness: list[float] = []  # observed, not yet persisted (the next release or finish writes it)
        self.quiet_until: datetime | None = None  # no result recording before (a burst starts)
        self.handed_back = 0  # runs claimed ahead that shutdown handed back unstarted

    def __len__(self) -> int:
        return len(self.runs)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self.runs

    def lead(self, configured: float, together: int) -> float:
        return lead(configured, together, self.spawn_cost, self.write_estimate(together))

    def margin(self, runs: int | None = None) -> timedelta:
        """How long before their instant `runs` held runs (default: all not yet released) are released."""
        if runs is None:
            runs = sum(1 for held in self.runs.values() if not held.released)
        return release_margin(self.write_estimate(runs))

    def write_estimate(self, runs: int) -> float:
        """Seconds the release write of `runs` held runs may take: judged by the largest write
        of held runs measured (the claim of these very runs, usually), not by the last release
        alone (a release of 500 runs judged by the last one, of 9, opened its gates 250 ms late)."""
        if self.sized_write is None:
            return self.release_write
        return max(self.release_write, write_for(runs, *self.sized_write))

    def _measured(self, took: float, runs: int) -> None:
        """A write of `runs` held runs took `took` seconds: kept unless a larger one is known
        (a write of at least half as many replaces it: the store's cost may have changed)."""
        if self.sized_write is None or 2 * runs >= self.sized_write[1]:
            self.sized_write = (took, runs)

    def claimed(self, claim_write: float, spawned: int, spawn_took: float, claims: int) -> None:
        """A claim ahead of `claims` runs took `claim_write` seconds; `spawned` of them took `spawn_took`."""
        if claims:
            # The claim of the runs a release will mark tells its cost too (write_estimate): the
            # first release, or one of more runs than the last, is otherwise judged too short
            # and opens its gates late. (An empty claim tells nothing: another loop took the burst.)
            self._measured(claim_write, claims)
        if spawned and 2 * spawned >= self.spawn_batch:
            self.spawn_cost = max(0.0005, spawn_took / claims)
            self.spawn_batch = spawned

    def hold(self, run: HeldRun) -> None:
        self.runs[run.run_id] = run

    def to_release(self, now: datetime, force: bool) -> list[HeldRun]:
        """The held runs whose instant is within the release margin (all of them: `force`)."""
        waiting = [h for h in self.runs.values() if not h.released]
        margin = self.margin(len(waiting))
        return [h for h in waiting if force or h.due - now <= margin]

    def released(self, kept: list[HeldRun], write_took: float) -> list[tuple[datetime, list[str], int]]:
        """These were marked dispatched (in `write_took` seconds): the run ids whose gates open
        at each instant, in order, with the size of the burst there; results wait while each
        burst starts (all of it: another loop's share of it takes the CPU as much as ours)."""
        self.lateness.clear()  # the release write persisted them
        self.release_write = write_took
        if kept:
            self._measured(write_took, len(kept))
        by_instant: dict[datetime, list[str]] = {}
        bursts: dict[datetime, int] = {}
        for held in kept:
            held.released = True
            by_instant.setdefault(held.due, []).append(held.run_id)
            bursts[held.due] = max(bursts.get(held.due, 0), held.together)
        opening = []
        for instant, run_ids in sorted(by_instant.items()):
            burst = max(len(run_ids), bursts[instant])
            quiet = quiet_after(instant, burst)
            if self.quiet_until is None or quiet > self.quiet_until:
                self.quiet_until = quiet
            opening.append((instant, run_ids, burst))
        return opening

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
