"""What one backend adds to the loop's one tick body (Scheduler._tick): its beat.

The tick is the same on every store: heal when the beat says so, serve requests, then
the engine's tick. What differs is said here, once per backend:

- `begin`: whether the store can be worked with at all this tick (PostgreSQL: one beat
  query, which also feeds the due instants; while the database is out of reach the tick
  claims and writes nothing);
- `heal_due` and `healed`: when the healer sweeps (the JSON store: every `heal_every`
  seconds; PostgreSQL: when the beat flagged something, and every SWEEP_EVERY_S);
- `heal_inputs`: the healer's view: the suspect jobs (`LeaseStore.suspects`), the clock
  it judges by, owner liveness and a process killer;
- `serve`: requests other than this host's control files (PostgreSQL: `cronctl_requests`);
- `end`: housekeeping after the tick (PostgreSQL: forget loops gone silent for good);
- `clock_stepped`: a wall-clock step followed (the JSON store moves its `every` slots back
  with a backward one; on PostgreSQL the database's clock judges what is due).

The PostgreSQL beat lives in loop/cluster_beat.py, imported only by a loop that runs there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from cronctl.context import Context
from cronctl.loop.clockstep import ClockStep, follow_backward_step
from cronctl.loop.control import Controls
from cronctl.loop.engine import Engine
from cronctl.loop.heal import Killer, Liveness
from cronctl.proc.kill import kill_run_processes
from cronctl.proc.liveness import lease_checker, owner_alive
from cronctl.store.suspects import Suspect


@dataclass
class HealInputs:
    """What one heal pass judges with (loop/heal.py)."""

    now: datetime
    live: Liveness
    kill: Killer
    found: list[Suspect]


class SuspectSource(Protocol):
    """The engine's due source, as the JSON beat reads it: the store as last read."""

    @property
    def doc(self) -> dict[str, Any]: ...


class TickBeat(Protocol):
    """A backend's part of the tick (see the module doc)."""

    def begin(self) -> float | None:
        """None: tick now; otherwise the store cannot be worked with: wait this long."""
        ...

    def heal_due(self, since_last_heal: float) -> bool: ...

    def heal_inputs(self) -> HealInputs: ...

    def healed(self) -> None: ...

    def first_heal(self, heal: Callable[[], object]) -> None:
        """The heal before the first tick."""
        ...

    def serve(self, controls: Controls) -> None: ...

    def end(self) -> None: ...

    def clock_stepped(self, engine: Engine, step: ClockStep) -> list[str]:
        """Follow a wall-clock step (SPEC §4); the jobs whose slots moved."""
        ...


class JsonBeat:
    """The JSON store's beat: one home, one loop; the store as the engine last read it."""

    def __init__(self, ctx: Context, source: SuspectSource, heal_every: float) -> None:
        self.ctx = ctx
        self.source = source
        self.heal_every = heal_every
        self._read: dict[str, Any] | None = None  # the read `_found` was taken from
        self._found: list[Suspect] = []

    def begin(self) -> float | None:
        return None  # the store is a local file: nothing to reach first

    def heal_due(self, since_last_heal: float) -> bool:
        return since_last_heal >= self.heal_every

    def heal_inputs(self) -> HealInputs:
        clock = self.ctx.clock
        # The engine's cached read keeps every suspect job (loop/due.py), and they are typed again
        # only when it was read again: an idle heal parses and builds nothing.
        doc = self.source.doc
        if doc is not self._read:
            self._read, self._found = doc, self.ctx.leases.suspects(doc)
        live = Liveness(owner_alive=owner_alive, lease_expired=lease_checker(clock.monotonic),
                        monotonic=clock.monotonic)
        return HealInputs(clock.now(), live, kill_run_processes, self._found)

    def healed(self) -> None:
        """Nothing to note: the next sweep is `heal_every` after this one began."""

    def first_heal(self, heal: Callable[[], object]) -> None:
        heal()

    def serve(self, controls: Controls) -> None:
        """Every request comes as a control file (control.serve)."""

    def end(self) -> None:
        """No housekeeping: one loop per home."""

    def clock_stepped(self, engine: Engine, step: ClockStep) -> list[str]:
        """A backward step moves the `every` slots with it (runs held for a slot now the step away go back)."""
        return follow_backward_step(self.ctx, engine, step) if step.step_s < 0 else []
