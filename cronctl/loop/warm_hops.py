"""How many warm children (proc/warm.py) the loop keeps for chain hops, and when.

A chain node this loop dispatched tells how many nodes its end may make ready
(`NewClaim.warm_hint`: the nodes of its chain still waiting, or a scheduled root's
dependants). The loop then spawns that many warm children, at most MAX_WARM, after the
tick's work and while no result waits (it stops at once when one arrives: recording an
end is never delayed by more than one spawn), so that the hop claiming them spawns
nothing. A scheduled root claimed ahead of its slot gets them before the slot; a forced
chain's root before it starts. A fan-out wider than the pool spawns the rest as before. KEEP_WARM seconds
after the last chain node it dispatched, the loop lets them go: a loop that runs no
chains keeps no idle shells.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable

from cronctl.proc.supervisor import Supervisor
from cronctl.proc.warm_pool import WarmPool
from cronctl.store.claims import NewClaim

MAX_WARM = 32  # children (and as many guards) at most, a few hundred KiB of memory each
# CRONCTL_WARM_CHILDREN=N: at most N instead (0: none; every hop then spawns its children).
MAX_ENV = "CRONCTL_WARM_CHILDREN"
KEEP_WARM = 120.0  # seconds


class WarmHops:
    def __init__(self, supervisor: Supervisor, monotonic: Callable[[], float]) -> None:
        # None: a supervisor that forks nothing (the tests' stand-ins) has no warm children to give.
        self._pool: WarmPool | None = getattr(supervisor, "warm", None)
        self._mono = monotonic
        self._target = 0
        self._until = 0.0
        self._max = max_warm()

    @property
    def target(self) -> int:
        return self._target if self._mono() < self._until else 0

    def dispatched(self, claims: Iterable[NewClaim]) -> None:
        """Chain nodes (or scheduled roots) were just started: want warm children for what follows."""
        hint = max((new.warm_hint for new in claims if new.chain is not None or new.warm_hint), default=0)
        if hint <= 0:
            return
        now = self._mono()
        self._target = min(self._max, max(hint, self.target))
        self._until = now + KEEP_WARM

    def before_start(self, claims: list[NewClaim]) -> None:
        """The first run of a forced chain's root (its run id is the chain's): its chain's warm
        children are made before it starts, so that even a root that ends at once hops warm.
        The cost moves, it does not vanish: the root starts about a millisecond per child later."""
        roots = [new for new in claims if new.chain is not None and new.chain == new.run_id]
        if self._pool is None or not roots:
            return
        self.dispatched(roots)
        if self.target == 0:
            return  # CRONCTL_WARM_CHILDREN=0
        self._pool.fill(self.target + len(roots), lambda: False)  # the roots adopt one each too

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


def max_warm() -> int:
    """MAX_WARM, or what CRONCTL_WARM_CHILDREN says (a bad value is named on stderr, not fatal)."""
    raw = os.environ.get(MAX_ENV)
    if raw is None:
        return MAX_WARM
    try:
        value = int(raw)
        if value < 0:
            raise ValueError
    except ValueError:
        print(f"cronctl: {MAX_ENV}={raw!r} is not a count of children; using {MAX_WARM}", file=sys.stderr)
        return MAX_WARM
    return value
