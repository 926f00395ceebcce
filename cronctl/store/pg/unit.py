"""The unit of work on PostgreSQL: one short transaction locking the named job rows.

A unit locks the job rows it needs (FOR UPDATE in name order, so two loops never
deadlock; the claim paths SKIP LOCKED, leaving rows another loop is deciding on to that
loop), hands the run path the document `document.doc_transaction` assembles from them,
and on a clean exit writes back the changed rows, the claims as `cronctl_runs` rows, the
history records and the audit rows, all in that transaction: a decision and its audit
commit together, so nothing is ever left pending (no outbox).

The judging instant: by default every `now` a caller passes is replaced by the
database's `clock_timestamp()` once the locks are held, and a lease's wall-clock end is
moved onto the database clock by its distance from the caller's clock, so hosts' clocks
do not matter (MULTIHOST §5). `judge_by="caller"` judges at the instants given (the
contract suite's FakeClock).

Where many hosts share the store, a unit judges what one host alone need not
(store/unit.py): a slot already fired is not claimed again (fired.py), a job held ahead
by a claim not yet dispatched is left due (takeover.py), a gate restarts its lease and
a reclaim by lease is fenced on the lease found under the lock (lease_fence.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timezone
from typing import Any, Literal

from cronctl.clock import Clock
from cronctl.models import FAILED_STATUSES
from cronctl.paths import Paths
from cronctl.store import history
from cronctl.store.audit import tell_listeners
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Finished, Lease
from cronctl.store.outbox import OwedHook, WriterAlive
from cronctl.store.pg import chain_rows, functions, lease_fence
from cronctl.store.pg.chain_rows import ChainPlan
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.document import (
    DocTransaction,
    LockRows,
    OpenInOne,
    PlanChains,
    doc_transaction,
    load_jobs,
    rows_due,
    rows_named,
    rows_where,
)
from cronctl.store.pg.fired import drop_fired
from cronctl.store.pg.schema import LIVE_RUN, ODD_ROW, OWING_ROW
from cronctl.store.pg.takeover import without_held

JudgeBy = Literal["database", "caller"]

_DUE = functions.DUE  # the due rows' predicate (document.rows_due locks by it; the tests EXPLAIN it)
_AHEAD = "NOT paused AND next_run_at > %(now)s AND next_run_at <= %(horizon)s"
# The healer's jobs (store/suspects.py): a live run, or a failed last run. Each half read by
# an index, never the jobs (issue 21: an OR over both read every row, 60 ms at 100,000 jobs,
# and the uncommitted rows of an open `apply -f` too): the live runs on the runs' partial
# indexes, the failed last runs on cronctl_jobs_odd, whose predicate (the column `odd`) the
# planner finds implied here; the jobs then by their names.
_SUSPECT = (f"name IN (SELECT job FROM cronctl_runs WHERE {LIVE_RUN}"
            f" UNION SELECT name FROM cronctl_jobs WHERE {ODD_ROW} AND state ->> 'last_status' = ANY(%(failed)s))")
# A job the health pass may find late: unpaused, with targets, its next instant passed.
_MAY_BE_LATE = "NOT paused AND wake_at IS NOT NULL AND wake_at <= %(late_by)s AND spec ? 'notify'"

# SPEC §9: at least 64 KiB of each run's output is kept with the run, for hosts without its log.
OUTPUT_TAIL_BYTES = 64 * 1024


class PgUnit:
    """One `DocTransaction`, judged by the database clock or the caller's (see the module doc)."""

    def __init__(self, tx: DocTransaction, judge_by: JudgeBy, clock: Clock,
                 chosen_at: datetime | None = None) -> None:
        self.tx = tx
        self.judge_by = judge_by
        self.clock = clock
        self.chosen_at = chosen_at  # the instant the rows were chosen at, when that decides (`ahead`)
        self.kept_runs: dict[str, int | None] = {}  # job -> its keep_runs, for the log pruning after the commit
        self.committed: list[Callable[[], None]] = []  # on_commit's, in order

    @property
    def doc(self) -> dict[str, Any]:
        return self.tx.doc

    def judge(self, asked: datetime) -> datetime:
        if self.chosen_at is not None:
            return self.chosen_at
        return self.tx.db_now if self.judge_by == "database" else asked

    def lease(self, lease: Lease) -> Lease:
        """The lease's wall-clock end on the judging clock (its monotonic end is the loop's own)."""
        if self.judge_by == "caller":
            return lease
        return Lease(lease.until_mono, self.tx.db_now + (lease.until_wall - self.clock.now()))

    def emit(self, events: Iterable[Event]) -> None:
        self.tx.events.extend(events)

    def record(self, done: Finished, rows: list[Event], hook: bool = False) -> None:
        """The end, its rows and record in this transaction (an owed hook is its caller's to start)."""
        self.tx.events.extend(rows)
        record = done.record
        if record is None:
            return
        self.tx.keep_record(record)
        tail = log_tail(record.get("log"))
        if tail is not None:
            self.tx.tails[str(record["run_id"])] = tail
        self.kept_runs[str(record["job"])] = done.keep_runs

    def claimable(self) -> dict[str, Any]:
        # A job held ahead by a claim not yet dispatched is left due, never skipped as overlap (takeover.py);
        # a chained job read without its lock (chain_rows) is not this write's to claim.
        doc = without_held(self.tx.doc)
        if self.tx.read_only:
            doc["jobs"] = {name: entry for name, entry in doc["jobs"].items() if name not in self.tx.read_only}
        return doc

    def claimed(self, batch: ClaimBatch) -> None:
        drop_fired(self.tx.conn, self.tx.doc, batch)

    def gate_opened(self, runs: list[Dispatched], at: datetime) -> None:
        lease_fence.restart_leases(self.tx.doc, runs, self.judge(at))

    def renewed_since_judged(self, job: str, run_id: str, reason: str, now: datetime) -> bool:
        return lease_fence.renewed_since_judged(self.tx.doc, job, run_id, reason, now)

    def on_commit(self, then: Callable[[], None]) -> None:
        self.committed.append(then)


