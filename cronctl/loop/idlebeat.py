"""When an idle loop's beat may skip the tick: a quiet spell.

An idle tick on the JSON store (nothing running, claimed, owed or watched) does nothing
but look: a stat of the store, the control requests, the engine's steps, each finding
nothing. On a busy machine each such look runs cold, several hundred µs of CPU, most of an
idle loop's cost. So once a tick has found the loop idle, the beats that follow only beat
(the tick record, and scheduler.json when due) while all of this holds:

- nothing woke the tick thread (a store write seen by loop/storewatch.py, SIGUSR1 for a
  request, a run's end);
- the store's signature (one stat) is the one the tick read;
- the engine's next instant (a slot, a claim ahead, a retry) has not come, on the
  monotonic clock, and the wall clock has not stepped (a forward step can make slots due);
- a full tick ran less than FULL_TICK_EVERY seconds ago (anything else is seen within it).

Any of these failing runs the full tick, which starts a new spell if the loop is still idle.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from cronctl.store.jsonstore import MISSING_STORE, StoreSignature

FULL_TICK_EVERY = 30.0


@dataclass(frozen=True)
class QuietSpell:
    signature: StoreSignature | None  # of the store the last full tick read
    act_at: float  # monotonic: when the engine has something to do (inf: nothing known)
    since: float  # monotonic: the last full tick


class IdleBeats:
    def __init__(self, store: Path) -> None:
        self.store = store
        self.spell: QuietSpell | None = None

    def begin(self, signature: StoreSignature | None, mono: float, engine_wait: float, beat: float) -> None:
        """A full tick found the loop idle; the engine has work in `engine_wait` seconds."""
        self.spell = QuietSpell(signature, mono + engine_wait if engine_wait < beat else math.inf, mono)

    def end(self) -> None:
        self.spell = None

    def beat_only(self, woken: bool, mono: float, clock_stepped: bool) -> bool:
        spell = self.spell
        if spell is None or woken or clock_stepped or mono >= spell.act_at or mono - spell.since >= FULL_TICK_EVERY:
            return False
        return self.unchanged()

    def unchanged(self) -> bool:
        """Whether the store is still the one the spell's tick read (one stat)."""
        now = self._signature()
        return self.spell is not None and now is not None and now == self.spell.signature

    def wait(self, mono: float, beat: float) -> float:
        """How long the tick thread sleeps after a beat that only beat."""
        assert self.spell is not None
        return max(0.0, min(beat, self.spell.act_at - mono))

    def _signature(self) -> StoreSignature | None:
        try:
            return StoreSignature.of(os.stat(self.store))
        except FileNotFoundError:
            return MISSING_STORE
        except OSError:
            return None  # unreadable: the full tick says why
