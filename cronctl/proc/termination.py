"""Ending a run from the supervisor thread: the stop, its SIGKILL, the leftovers, the /proc passes.

A stop (a timeout, a kill, a shutdown) and the look for leftovers once a run
has ended both start from a pass over /proc that finds the run's processes.
Passes asked for in the same round are made as one (`ScanQueue`), and what is
found is signalled in steps (`StopState`, over proc.kill's Termination), with
deadlines instead of sleeps: no kill ever blocks the supervisor thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

from cronctl.models import RunStatus
from cronctl.proc.find import snapshot_runs
from cronctl.proc.identity import ProcIdentity
from cronctl.proc.kill import Termination

if TYPE_CHECKING:
    import psutil

# stop: SIGTERM what is found; force: look again, SIGKILL the lot; leftovers: what outlived the run's end.
Purpose = Literal["stop", "force", "leftovers"]

# How often survivors of a SIGTERM are looked at during their grace.
_SURVIVOR_POLL = 0.05
# A run that ended is looked for leftovers in a pass over /proc. Passes asked for
# within this long are made as one: when hundreds of runs end together, one pass
# per select() round would take the CPU their siblings need to start. A result
# waits for it, so this is how much later a run's end may be recorded.
_LEFTOVER_SCAN_COALESCE = 0.25

T = TypeVar("T")


@dataclass(eq=False)
class StopState:
    """One run's stop (if we began one) and its leftovers (once it ended). Supervisor thread only."""

    stop: tuple[RunStatus, str] | None = None  # (status, reason) of a stop we began
    term: Termination | None = None
    term_deadline: float = 0.0
    term_done: bool = False
    leftovers: Termination | None = None
    leftovers_deadline: float = 0.0
    leftovers_scanned: bool = False
    next_poll: float = 0.0

    @property
    def settled(self) -> bool:
        """No stop of ours is still waiting for its processes to go."""
        return self.term is None or self.term_done

    @property
    def leftovers_killed(self) -> int:
        return self.leftovers.found if self.leftovers is not None else 0

    def found(self, purpose: Purpose, processes: Iterable[psutil.Process], root_pid: int,
              grace: float, now: float) -> None:
        """Act on what a pass over /proc found for this run."""
        if purpose == "stop":
            self.term = Termination(processes, [root_pid])
            self.term.send_term()
            self.term_deadline = now + grace
        elif purpose == "force" and self.term is not None:
            self.term.add(processes)
            self.term.send_kill()
            self.term_done = True
        elif purpose == "leftovers":
            self.leftovers_scanned = True
            processes = list(processes)
            if processes:
                self.leftovers = Termination(processes, [root_pid])
                self.leftovers.send_term()
                self.leftovers_deadline = now + grace
        self.next_poll = now + _SURVIVOR_POLL

    def watch_termination(self, now: float, wake: list[float]) -> bool:
        """Follow a SIGTERM through its grace; True when it is over and SIGKILL is due."""
        assert self.term is not None
        if now >= self.term_deadline:
            # Look again before SIGKILL: a TERM-trapping job may have forked.
            return True
        if now >= self.next_poll:
            self.next_poll = now + _SURVIVOR_POLL
            if not self.term.survivors():
                self.term_done = True
                return False
        wake.append(min(self.term_deadline, self.next_poll))
        return False

    def leftovers_alive(self, now: float, wake: list[float]) -> bool:
        """Whether leftovers still outlive their SIGTERM; SIGKILLed at the end of their grace."""
        assert self.leftovers is not None
        if now >= self.leftovers_deadline:
            self.leftovers.send_kill()
            return False
        if now >= self.next_poll:
            self.next_poll = now + _SURVIVOR_POLL
            if not self.leftovers.survivors():
                return False
        wake.append(min(self.leftovers_deadline, self.next_poll))
        return True


class ScanQueue(Generic[T]):
    """Runs waiting for a pass over /proc, gathered so that one pass serves them all."""

    def __init__(self) -> None:
        self._asked: dict[str, tuple[T, ProcIdentity, Purpose]] = {}
        self._waiting_since: float | None = None

    def __contains__(self, run_id: object) -> bool:
        return run_id in self._asked

    def ask(self, run_id: str, root: ProcIdentity, item: T, purpose: Purpose) -> None:
        self._asked[run_id] = (item, root, purpose)

    @property
    def gathering(self) -> bool:
        """Whether leftovers passes wait to gather more (timeout() has an answer)."""
        return self._waiting_since is not None

    @property
    def asked(self) -> bool:
        """Whether any run waits for a pass."""
        return bool(self._asked)

    def take(self, now: float, more_may_come: bool = True,
             hold_until: float = float("-inf")) -> list[tuple[T, Purpose, list[psutil.Process]]]:
        """Make the pass if one is due now: each asker with what was found for it.

        `more_may_come`: another run still going could ask soon; when none is (a lone
        force-run, the last run of a burst), waiting to gather more would only delay.
        `hold_until`: while a burst's children start (proc/burst.py), a pass only for
        leftovers waits until then: it would take the CPU they need, for a result that
        is not recorded before then anyway. A stop or a kill never waits.
        """
        if not self._asked:
            self._waiting_since = None
            return []
        if more_may_come and all(purpose == "leftovers" for _, _, purpose in self._asked.values()):
            # Nothing waits on these but a result: gather a few more before the pass.
            if self._waiting_since is None:
                self._waiting_since = now
            if now < self._due(hold_until):
                return []
        self._waiting_since = None
        asked, self._asked = self._asked, {}
        # The supervisor's own runs: their roots' identities were taken by this process.
        found = snapshot_runs({run_id: root for run_id, (_, root, _) in asked.items()}, own_roots=True)
        return [(item, purpose, found.get(run_id, [])) for run_id, (item, _, purpose) in asked.items()]

    def timeout(self, now: float, more_may_come: bool = True, hold_until: float = float("-inf")) -> float | None:
        """How long select() may wait before a gathered pass is due; None if none is waiting."""
        if self._waiting_since is None:
            return None
        if not more_may_come:
            return 0.0
        return max(0.0, self._due(hold_until) - now)

    def _due(self, hold_until: float) -> float:
        assert self._waiting_since is not None
        return max(self._waiting_since + _LEFTOVER_SCAN_COALESCE, hold_until)
