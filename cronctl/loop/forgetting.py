"""A live loop forgets the loops that went silent for good (SPEC §9, store/pg/forget.py, through
the store's `Cluster`: store/cluster.py).

Housekeeping, at most every FORGET_CHECK_S (sooner for a short `--forget-after`), and
only while the database answers: a loop in an outage forgets nobody.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from cronctl.clock import Clock
from cronctl.proc.identity import ProcIdentity, is_alive

if TYPE_CHECKING:  # the PostgreSQL side is imported only when a loop runs on it
    from cronctl.loop.cluster import ClusterMember

FORGET_CHECK_S = 10.0  # one small query per 10 s: a restarted loop's predecessor goes within it


class LoopForgetter:
    def __init__(self, clock: Clock, forget_after_s: float) -> None:
        self._clock = clock
        self.forget_after_s = forget_after_s
        self._every = min(FORGET_CHECK_S, max(0.5, forget_after_s / 2))
        self._last = float("-inf")

    def maybe_forget(self, cluster: ClusterMember) -> int:
        """Forget what is due to be forgotten, if it is time to look; how many loops."""
        mono = self._clock.monotonic()
        if cluster.outage is not None or mono - self._last < self._every:
            return 0
        self._last = mono
        gone = cluster.store.forget_dead_here(cluster.me, _alive)
        gone += cluster.store.forget_silent(self.forget_after_s, cluster.me)
        for loop in gone:
            print(f"cronctl: forgot the loop of host {loop.host} (pid {loop.pid}): silent for {loop.silent_s:.0f}s, "
                  "every run of it reclaimed", file=sys.stderr, flush=True)
        return len(gone)


def _alive(pid: int, start_time: float) -> bool:
    return is_alive(ProcIdentity(pid, start_time))
