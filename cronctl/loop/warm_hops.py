"""How many warm children (proc/warm.py) the loop keeps for chain hops, and when.

A chain node this loop dispatched tells how many nodes its end may make ready
(`NewClaim.warm_hint`: the nodes of its chain still waiting, or a scheduled root's
dependants). The loop then spawns that many warm children, at most MAX_WARM, after the
tick's work and while no result waits (it stops at once when one arrives: recording an
end is never delayed by more than one spawn), so that the hop claiming them spawns
nothing. A fan-out wider than the pool spawns the rest as before. KEEP_WARM seconds
after the last chain node it dispatched, the loop lets them go: a loop that runs no
chains keeps no idle shells.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cronctl.proc.supervisor import Supervisor
from cronctl.proc.warm_pool import WarmPool
from cronctl.store.claims import NewClaim

MAX_WARM = 32  # children (and as many guards) at most, a few hundred KiB of memory each
KEEP_WARM = 120.0  # seconds


class WarmHops:
    def __init__(self, supervisor: Supervisor, monotonic: Callable[[], float]) -> None:
        # None: a supervisor that forks nothing (the tests' stand-ins) has no warm children to give.
        self._pool: WarmPool | None = getattr(supervisor, "warm", None)
        self._mono = monotonic
        self._target = 0
        self._until = 0.0

    @property
    def target(self) -> int:
        return self._target if self._mono() < self._until else 0

    def dispatched(self, claims: Iterable[NewClaim]) -> None:
        """Chain nodes (or scheduled roots) were just started: want warm children for what follows."""
        hint = max((new.warm_hint for new in claims if new.chain is not None or new.warm_hint), default=0)
        if hint <= 0:
            return
        now = self._mono()
        self._target = min(MAX_WARM, max(hint, self.target))
        self._until = now + KEEP_WARM

    def tend(self, busy: Callable[[], bool]) -> None:
        """Fill the pool up to the target while `busy()` is false; past KEEP_WARM, empty it."""
        target = self.target
        if self._pool is None:
            return
        if target == 0:
            self._target = 0
            if len(self._pool):
                self._pool.drain()
            return
        self._pool.fill(target, busy)
