"""A chain hop's warm children, adopted inside the hop's claim write (SPEC §10: 50 ms a hop).

A warm child (proc/warm.py) exists before the run it will be: its pid and start time are
known before the claim. So the hop's claim write (`LeaseStore.claim_chain`) hands the new
claims to a `HopStart`, which adopts a warm child for each it can while the write holds
the jobs' lock, and the write marks those runs dispatched with their run.started rows.
Their gates then open right after that one commit (`committed`, called by the store
before the write's audit rows are written); before, a second write (mark_dispatched, two
more fsyncs on the JSON store) came between the claim and the gates.

The guarantees are the dispatch's own (SPEC §5.2): a child's identity is persisted before
its command begins (its gate opens only after the commit); a write that fails leaves no
claim, and the children adopted for it are cancelled at their gates (nothing of them ran,
their results are no news); a crash after the commit leaves dispatched runs whose gates
never opened, which the healer reclaims as it reclaims any dispatched run of a dead owner
(`lost`, their processes found by the identity recorded). Claims no warm child could be
(none left, a job with a user or limits...) are spawned and marked after the write, as
before.
"""

from __future__ import annotations

import os
from typing import Protocol

from cronctl.proc.childenv import inherited_env
from cronctl.proc.spawn import RunRequest
from cronctl.proc.supervisor import Supervisor
from cronctl.store.claims import ClaimBatch, Dispatched, NewClaim


class HopEngine(Protocol):
    """What a hop's adoption needs of the engine (loop/engine.py)."""

    supervisor: Supervisor

    def request_of(self, new: NewClaim) -> RunRequest: ...

    def now_active(self, new: NewClaim, request: RunRequest, pid: int, start_time: float) -> Dispatched: ...

    def discard(self, run_id: str) -> None: ...

    def open_adopted(self, batch: ClaimBatch, started: list[Dispatched]) -> None: ...


class HopStart:
    """`StartInWrite` for one hop: the warm children it adopted, to open or to undo."""

    def __init__(self, engine: HopEngine) -> None:
        self._engine = engine
        self.started: list[Dispatched] = []
        self.opened = False  # `committed` ran: their gates are the runs' own now

    def __call__(self, claims: list[NewClaim]) -> list[Dispatched]:
        engine = self._engine
        pool = getattr(engine.supervisor, "warm", None)  # None: a supervisor that forks nothing (tests)
        inherited = inherited_env(os.environ)  # once for the batch, not once a child
        for new in claims:
            if pool is None or not len(pool):
                break
            request = engine.request_of(new)
            child = engine.supervisor.adopt_warm(request, inherited)
            if child is not None:
                self.started.append(engine.now_active(new, request, child.pid, child.start_time))
        # No wake of the supervisor thread here: it would register them while this thread
        # writes the store, and take the GIL from it at each system call. Opening the gates
        # wakes it, once for the batch.
        return list(self.started)

    def committed(self, batch: ClaimBatch) -> None:
        """The claim write committed: the gates it kept open now, before its rows are written."""
        self.opened = True
        self._engine.open_adopted(batch, self.started)

    def undo(self) -> None:
        """The write failed: no claim of theirs exists; their gates close, nothing of them ran.
        (A failure after the commit, once they opened, leaves them to their results.)"""
        if self.opened:
            return
        for run in self.started:
            self._engine.discard(run.run_id)
        if self.started:
            self._engine.supervisor.wake()  # it watches them end (exit 125 at their closed gates)

    def rest(self, batch: ClaimBatch) -> ClaimBatch:
        """The claims of `batch` still to spawn and mark (no warm child was theirs)."""
        adopted = {run.run_id for run in self.started}
        return ClaimBatch(claims=[new for new in batch.claims if new.run_id not in adopted])
