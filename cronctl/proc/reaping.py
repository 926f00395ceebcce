"""Collecting the exit status of runs, and reaping orphans in subreaper mode."""

from __future__ import annotations

import os
from collections.abc import Mapping

from cronctl.proc.run import TrackedRun


def collect_exit(run: TrackedRun, now: float) -> bool:
    """Record how the run's root ended, if it has; False while it still runs."""
    try:
        pid, status = os.waitpid(run.pid, os.WNOHANG)
    except ChildProcessError:
        # Someone else reaped it; its status is gone, its end is not.
        run.exit.record(None, now)
    else:
        if pid == 0:
            return False
        run.exit.record(status, now)
    run.output.drain_deadline = now + run.req.drain_timeout
    return True


def reap_orphans(tracked: Mapping[int, TrackedRun], now: float) -> list[TrackedRun]:
    """Reap children reparented to us, never stealing a tracked run's status.

    `tracked` maps the pids of runs that have not exited yet. waitid(WNOWAIT)
    only peeks; a tracked pid gets its status collected (the runs returned),
    and anything else is an orphan we may reap. The caller holds the reap lock,
    so a child spawned meanwhile is never taken for an orphan.
    """
    pending = dict(tracked)
    ended: list[TrackedRun] = []
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return ended
        if info is None or info.si_pid == 0:
            return ended
        run = pending.pop(info.si_pid, None)
        if run is not None:
            if collect_exit(run, now):
                ended.append(run)
            continue
        try:
            os.waitpid(info.si_pid, os.WNOHANG)
        except ChildProcessError:
            pass
