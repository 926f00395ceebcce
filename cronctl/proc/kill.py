"""Ending a run's processes: SIGTERM, a grace, then SIGKILL, never to a reused pid.

`Termination` is the signalling in steps, so the supervisor's single thread can
drive many at once from its event loop; `terminate_run` drives one with sleeps,
and `kill_run_processes` is the one call the loop, the use cases and doctor share.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cronctl.proc.find import find_run_processes
from cronctl.proc.identity import ProcIdentity

if TYPE_CHECKING:
    import psutil

# How often terminate_run() looks again at processes it is waiting for.
_POLL_INTERVAL = 0.05
# After SIGKILL a process needs the kernel only; this bounds the wait for it.
_KILL_SETTLE = 2.0
# A kill asked for by the loop or an operator never waits longer than this per step,
# whatever kill_grace a job declares: the caller is holding up other work.
MAX_KILL_GRACE = 10.0


@dataclass(frozen=True)
class KillReport:
    terminated: int  # ended after SIGTERM, within the grace
    killed: int  # still there after the grace, sent SIGKILL
    elapsed: float


def _signal_verified(proc: psutil.Process, sig: int) -> bool:
    """Signal `proc` only if the pid still names it, without a reuse race.

    The pidfd is opened first and the identity checked after: if the check
    passes, the pidfd refers to that process and cannot be redirected.
    """
    import psutil

    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return False
    except OSError:
        # Out of fds: psutil checks the identity just before kill(2), which
        # leaves a window of microseconds; better than not signalling at all.
        try:
            proc.send_signal(sig)
            return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
    try:
        if not proc.is_running():
            return False
        signal.pidfd_send_signal(pidfd, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        os.close(pidfd)


def _verified_pgid(proc: psutil.Process) -> int | None:
    try:
        pgid = os.getpgid(proc.pid)
    except OSError:
        return None
    return pgid if proc.is_running() else None


def _is_live(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class Termination:
    """The SIGTERM → grace → SIGKILL of one run, in steps.

    terminate_run() drives it with sleeps; the runner's single thread drives
    many at once from its event loop with deadlines, so no kill blocks it.
    """

    def __init__(self, processes: Iterable[psutil.Process], group_leaders: Iterable[int] = ()) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._leaders = {pid for pid in group_leaders if pid > 1}
        self._sig: int | None = None
        self.killed = 0
        self.add(processes)

    @property
    def found(self) -> int:
        return len(self._procs)

    def add(self, processes: Iterable[psutil.Process]) -> int:
        """Track more processes; they get the signal already sent. Returns how many were new."""
        new = [p for p in processes if p.pid not in self._procs or self._procs[p.pid] != p]
        for proc in new:
            self._procs[proc.pid] = proc
            # A group led by a process of the run is the run's own group.
            self._leaders.add(proc.pid)
        if new and self._sig is not None:
            self._send(self._sig, new)
            if self._sig == signal.SIGKILL:
                self.killed += len(new)
        return len(new)

    def send_term(self) -> None:
        self._sig = signal.SIGTERM
        self._send(signal.SIGTERM, list(self._procs.values()))

    def survivors(self) -> list[psutil.Process]:
        return [p for p in self._procs.values() if _is_live(p)]

    def send_kill(self) -> int:
        """SIGKILL every survivor; returns how many there were."""
        survivors = self.survivors()
        self._sig = signal.SIGKILL
        self._send(signal.SIGKILL, survivors)
        self.killed += len(survivors)
        return len(survivors)

    def _send(self, sig: int, targets: list[psutil.Process]) -> None:
        # The group first: it also reaches members forked after our snapshot.
        own_group = os.getpgrp()
        signalled: set[int] = set()
        for proc in targets:
            pgid = _verified_pgid(proc)
            if pgid is None or pgid in signalled or pgid == own_group or pgid not in self._leaders:
                continue
            signalled.add(pgid)
            try:
                os.killpg(pgid, sig)
            except OSError:
                pass
        for proc in targets:
            _signal_verified(proc, sig)


def terminate_run(
    run_id: str,
    root: ProcIdentity | None,
    grace: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> KillReport:
    """SIGTERM every process of the run, wait up to `grace`, SIGKILL the rest.

    The snapshot is taken before any signal, while the tree is still intact:
    once the root dies its children are reparented and only the session and
    environment clues remain.
    """
    began = time.monotonic()
    leaders = [root.pid] if root is not None else []
    term = Termination(find_run_processes(run_id, root), leaders)
    term.send_term()
    _wait_for_exit(term, run_id, root, grace, sleep, began)
    if term.survivors():
        term.add(find_run_processes(run_id, root))
        term.send_kill()
        _wait_for_exit(term, run_id, root, _KILL_SETTLE, sleep, time.monotonic())
    return KillReport(term.found - term.killed, term.killed, time.monotonic() - began)


def _wait_for_exit(
    term: Termination,
    run_id: str,
    root: ProcIdentity | None,
    limit: float,
    sleep: Callable[[float], None],
    began: float,
) -> None:
    # Slept time is counted as well as real time, so an injected sleep that
    # does not advance the clock still ends the wait.
    slept = 0.0
    while max(slept, time.monotonic() - began) < limit:
        if not term.survivors():
            # Something may have been forked during the grace: look once more.
            if not term.add(find_run_processes(run_id, root)):
                return
            continue
        step = min(_POLL_INTERVAL, max(0.0, limit - slept))
        sleep(step)
        slept += step


def kill_run_processes(run_id: str, child: dict[str, Any] | None, grace: float) -> int:
    """SIGTERM, then SIGKILL after `grace`, every process of run `run_id`; how many were ended.

    `child` is the claim's child record (pid + start time) when known; the run's other
    processes are found by the run id in their environment (see proc.find).
    """
    root = ProcIdentity(int(child["pid"]), float(child["start_time"])) if child and child.get("pid") else None
    report = terminate_run(run_id, root, grace=min(grace, MAX_KILL_GRACE))
    return report.terminated + report.killed
