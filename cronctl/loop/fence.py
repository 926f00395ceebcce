"""The self-fence of a loop on PostgreSQL: a thread that never waits on the database (SPEC §9).

Another host may reclaim a run once its lease ended on the database clock plus a margin
(`LEASE_MARGIN_S`). The owner's child must be dead before then, whatever the owner's
connection is doing (a stalled round trip can hold the tick thread for its deadline, and
a loop that cannot reach the store cannot renew). So each run gets a kill instant on the
local monotonic clock:

    last renewal the database confirmed (the start of that round trip)
      + lease - kill_grace - FENCE_MARGIN_S

at which SIGTERM goes out; SIGKILL follows `kill_grace` later, still FENCE_MARGIN_S before
the lease ends, and 2 x 5 s before any other host may reclaim. Only clock *rates* matter.

The tick thread tells this one what the database confirmed (`confirmed`) and what ended
(`forget`); this thread only reads those instants and asks the supervisor (thread-safe,
no database) to end the run with reason `self_fenced`. The run's end is recorded by the
tick thread when the store answers again: `killed self_fenced`, or `run.fenced` when
another host took the run meanwhile.

`check_lease` refuses a lease that leaves no room for this: at least three renewals must
fit before the kill instant, else one slow renewal would fence a healthy run.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cronctl.errors import CronctlError

# MULTIHOST §4: the kill is done this long before the lease ends, and the other hosts' reclaim
# margin (loop/cluster.py LEASE_MARGIN_S) is as long again after it.
FENCE_MARGIN_S = 5.0
# A renewal is never asked more often than this (one tick); three of them must fit in the window.
MIN_RENEW_EVERY_S = 1.0
RENEWALS_IN_WINDOW = 3
# How often the thread looks when nothing is due sooner.
IDLE_LOOK_S = 0.5


def fence_window(lease_s: float, kill_grace_s: float) -> float:
    """Seconds from a confirmed renewal to the kill: lease - kill_grace - margin."""
    return lease_s - kill_grace_s - FENCE_MARGIN_S


def minimum_lease(kill_grace_s: float) -> float:
    return kill_grace_s + RENEWALS_IN_WINDOW * MIN_RENEW_EVERY_S + FENCE_MARGIN_S


class LeaseTooShortError(CronctlError):
    """`--lease` leaves no room for the self-fence (exit 1: nothing was started)."""


def check_lease(lease_s: float, kill_graces: dict[str, float], default_grace_s: float) -> None:
    """LeaseTooShortError naming the job whose kill_grace the lease leaves no room for (SPEC §9)."""
    # Without jobs yet, the default kill_grace stands for the jobs to come (a job added later that
    # does not fit is warned about when it runs: SelfFence._warn).
    worst_job, worst = ("", default_grace_s) if not kill_graces else max(
        sorted(kill_graces.items()), key=lambda item: item[1])
    need = minimum_lease(worst)
    if lease_s < need:
        whose = f"job '{worst_job}' has kill_grace {worst:g}s" if worst_job else f"kill_grace is {worst:g}s"
        raise LeaseTooShortError(
            f"--lease {lease_s:g}s is too short on the PostgreSQL store: {whose}, and a run is ended "
            f"kill_grace + {FENCE_MARGIN_S:g}s before its lease runs out, after at least {RENEWALS_IN_WINDOW} "
            f"renewals ({MIN_RENEW_EVERY_S:g}s apart); use --lease {need:g}s or more")


def renew_every(lease_s: float, kill_grace_s: float) -> float:
    """How often to renew so that three renewals fit before the kill instant."""
    window = fence_window(lease_s, kill_grace_s)
    return max(MIN_RENEW_EVERY_S, min(lease_s / 3, window / RENEWALS_IN_WINDOW))


@dataclass
class _Fenced:
    kill_at: float  # monotonic
    job: str


class SelfFence:
    """The fence thread (see the module doc). `end_run(run_id)` is the supervisor's kill."""

    def __init__(self, lease_s: float, monotonic: Callable[[], float], end_run: Callable[[str], object]) -> None:
        self.lease_s = lease_s
        self._mono = monotonic
        self._end_run = end_run
        self._runs: dict[str, _Fenced] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self.fenced: list[str] = []  # run ids this thread ended, oldest first
        self._warned: set[str] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cronctl-self-fence", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def confirmed(self, run_ids: dict[str, tuple[str, float]], since_mono: float) -> None:
        """The database confirmed these runs' leases in a round trip that began at `since_mono`.

        `run_ids` maps each run to (job, kill_grace)."""
        with self._cond:
            for run_id, (job, grace) in run_ids.items():
                window = fence_window(self.lease_s, grace)
                if window < RENEWALS_IN_WINDOW * MIN_RENEW_EVERY_S:
                    self._warn(job, grace)
                previous = self._runs.get(run_id)
                kill_at = since_mono + window
                if previous is None or kill_at > previous.kill_at:
                    self._runs[run_id] = _Fenced(kill_at, job)
            self._cond.notify()

    def forget(self, run_id: str) -> None:
        with self._cond:
            self._runs.pop(run_id, None)

    def kill_at(self, run_id: str) -> float | None:
        with self._cond:
            run = self._runs.get(run_id)
            return None if run is None else run.kill_at

    def _warn(self, job: str, grace: float) -> None:
        if job in self._warned:
            return
        self._warned.add(job)
        print(f"cronctl: warning: job '{job}': kill_grace {grace:g}s leaves too little of --lease {self.lease_s:g}s "
              f"for the self-fence (needs --lease {minimum_lease(grace):g}s); through a network outage its run may "
              "overlap a copy on another host", file=sys.stderr, flush=True)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._stopped:
                    return
                now = self._mono()
                due = [run_id for run_id, run in self._runs.items() if run.kill_at <= now]
                for run_id in due:
                    del self._runs[run_id]
                nearest = min((run.kill_at for run in self._runs.values()), default=now + IDLE_LOOK_S)
                if not due:
                    self._cond.wait(timeout=max(0.01, min(IDLE_LOOK_S, nearest - now)))
                    continue
            for run_id in due:  # outside the lock: the supervisor takes its own
                self.fenced.append(run_id)
                self._end_run(run_id)
