"""The unit of work every backend offers the run path, and the reads beside it.

Every `LeaseStore` method (store/leases.py) is written once, over this protocol. It asks
its backend for a unit that locks the jobs it needs (`named`; the due ones, `due`; those
due within a horizon, `ahead`; every job, `whole`), takes its decisions on the unit's
document with the pure functions of claims.py and decisions.py, and hands the unit what
must follow them:

- `emit(events)`: audit rows;
- `record(done, rows, hook)`: a run's end, with its audit rows and its history record;
- `on_commit(then)`: what the caller does the moment the unit is committed, before the rest;

and the unit commits when its block ends cleanly (nothing is written when it raises).
How those reach the audit log and the history is the backend's plumbing, not the
algorithm's: the JSON store leaves them pending in its outbox in the same write and
delivers them right after it (store/json_unit.py, store/outbox.py); PostgreSQL writes
them in the same transaction (store/pg/unit.py).

Where the backends rightly judge differently, the unit says so through a hook, so the
algorithm still reads as one: the judging instant and lease (`judge`, `lease`: the
database clock on PostgreSQL), which jobs a scheduled claim may take (`claimable`) and
which new claims stand (`claimed`: a slot already fired on PostgreSQL), what opening a
gate does to a lease (`gate_opened`), and whether a reclaim by lease is fenced on the
lease found under the lock (`renewed_since_judged`: PostgreSQL, MULTIHOST §4).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from cronctl.store.claims import ClaimBatch, Dispatched, Event, Finished, Lease
from cronctl.store.outbox import OwedHook, WriterAlive

# What a backend without job chains (SPEC §10) says when one is asked for (both backends
# store them today: JsonUnits and PgUnits set `chains`; a new backend starts without).
CHAINS_NOT_STORED = "job chains (jobs with 'after') are not stored by this store's backend; nothing was changed"


class JobsUnit(Protocol):
    """One unit of work: the locked jobs' document and what to deliver with its commit."""

    @property
    def doc(self) -> dict[str, Any]:
        """{"jobs": {name: entry}, ...}: the locked entries (and counters, metrics)."""
        ...

    def judge(self, asked: datetime) -> datetime:
        """The instant to decide at (the caller asked for `asked`)."""
        ...

    def lease(self, lease: Lease) -> Lease:
        """`lease` with its wall-clock end on the judging clock."""
        ...

    def emit(self, events: Iterable[Event]) -> None:
        """Audit rows of this unit's decisions, in order."""
        ...

    def record(self, done: Finished, rows: list[Event], hook: bool = False) -> None:
        """A run's end (fenced ends too: their rows still go), `rows` its audit rows in order;
        `hook`: its `on_failure` hook is owed (the caller starts it)."""
        ...

    def claimable(self) -> dict[str, Any]:
        """The document the scheduled claims judge."""
        ...

    def claimed(self, batch: ClaimBatch) -> None:
        """New claims of this unit: those that must not stand are taken out of `batch`."""
        ...

    def gate_opened(self, runs: list[Dispatched], at: datetime) -> None:
        """These runs were just marked dispatched, their gates opening at `at`."""
        ...

    def renewed_since_judged(self, job: str, run_id: str, reason: str, now: datetime) -> bool:
        """Whether a reclaim for `reason` must leave the run: its lease is fresh again."""
        ...

    def on_commit(self, then: Callable[[], None]) -> None:
        """Call `then` right after this unit commits, before its rows are delivered (a chain
        hop's gates open there: the rows need not come first). Not called if it does not commit."""
        ...


class Units(Protocol):
    """A backend's way to units of work, its read primitives and its outbox."""

    chains: bool  # job chains (SPEC §10) are stored here
    shared: bool  # many loops share this store: a notification's try is leased to one of them

    def named(self, names: Iterable[str], *, meta: bool = False, committed_note: str | None = None,
              defer_flush: bool = False) -> AbstractContextManager[JobsUnit]:
        """The jobs `names` (those that exist). `meta`: the unit may change the counters or
        metrics. `committed_note`: a failure after the document was put in place is said on
        stderr with this, and what follows the commit is still delivered. `defer_flush`: a
        backend whose commit ends in a flush of its own (the JSON document's directory fsync)
        may leave it, and what follows the commit, to the next unit's commit or to
        `flush_deferred`: for a unit whose caller writes another at once and makes nothing
        of this one known before it (a chain hop's finish, then its claims)."""
        ...

    def flush_deferred(self) -> None:
        """What deferred units still owe (their flush, their rows and ends), now."""
        ...

    def due(self, now: datetime) -> AbstractContextManager[JobsUnit]:
        """The jobs that may be due at `now` (those another writer holds may be left out)."""
        ...

    def ahead(self, now: datetime, horizon: datetime) -> AbstractContextManager[JobsUnit]:
        """The jobs whose next slot is after `now` and by `horizon` (`judge` of this unit:
        the instant those were chosen at)."""
        ...

    def whole(self) -> AbstractContextManager[JobsUnit]:
        """Every job (a chain's writes need the whole graph)."""
        ...

    def chain(self, chain_id: str) -> AbstractContextManager[JobsUnit]:
        """The jobs of one running chain, looked up by name (a hop claims its ready nodes
        without reading the store)."""
        ...

    def locate(self, run_ids: list[str]) -> dict[str, str | None]:
        """The job of each run id (a run never changes job); None: no such run in flight."""
        ...

    # --- reads, each on its own (no lock) ---

    def has_job(self, job: str) -> bool: ...

    def entries(self, name: str | None = None, prefix: str | None = None) -> dict[str, Any]:
        """Job entries by name: every job, or job `name` alone ({} when there is none), or the
        jobs whose name starts with `prefix`."""
        ...

    def counters(self) -> dict[str, int]: ...

    def live_claims(self, job: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """The claims of `job` (only `run_id`'s, when given), by run id."""
        ...

    def history(self, job: str | None, count: int | None) -> list[dict[str, Any]]: ...

    def suspect_entries(self, doc: dict[str, Any] | None) -> dict[str, Any]:
        """Entries by name of at least every job with a claim or a failed last run (store/suspects.py);
        `doc`: a recent read holding them, for the cheap look (a backend may ask its own index instead)."""
        ...

    def notify_view(self, now: datetime) -> tuple[dict[str, Any], datetime]:
        """A document holding at least the jobs with notifications owed, and the instant to judge them at."""
        ...

    # --- what must follow a run's end (the JSON store's outbox) ---

    def settle(self, runs: list[tuple[str, str]]) -> None: ...

    def flush_settled(self) -> None: ...

    def deliver_pending(self, writer_alive: WriterAlive, doc: dict[str, Any] | None) -> list[OwedHook]: ...
