"""The unit of work on the JSON document: one `Store.transaction()` under its flock.

A unit's audit rows and run ends are written after the document is in place, as they
always were: a run's end is left pending in the outbox in the same write
(`outbox.owe`), delivered right after it (audit rows, history record, log pruning), and
its outbox entry dropped by the next write made anyway (`settle`). An entry whose writer
died before delivering it is completed by `deliver_pending` (store/outbox.py).

One loop runs per home, and its clock is the store's: a unit judges at the instants it
is given, and its hooks for a shared store (store/unit.py) change nothing.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

from cronctl.errors import StoreWriteError
from cronctl.paths import Paths
from cronctl.store import chain_skips, history, outbox
from cronctl.store.audit import AuditLog
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Finished, Lease
from cronctl.store.jsonstore import Store
from cronctl.store.outbox import OwedHook, WriterAlive
from cronctl.store.schema import claims_of, find_claim, job_of_run


class JsonUnit:
    """The document of one transaction, and what to deliver once it is written."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self.rows: list[Event] = []
        self.ends: list[tuple[list[Event], Finished, bool]] = []
        self.committed: list[Callable[[], None]] = []  # on_commit's, in order

    def judge(self, asked: datetime) -> datetime:
        return asked

    def lease(self, lease: Lease) -> Lease:
        return lease

    def emit(self, events: Iterable[Event]) -> None:
        self.rows.extend(events)

    def record(self, done: Finished, rows: list[Event], hook: bool = False) -> None:
        outbox.owe(self.doc, done, rows, hook)
        self.ends.append((rows, done, hook))

    def claimable(self) -> dict[str, Any]:
        return self.doc

    def claimed(self, batch: ClaimBatch) -> None:
        """Every claim stands: the document is the only record of what fired."""

    def gate_opened(self, runs: list[Dispatched], at: datetime) -> None:
        """A lease stays as claimed: the healer judges this home's owners by their pids."""

    def renewed_since_judged(self, job: str, run_id: str, reason: str, now: datetime) -> bool:
        return False  # one host: an owner judged dead stays dead; the reclaim is fenced on the owner alone

    def on_commit(self, then: Callable[[], None]) -> None:
        self.committed.append(then)