class PgUnits:
    """`Units` over one PostgreSQL connection, one transaction at a time (its `lock`)."""

    chains = True  # one row per chain, locked by the writes that decide it (chain_rows.py)
    shared = True

    def __init__(self, conn: Connection, host_id: str, judge_by: JudgeBy, clock: Clock, paths: Paths | None,
                 lock: threading.RLock | None, connect_again: Callable[[], Connection] | None) -> None:
        self._conn = conn
        # A loop outlives database restarts: a connection found broken is replaced by this
        # (the session's reconnect) on the next call; without it the error stays the caller's.
        self._connect_again = connect_again
        # One transaction at a time on the connection: the loop's threads share this store, and
        # a second thread's `transaction()` would otherwise nest inside the first one's.
        self.lock = lock or threading.RLock()
        self.host_id = host_id
        self.judge_by = judge_by
        self.clock = clock
        self.paths = paths  # where this host keeps run logs (pruned after an end); None: none here
        self.deadline_s: float | None = None  # None: the connection's own (store/pg/deadline.py)
        # Told each audit row a unit wrote, once its transaction committed (the loop's terminal
        # echo: run.finished and the rest are written here, not through the audit log).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    @property
    def conn(self) -> Connection:
        if self._connect_again is not None and (self._conn.broken or self._conn.closed):
            self._conn = self._connect_again()
            self._apply_deadline()
        return self._conn

    def set_deadline(self, seconds: float) -> None:
        self.deadline_s = seconds
        self._apply_deadline()

    def _apply_deadline(self) -> None:
        if self.deadline_s is not None and hasattr(self._conn, "deadline_s"):
            self._conn.deadline_s = self.deadline_s

    # --- units -------------------------------------------------------------------------------

    def named(self, names: Iterable[str], *, meta: bool = False, committed_note: str | None = None,
              defer_flush: bool = False) -> AbstractContextManager[PgUnit]:
        wanted = sorted(set(names))
        if not wanted:
            return self._unit(rows_where("false", {}), meta=meta)
        # No chain to plan (the common case): one call (a plan of None, as plan_named's).
        in_one = OpenInOne(lambda conn, keys: functions.open_named(conn, wanted, keys), None)
        return self._unit(rows_named(wanted), meta=meta, chains=lambda conn: chain_rows.plan_named(conn, wanted),
                          in_one=in_one)

    def due(self, now: datetime) -> AbstractContextManager[PgUnit]:
        asked = None if self.judge_by == "database" else now
        # No chain open (the common case): one call, the plan plan_due makes of no open chain.
        in_one = OpenInOne(lambda conn, keys: functions.open_due(conn, asked), ChainPlan(read_dependants=True))
        return self._unit(rows_due(asked), chains=chain_rows.plan_due, in_one=in_one)

    def ahead(self, now: datetime, horizon: datetime) -> AbstractContextManager[PgUnit]:
        judged = self.db_now() if self.judge_by == "database" else now  # the rows to lock depend on it
        rows = rows_where(_AHEAD, {"now": judged, "horizon": judged + (horizon - now)}, skip_locked=True)
        return self._unit(rows, chosen_at=judged, chains=chain_rows.plan_reads)

    def whole(self) -> AbstractContextManager[PgUnit]:
        """Every job locked (`force-run --chain`: the new chain reads the whole graph)."""
        return self._unit(rows_where("true", {}), chains=lambda conn: ChainPlan())

    def chain(self, chain_id: str) -> AbstractContextManager[PgUnit]:
        return self._unit(rows_where("false", {}), chains=lambda conn: chain_rows.plan_chain(conn, chain_id))

    @contextmanager
    def _unit(self, lock: LockRows, *, meta: bool = False, chosen_at: datetime | None = None,
              chains: PlanChains | None = None, in_one: OpenInOne | None = None) -> Iterator[PgUnit]:
        with self.lock, doc_transaction(self.conn, self.host_id, lock, meta=meta, chains=chains,
                                        in_one=in_one) as tx:
            unit = PgUnit(tx, self.judge_by, self.clock, chosen_at)
            yield unit
        for then in unit.committed:
            then()
        self._after_commit(unit)

    def flush_deferred(self) -> None:
        """Nothing is deferred here: a transaction is durable at its commit."""

    def _after_commit(self, unit: PgUnit) -> None:
        """Nothing of the decision is left to write (its rows and records committed with it):
        the listeners are told its rows, and this host's logs of the ended runs' jobs pruned."""
        tx = unit.tx
        if self.listeners and tx.events:
            ts = tx.db_now.astimezone(timezone.utc).isoformat(timespec="milliseconds")
            for event in tx.events:
                tell_listeners(self.listeners, {"ts": ts, "event": str(event.name), "host": self.host_id,
                                                **event.details})
        if self.paths is not None:
            for job in sorted(unit.kept_runs):
                history.prune_logs(self.paths, job, unit.kept_runs[job])

    def locate(self, run_ids: list[str]) -> dict[str, str | None]:
        with self.read():
            rows = self.conn.execute("SELECT run_id, job FROM cronctl_runs WHERE run_id = ANY(%s)",
                                     (run_ids,)).fetchall()
        return {run_id: None for run_id in run_ids} | {str(run_id): str(job) for run_id, job in rows}

    @contextmanager
    def read(self) -> Iterator[None]:
        """A read-only transaction, alone on the connection."""
        with self.lock, self.conn.transaction():
            yield

    def db_now(self) -> datetime:
        """The database clock now (what this store judges by, unless told to judge at the caller's)."""
        with self.read():
            row = self.conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        when: datetime = row[0]
        return when

    # --- reads ---------------------------------------------------------------------------------

    def has_job(self, job: str) -> bool:
        with self.read():
            return self.conn.execute("SELECT 1 FROM cronctl_jobs WHERE name = %s", (job,)).fetchone() is not None

    def entries(self, name: str | None = None, prefix: str | None = None) -> dict[str, Any]:
        with self.read():
            if prefix is not None:
                # LIKE with the prefix escaped: a range of the index on name (cronctl_jobs_prefix).
                return load_jobs(self.conn, "name LIKE %(pattern)s", {"pattern": like_prefix(prefix)}, lock=None)
            if name is None:
                return load_jobs(self.conn, "true", {}, lock=None)
            return load_jobs(self.conn, "name = %(name)s", {"name": name}, lock=None)

    def counters(self) -> dict[str, int]:
        """Every host's counters added up (and those an import brought)."""
        with self.read():
            rows = self.conn.execute("SELECT value FROM cronctl_meta WHERE key = 'counters'"
                                     " OR key LIKE 'counters@%'").fetchall()
        totals: dict[str, int] = {}
        for (counts,) in rows:
            for key, value in counts.items():
                totals[str(key)] = totals.get(str(key), 0) + int(value)
        return totals

    def live_claims(self, job: str, run_id: str | None = None) -> list[dict[str, Any]]:
        where, params = ("job = %s", (job,)) if run_id is None else ("job = %s AND run_id = %s", (job, run_id))
        with self.read():
            rows = self.conn.execute(f"SELECT claim, host_id FROM cronctl_runs WHERE {where} AND claim IS NOT NULL"
                                     " ORDER BY run_id", params).fetchall()
        for claim, host in rows:
            if isinstance(claim.get("owner"), dict):
                claim["owner"]["host"] = host  # whose pid it is (as load_jobs marks it)
        return [row[0] for row in rows]

    def suspect_entries(self, doc: dict[str, Any] | None, late_by: datetime | None = None) -> dict[str, Any]:
        """The healer's jobs, asked of the database (`doc` is not needed). `late_by` (the health
        pass, SPEC §12): also the unpaused jobs with notify targets whose next instant (`wake_at`,
        on its index) is at or before it: those that may be late."""
        with self.read():
            jobs = load_jobs(self.conn, _SUSPECT, {"failed": sorted(str(s.value) for s in FAILED_STATUSES)}, lock=None)
            if late_by is not None:
                jobs.update(load_jobs(self.conn, _MAY_BE_LATE, {"late_by": late_by}, lock=None))
        return jobs

    def history(self, job: str | None, count: int | None) -> list[dict[str, Any]]:
        """Ended runs' records with the host that ran them, the last `count` of them.

        In the JSON store's order: job by job, each oldest first (by end, then by claim).
        """
        if count is not None and count <= 0:
            return []
        with self.read():
            rows = self.conn.execute(
                "SELECT record || jsonb_build_object('host', host_id) FROM"
                " (SELECT record, host_id, job, ended_at, fence FROM cronctl_runs"
                "   WHERE record IS NOT NULL AND (%(job)s::text IS NULL OR job = %(job)s)"
                "   ORDER BY job DESC, ended_at DESC, fence DESC LIMIT %(count)s) AS last"
                " ORDER BY job, ended_at, fence",
                {"job": job, "count": count}).fetchall()
        return [row[0] for row in rows]

    def notify_view(self, now: datetime) -> tuple[dict[str, Any], datetime]:
        with self.read():
            entries = load_jobs(self.conn, OWING_ROW, {}, lock=None)  # on cronctl_jobs_owed
            if self.judge_by == "database":
                row = self.conn.execute("SELECT clock_timestamp()").fetchone()
                now = row[0] if row is not None else now
        return {"jobs": entries}, now

    # --- what the JSON store keeps in an outbox ------------------------------------------------

    def settle(self, runs: list[tuple[str, str]]) -> None:
        """Nothing to drop: here a run's audit rows and history record commit in the same
        transaction as its end (SPEC §9), so no entry is ever left pending."""

    def flush_settled(self) -> None:
        """Nothing to drop (see `settle`)."""

    def deliver_pending(self, writer_alive: WriterAlive, doc: dict[str, Any] | None) -> list[OwedHook]:
        """Nothing is pending on PostgreSQL (see `settle`): no rows or records to complete.

        An `on_failure` hook owed by a loop that died between its commit and the hook's start
        is the one thing this does not recover on PostgreSQL.
        """
        return []


def like_prefix(prefix: str) -> str:
    """The LIKE pattern of the names that start with `prefix` (its `\\`, `%` and `_` taken literally)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def log_tail(log: str | None) -> str | None:
    """The last 64 KiB of a run's local log (None without one): the history record keeps
    only the supervisor's short tail, the run's row this longer one."""
    if not log:
        return None
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - OUTPUT_TAIL_BYTES))
            return f.read().decode(errors="replace").replace("\x00", "\ufffd")  # text columns refuse NUL
    except OSError:
        return None