class JsonUnits:
    """`Units` over the JSON document (see the module doc)."""

    chains = True
    shared = False

    def __init__(self, store: Store, audit: AuditLog, paths: Paths) -> None:
        self.store = store
        self.audit = audit
        self.paths = paths
        # Delivered entries of the outbox, dropped from the store by the next write made anyway.
        self._settled: set[tuple[str, str]] = set()
        self._settled_lock = threading.Lock()
        # Units committed with their directory fsync deferred (and their notes), in order.
        self._deferred: list[tuple[JsonUnit, str | None]] = []

    # --- units -------------------------------------------------------------------------------

    def named(self, names: Iterable[str], *, meta: bool = False, committed_note: str | None = None,
              defer_flush: bool = False) -> AbstractContextManager[JsonUnit]:
        # The body looks jobs up by name only: a lazy document, where a few jobs of a large
        # store cost a few jobs, not the store (its counters and metrics are always there).
        return self._unit(lazy=True, committed_note=committed_note, defer_flush=defer_flush)

    def due(self, now: datetime) -> AbstractContextManager[JsonUnit]:
        return self._unit(lazy=False)

    def ahead(self, now: datetime, horizon: datetime) -> AbstractContextManager[JsonUnit]:
        return self._unit(lazy=False)

    def whole(self) -> AbstractContextManager[JsonUnit]:
        return self._unit(lazy=False)

    def chain(self, chain_id: str) -> AbstractContextManager[JsonUnit]:
        # A chain's nodes are found in the stored bytes (JobLines.chain_names): a lazy document.
        return self._unit(lazy=True)

    @contextmanager
    def _unit(self, lazy: bool, committed_note: str | None = None, defer_flush: bool = False) -> Iterator[JsonUnit]:
        """A store transaction that also drops the outbox entries delivered since the last
        one; its rows and run ends delivered once the document is in place and durable.

        `defer_flush` (see `Units.named`): its directory fsync, and so its rows and ends, wait
        for the next unit's commit or `flush_deferred`."""
        with self._settled_lock:
            settled = set(self._settled)
        rev = self.store.last_written_rev
        try:
            with self.store.transaction(lazy_jobs=lazy, flush=not defer_flush) as doc:
                unit = JsonUnit(doc)
                yield unit
                if settled:
                    outbox.drop(doc, settled)
        except Exception as exc:
            if committed_note is None or not self._committed_anyway(rev):
                raise
            print(f"cronctl: {committed_note} but said: {exc}", file=sys.stderr)
        with self._settled_lock:
            self._settled -= settled
            if defer_flush:
                self._deferred.append((unit, committed_note))
        for then in unit.committed:
            then()
        if not defer_flush:
            self.flush_deferred()  # this commit's fsync made theirs durable too: theirs come first
            self._after_commit(unit)

    def flush_deferred(self) -> None:
        """What deferred units still owe, in order: the directory fsync (if no commit since made
        it), then their rows and run ends. A failed fsync is said as their committed_note says."""
        with self._settled_lock:
            deferred, self._deferred = self._deferred, []
        if not deferred:
            return
        try:
            self.store.flush_directory()
        except StoreWriteError as exc:
            note = deferred[0][1] or "the store was written"
            print(f"cronctl: {note} but said: {exc}", file=sys.stderr)
        for unit, _ in deferred:
            self._after_commit(unit)

    def _committed_anyway(self, rev_before: int | None) -> bool:
        """Whether a transaction that raised had put its document in place (a failed directory
        fsync comes after the rename): what follows the commit is then still owed now."""
        after = self.store.last_written_rev
        return after is not None and after != rev_before

    def locate(self, run_ids: list[str]) -> dict[str, str | None]:
        doc = self.store.read()
        return {run_id: job_of_run(doc, run_id) for run_id in run_ids}

    # --- after the commit ------------------------------------------------------------------------

    def _after_commit(self, unit: JsonUnit) -> None:
        """The unit's rows, then each run end it recorded (left pending in the outbox by the
        write: a process that dies before this completes leaves them to `deliver_pending`)."""
        self._write(unit.rows)
        for rows, done, hook in unit.ends:
            self._deliver(rows, done, settle=not hook)

    def _write(self, events: list[Event]) -> None:
        # One O_APPEND write for the lot: a hop's claim writes 40 rows before its gates open.
        self.audit.append_many([(event.name, event.details) for event in events])
        # A chain node skipped in this write is a run: its history record follows its row.
        chain_skips.write_records(self.paths, [(event.name, event.details) for event in events])

    def _deliver(self, rows: list[Event], done: Finished, settle: bool = True) -> None:
        """The rows and record of a committed end (pending in the store until settled)."""
        self._write(rows)
        if done.record is None:
            return
        history.append_record(self.paths, done.record, done.keep_runs)
        history.prune_logs(self.paths, done.record["job"], done.keep_runs)
        if settle:
            self.settle([(done.record["job"], done.record["run_id"])])

    # --- reads ---------------------------------------------------------------------------------

    def has_job(self, job: str) -> bool:
        return job in self.store.read()["jobs"]

    def entries(self, name: str | None = None, prefix: str | None = None) -> dict[str, Any]:
        jobs: dict[str, Any] = self.store.read()["jobs"]
        if prefix is not None:
            return {key: entry for key, entry in jobs.items() if key.startswith(prefix)}
        if name is None:
            return jobs
        return {name: jobs[name]} if name in jobs else {}

    def counters(self) -> dict[str, int]:
        return dict(self.store.read().get("counters") or {})

    def live_claims(self, job: str, run_id: str | None = None) -> list[dict[str, Any]]:
        doc = self.store.read()
        if run_id is not None:
            claim = find_claim(doc, job, run_id)
            return [] if claim is None else [claim]
        return [claim for _, claim in sorted(claims_of(doc["jobs"].get(job)).items())]

    def history(self, job: str | None, count: int | None) -> list[dict[str, Any]]:
        records = history.read_records(self.paths, job)
        if count is None:
            return records
        return records[-count:] if count > 0 else []

    def suspect_entries(self, doc: dict[str, Any] | None) -> dict[str, Any]:
        # The loop passes its cached read (loop/due.py keeps every suspect job): an idle heal parses nothing.
        jobs: dict[str, Any] = (doc if doc is not None else self.store.read())["jobs"]
        return jobs

    def notify_view(self, now: datetime) -> tuple[dict[str, Any], datetime]:
        return self.store.read(), now

    # --- the outbox: what must follow a run's end -----------------------------------------------

    def settle(self, runs: list[tuple[str, str]]) -> None:
        """These runs' pending entries are delivered (hook included): the next write drops them."""
        with self._settled_lock:
            self._settled.update(runs)

    def flush_settled(self) -> None:
        """Drop the settled entries now, in one small write: for a process about to exit,
        whose entries the next process would otherwise find orphaned and check one by one."""
        with self._settled_lock:
            if not self._settled:
                return
        with self._unit(lazy=True):
            pass

    def deliver_pending(self, writer_alive: WriterAlive, doc: dict[str, Any] | None) -> list[OwedHook]:
        """Complete what writers that died left pending: their rows and records now (once),
        their owed hooks returned for the caller to start and `settle`. `doc`: a recent
        read, for the cheap look (the loop passes its cached one)."""
        if not outbox.orphaned(doc if doc is not None else self.store.read(), writer_alive):
            return []
        with self._unit(lazy=False) as unit:
            # Again under the lock: two processes recovering at once never deliver one entry twice.
            found = outbox.orphaned(unit.doc, writer_alive)
            return outbox.deliver_orphans(unit.doc, found, self.audit, self.paths)
