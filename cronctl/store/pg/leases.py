"""`LeaseStore` on PostgreSQL: the JSON store's decisions, taken under the job rows' locks.

Each method is one short transaction (`doc_transaction`): it locks the rows of the jobs
it touches, runs the same pure functions of `store/claims.py` the JSON store runs, and
writes back the changed rows, the claims as `cronctl_runs` rows, the history records and
the audit rows, all in that transaction: a decision and its audit commit together.

The judging instant: by default every `now` a caller passes is replaced by the
database's `clock_timestamp()`, and a lease's wall-clock end is moved onto the database
clock by its distance from the caller's clock, so hosts' clocks do not matter (MULTIHOST
§5). `judge_by="caller"` judges at the instants given (the contract suite's FakeClock).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Literal

from cronctl.clock import Clock, SystemClock
from cronctl.errors import StoreError
from cronctl.jobs.state import JobView, get_entry
from cronctl.models import FAILED_STATUSES, AuditEvent, Fault, RunStatus
from cronctl.paths import Paths
from cronctl.store import claims as claims_mod
from cronctl.store import history, notify_owed
from cronctl.store.audit import tell_listeners
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Finished, Lease, Outcome, Owner
from cronctl.store.leases import (  # the private judgments are shared: both backends decide alike
    HeldGate,
    Refused,
    RunClaim,
    RunEnd,
    Unhold,
    _blocked_again,
    _changed_since_claim,
    adopt_claims,
    rearm_wedged,
    run_claim,
)
from cronctl.store.outbox import OwedHook, WriterAlive
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.document import DocTransaction, doc_transaction, load_jobs
from cronctl.store.pg.fired import drop_fired
from cronctl.store.pg.lease_fence import renewed_since_judged, restart_leases
from cronctl.store.pg.schema import LIVE_STATES
from cronctl.store.pg.takeover import held_by_silent_loops, reclaim_in, take_over, without_held
from cronctl.store.schema import bump_counter, find_claim

JudgeBy = Literal["database", "caller"]

_BY_NAMES = "name = ANY(%(names)s)"
# The instant in a sub-select (a parameter, not a volatile call per row), so the index on wake_at range-scans.
_DUE = "NOT paused AND wake_at <= (SELECT coalesce(%(now)s, clock_timestamp()))"
# A job the health pass may find late: unpaused, with targets, its next instant passed.
_MAY_BE_LATE = "NOT paused AND wake_at IS NOT NULL AND wake_at <= %(late_by)s AND spec ? 'notify'"
_AHEAD = "NOT paused AND next_run_at > %(now)s AND next_run_at <= %(horizon)s"


class PgLeaseStore:
    """`LeaseStore` over one PostgreSQL connection (see the module doc)."""

    def __init__(self, conn: Connection, host_id: str, *, judge_by: JudgeBy = "database",
                 clock: Clock | None = None, paths: Paths | None = None,
                 lock: threading.RLock | None = None,
                 connect_again: Callable[[], Connection] | None = None) -> None:
        self._conn = conn
        # A loop outlives database restarts: a connection found broken is replaced by this
        # (the session's reconnect) on the next call; without it the error stays the caller's.
        self._connect_again = connect_again
        # One transaction at a time on the connection: the loop's threads share this store, and
        # a second thread's `transaction()` would otherwise nest inside the first one's.
        self.lock = lock or threading.RLock()
        self.host_id = host_id
        self.judge_by = judge_by
        self.clock = clock or SystemClock()
        self.paths = paths  # where this host keeps run logs (pruned after a finish); None: none here
        self.deadline_s: float | None = None  # None: the connection's own (store/pg/deadline.py)
        # Told each audit row this store wrote, once its transaction committed (the loop's
        # terminal echo: run.finished and the rest are written here, not through the audit log).
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    @property
    def conn(self) -> Connection:
        if self._connect_again is not None and (self._conn.broken or self._conn.closed):
            self._conn = self._connect_again()
            self._apply_deadline()
        return self._conn

    def set_deadline(self, seconds: float) -> None:
        """Every round trip of this store's connections gets `seconds` (a loop's: a share of its lease)."""
        self.deadline_s = seconds
        self._apply_deadline()

    def _apply_deadline(self) -> None:
        if self.deadline_s is not None and hasattr(self._conn, "deadline_s"):
            self._conn.deadline_s = self.deadline_s

    # --- claim ---------------------------------------------------------------------------

    def claim_due(self, now: datetime, owner: Owner, lease: Lease, capacity: int | None = None) -> ClaimBatch:
        asked = None if self.judge_by == "database" else now
        with self._tx(_DUE, {"now": asked}, skip_locked=True) as tx:
            # A job held ahead by a claim not yet dispatched is left due, never skipped as overlap (takeover.py).
            batch = claims_mod.claim_due(without_held(tx.doc), self._now(tx, now), owner, self._lease(tx, lease),
                                         capacity)
            drop_fired(tx.conn, tx.doc, batch)
            tx.events.extend(batch.events)
        return batch

    def claim_ahead(self, now: datetime, horizon: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None) -> ClaimBatch:
        judged = self.db_now() if self.judge_by == "database" else now  # the rows to lock depend on it
        horizon = judged + (horizon - now)
        with self._tx(_AHEAD, {"now": judged, "horizon": horizon}, skip_locked=True) as tx:
            batch = claims_mod.claim_ahead(tx.doc, judged, horizon, owner, self._lease(tx, lease), capacity)
            drop_fired(tx.conn, tx.doc, batch)
            for new in batch.claims:
                new.advanced_to = tx.doc["jobs"][new.job]["state"].get("next_run_at")
            tx.events.extend(batch.events)
        return batch

    def claim_force(self, job: str, now: datetime, owner: Owner, lease: Lease) -> ClaimBatch:
        with self._jobs([job]) as tx:
            batch = claims_mod.claim_force(tx.doc, job, self._now(tx, now), owner, self._lease(tx, lease))
            drop_fired(tx.conn, tx.doc, batch)
            tx.events.extend(batch.events)
        return batch

    # --- the gate --------------------------------------------------------------------------

    def mark_dispatched(self, owner: Owner, runs: list[Dispatched], now: datetime) -> list[Dispatched]:
        with self._jobs([run.job for run in runs], meta=True) as tx:
            judged = self._now(tx, now)
            kept = claims_mod.mark_dispatched(tx.doc, owner, runs, judged)
            restart_leases(tx.doc, kept, judged)
            return kept

    def release_held(self, owner: Owner, gates: list[HeldGate], lateness: list[float]) -> list[str]:
        """As `JsonLeaseStore.release_held`: dispatch the held runs, hand back the changed ones."""
        kept: list[str] = []
        with self._jobs([gate.job for gate in gates], meta=True) as tx:
            for gate in gates:
                why = _changed_since_claim(tx.doc, gate, owner)
                if why is not None:
                    event = claims_mod.unhold(tx.doc, gate.job, gate.run_id, gate.advanced_to, why)
                    tx.events.append(event or Event(AuditEvent.RUN_SKIPPED, {
                        "job": gate.job, "run_id": gate.run_id, "slot": gate.slot,
                        "reason": "cancelled_before_slot", "why": why}))
                    continue
                if claims_mod.mark_dispatched(tx.doc, owner, [gate.run], gate.opens_at, observe=False):
                    restart_leases(tx.doc, [gate.run], self._now(tx, gate.opens_at))
                    kept.append(gate.run_id)
            _observe_all(tx.doc, lateness)
        return kept

    def unhold(self, runs: list[Unhold], why: str) -> int:
        with self._jobs([run.job for run in runs]) as tx:
            for run in runs:
                event = claims_mod.unhold(tx.doc, run.job, run.run_id, run.advanced_to, why)
                if event is not None:
                    tx.events.append(event)
            return len(tx.events)

    def release_refused(self, owner: Owner, refused: list[Refused], now: datetime) -> None:
        if not refused:
            return
        with self._jobs([item.job for item in refused]) as tx:
            for item in refused:
                state = tx.doc["jobs"].get(item.job, {}).get("state", {})
                if item.outcome is None or _blocked_again(item, item.outcome, state):
                    claims_mod.release(tx.doc, item.job, item.run_id)
                    tx.events.append(item.event)
                    continue
                done = claims_mod.finish(tx.doc, item.job, item.run_id, owner, item.outcome, self._now(tx, now))
                if item.always_record:  # a forced run: its asker learns from the record that nothing ran
                    tx.events.append(item.event)
                else:
                    state["blocked"] = item.outcome.output_tail
                tx.events.extend(done.events)
                tx.keep_record(done.record)

    # --- leases ----------------------------------------------------------------------------

    def renew(self, owner: Owner, runs: dict[str, str], lease: Lease) -> list[str]:
        with self._jobs(list(runs.values())) as tx:
            return claims_mod.renew(tx.doc, owner, runs, self._lease(tx, lease))

    def take_over_held(self) -> list[str]:
        """Reclaim the claims held ahead by loops gone silent, their slots due again here (takeover.py)."""
        with self._read():
            found = held_by_silent_loops(self.conn)
        taken = []
        for job, run_id in found:
            with self._jobs([job], meta=True) as tx:
                if take_over(tx, job, run_id):
                    taken.append(run_id)
        return taken

    def adopt(self, old: Owner, new: Owner, runs: dict[str, str]) -> int:
        with self._jobs(list(runs.values())) as tx:
            return adopt_claims(tx.doc, old, new, runs)

    # --- finish ------------------------------------------------------------------------------

    def finish_many(self, owner: Owner, ends: list[RunEnd], now: datetime,
                    lateness: list[float] | None = None) -> list[Finished]:
        """The fenced terminal writes of a batch of ended runs, their records and audit rows in one transaction."""
        jobs = self._jobs_of(ends)
        done_list: list[tuple[RunEnd, Finished]] = []
        with self._jobs(list({job for job in jobs.values() if job}), meta=True) as tx:
            judged = self._now(tx, now)
            for end in ends:
                job = jobs[end.run_id]
                done = claims_mod.finish(tx.doc, job or "?", end.run_id, owner, end.outcome, judged)
                if not done.fenced and job is not None:
                    tx.doc["jobs"][job]["state"].pop("blocked", None)
                if done.record is not None:
                    done.record["log"] = end.log
                    tail = log_tail(end.log)
                    if tail is not None:
                        tx.tails[end.run_id] = tail
                tx.events.extend(done.events)
                tx.keep_record(done.record)
                done_list.append((end, done))
            _observe_all(tx.doc, lateness or [])
        self._prune_logs({str(done.record["job"]): done.keep_runs for _, done in done_list
                          if done.record is not None})
        return [done for _, done in done_list]

    def _jobs_of(self, ends: list[RunEnd]) -> dict[str, str | None]:
        """Each end's job: given, else looked up by its run id (a run never changes job)."""
        found: dict[str, str | None] = {end.run_id: end.job for end in ends}
        missing = [run_id for run_id, job in found.items() if job is None]
        if missing:
            with self._read():
                found.update(self.conn.execute("SELECT run_id, job FROM cronctl_runs WHERE run_id = ANY(%s)",
                                               (missing,)).fetchall())
        return found

    def _prune_logs(self, jobs: dict[str, int | None]) -> None:
        """This host's run logs of these jobs, each to its own keep_runs."""
        if self.paths is not None:
            for job in sorted(jobs):
                history.prune_logs(self.paths, job, jobs[job])

    # --- recovery ------------------------------------------------------------------------------

    def reclaim(self, job: str, run_id: str, seen_owner: Owner | None, reason: str, now: datetime,
                processes_killed: int) -> bool:
        """As `JsonLeaseStore.reclaim`: fenced on the owner seen when the run was judged broken,
        and a lease found fresh again under the row lock stands (`lease_fence`)."""
        with self._jobs([job], meta=True) as tx:
            judged = self._now(tx, now)
            if renewed_since_judged(tx.doc, job, run_id, reason, judged):
                return False
            return reclaim_in(tx, job, run_id, seen_owner, reason, judged, processes_killed)

    def end_past_deadline(self, job: str, run_id: str, deadline_s: float, now: datetime,
                          processes_killed: int) -> bool:
        outcome = Outcome(RunStatus.TIMEOUT, "deadline_janitor", fault=Fault.JOB)
        with self._jobs([job], meta=True) as tx:
            if find_claim(tx.doc, job, run_id) is None:
                return False  # the runner recorded it meanwhile: never overwrite a real ending
            done = claims_mod.finish(tx.doc, job, run_id, None, outcome, self._now(tx, now))
            bump_counter(tx.doc, "deadline_terminated")
            tx.events.extend([Event(AuditEvent.RECOVERY_DEADLINE_TERMINATED, {
                "job": job, "run_id": run_id, "reason": "deadline_janitor", "deadline_s": round(deadline_s, 3),
                "processes_killed": processes_killed,
            }), *done.events])
            tx.keep_record(done.record)
        return True

    def end_unsupervised(self, job: str, run_id: str, outcome: Outcome, now: datetime,
                         processes_killed: int) -> bool:
        with self._jobs([job]) as tx:
            if find_claim(tx.doc, job, run_id) is None:
                return False
            done = claims_mod.finish(tx.doc, job, run_id, None, outcome, self._now(tx, now))
            if done.events:
                done.events[0].details["processes_killed"] = processes_killed
            tx.events.extend(done.events)
            tx.keep_record(done.record)
        return True

    def rearm(self, job: str, now: datetime) -> bool:
        """As `JsonLeaseStore.rearm`: a wedged recurring job fires again soon, judged once per failure."""
        with self._jobs([job], meta=True) as tx:
            event = rearm_wedged(tx.doc, job, self._now(tx, now))
            if event is None:
                return False
            tx.events.append(event)
        return True

    def bump(self, counter: str) -> None:
        """One more of a recovery counter, in this host's counters row."""
        with self._tx("false", {}, meta=True) as tx:
            bump_counter(tx.doc, counter)

    # --- read views ------------------------------------------------------------------------------

    def has_job(self, job: str) -> bool:
        with self._read():
            return self.conn.execute("SELECT 1 FROM cronctl_jobs WHERE name = %s", (job,)).fetchone() is not None

    def jobs(self) -> list[JobView]:
        with self._read():
            entries = load_jobs(self.conn, "true", {}, lock=None)
        return [JobView.from_entry(entries[name]) for name in sorted(entries)]

    def job(self, name: str) -> JobView:
        with self._read():
            entries = load_jobs(self.conn, "name = %(name)s", {"name": name}, lock=None)
        return JobView.from_entry(get_entry({"jobs": entries}, name))

    def suspects(self, late_by: datetime | None = None) -> dict[str, Any]:
        """The jobs the healer looks at (a live run, or a failed last run), as a document.

        `late_by` (the health pass, SPEC §12): also the unpaused jobs with notify targets whose
        next instant (`wake_at`, on its index) is at or before it: those that may be late.
        """
        with self._read():
            jobs = load_jobs(self.conn, "name IN (SELECT job FROM cronctl_runs WHERE state = ANY(%(live)s))"
                             " OR state ->> 'last_status' = ANY(%(failed)s)",
                             {"live": list(LIVE_STATES), "failed": sorted(str(s.value) for s in FAILED_STATUSES)},
                             lock=None)
            if late_by is not None:
                jobs.update(load_jobs(self.conn, _MAY_BE_LATE, {"late_by": late_by}, lock=None))
        return {"jobs": jobs}

    def counters(self) -> dict[str, int]:
        """Every host's counters added up (and those an import brought)."""
        with self._read():
            rows = self.conn.execute("SELECT value FROM cronctl_meta WHERE key = 'counters'"
                                     " OR key LIKE 'counters@%'").fetchall()
        totals: dict[str, int] = {}
        for (counts,) in rows:
            for key, value in counts.items():
                totals[str(key)] = totals.get(str(key), 0) + int(value)
        return totals

    def claims_of(self, job: str) -> list[RunClaim]:
        return [run_claim(job, claim) for claim in self._live_claims("job = %s", job)]

    def find_run(self, job: str, run_id: str) -> RunClaim | None:
        found = self._live_claims("job = %s AND run_id = %s", job, run_id)
        return run_claim(job, found[0]) if found else None

    def _live_claims(self, where: str, *params: Any) -> list[dict[str, Any]]:
        with self._read():
            rows = self.conn.execute(f"SELECT claim, host_id FROM cronctl_runs WHERE {where} AND claim IS NOT NULL"
                                     " ORDER BY run_id", params).fetchall()
        for claim, host in rows:
            if isinstance(claim.get("owner"), dict):
                claim["owner"]["host"] = host  # whose pid it is (as load_jobs marks it)
        return [row[0] for row in rows]

    # --- what JsonLeaseStore keeps in an outbox ------------------------------------------------

    def settle(self, runs: list[tuple[str, str]]) -> None:
        """Nothing to drop: here a run's audit rows and history record commit in the same
        transaction as its end (SPEC §9), so no entry is ever left pending."""

    def flush_settled(self) -> None:
        """Nothing to drop (see `settle`)."""

    def deliver_pending(self, writer_alive: WriterAlive, doc: dict[str, Any] | None = None) -> list[OwedHook]:
        """Nothing is pending on PostgreSQL (see `settle`): no rows or records to complete.

        An `on_failure` hook owed by a loop that died between its commit and the hook's start
        is the one thing this does not recover on PostgreSQL.
        """
        return []

    def force_chain(self, job: str, now: datetime) -> tuple[str, list[str]]:
        raise StoreError("job chains are not available on the PostgreSQL store yet; "
                         "use the JSON store (no --store) for jobs with 'after'")

    def claim_chain(self, chain_id: str, now: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None) -> ClaimBatch:
        raise StoreError("job chains are not available on the PostgreSQL store yet; "
                         "use the JSON store (no --store) for jobs with 'after'")

    def history(self, job: str | None, count: int | None = None) -> list[dict[str, Any]]:
        """Ended runs' records with the host that ran them, the last `count` of them.

        In the JSON store's order: job by job, each oldest first (by end, then by claim).
        """
        if count is not None and count <= 0:
            return []
        with self._read():
            rows = self.conn.execute(
                "SELECT record || jsonb_build_object('host', host_id) FROM"
                " (SELECT record, host_id, job, ended_at, fence FROM cronctl_runs"
                "   WHERE record IS NOT NULL AND (%(job)s::text IS NULL OR job = %(job)s)"
                "   ORDER BY job DESC, ended_at DESC, fence DESC LIMIT %(count)s) AS last"
                " ORDER BY job, ended_at, fence",
                {"job": job, "count": count}).fetchall()
        return [row[0] for row in rows]

    # --- the transaction and its instant -------------------------------------------------------

    # --- notifications owed (SPEC §12): any live loop delivers, a lease per entry -----------------

    def notify_due(self, now: datetime) -> list[notify_owed.Item]:
        with self._read():
            entries = load_jobs(self.conn, "state ? 'notify_owed'", {}, lock=None)
            if self.judge_by == "database":
                row = self.conn.execute("SELECT clock_timestamp()").fetchone()
                now = row[0] if row is not None else now
        return notify_owed.owed_items({"jobs": entries}, now)

    def notify_take(self, wanted: list[tuple[str, str]], by: str, now: datetime,
                    lease_s: float) -> list[notify_owed.Item]:
        with self._jobs([job for job, _ in wanted]) as tx:
            return notify_owed.take(tx.doc, wanted, by, self._now(tx, now), lease_s)

    def notify_settle(self, results: list[notify_owed.Result], now: datetime,
                      policy: notify_owed.RetryPolicy) -> None:
        with self._jobs([result.job for result in results], meta=True) as tx:
            rows = notify_owed.settle(tx.doc, results, self._now(tx, now), policy)
            tx.events.extend(Event(name, details) for name, details in rows)

    def notify_stale(self, job: str, stale: tuple[str, str] | None, now: datetime) -> bool:
        with self._jobs([job]) as tx:
            if stale is None:
                notify_owed.healthy_again(tx.doc, job)
                return False
            return notify_owed.owe_stale(tx.doc, job, stale[0], stale[1], self._now(tx, now))

    @contextmanager
    def _jobs(self, names: list[str], meta: bool = False) -> Iterator[DocTransaction]:
        with self._tx(_BY_NAMES, {"names": sorted(set(names))}, meta=meta) as tx:
            yield tx

    @contextmanager
    def _tx(self, where: str, params: dict[str, Any], *, meta: bool = False,
            skip_locked: bool = False) -> Iterator[DocTransaction]:
        with self.lock, doc_transaction(self.conn, self.host_id, where, params, meta=meta,
                                        skip_locked=skip_locked) as tx:
            yield tx
        if self.listeners and tx.events:
            ts = tx.db_now.astimezone(timezone.utc).isoformat(timespec="milliseconds")
            for event in tx.events:
                tell_listeners(self.listeners, {"ts": ts, "event": str(event.name), "host": self.host_id,
                                                **event.details})

    @contextmanager
    def _read(self) -> Iterator[None]:
        """A read-only transaction, alone on the connection."""
        with self.lock, self.conn.transaction():
            yield

    def db_now(self) -> datetime:
        """The database clock now (what this store judges by, unless told to judge at the caller's)."""
        with self._read():
            row = self.conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        when: datetime = row[0]
        return when

    def _now(self, tx: DocTransaction, asked: datetime) -> datetime:
        """The instant to judge at: the database's, unless this store judges at the caller's."""
        return tx.db_now if self.judge_by == "database" else asked

    def _lease(self, tx: DocTransaction, lease: Lease) -> Lease:
        """The lease's wall-clock end on the judging clock (its monotonic end is the loop's own)."""
        if self.judge_by == "caller":
            return lease
        return Lease(lease.until_mono, tx.db_now + (lease.until_wall - self.clock.now()))


def _observe_all(doc: dict[str, Any], lateness: list[float]) -> None:
    for seconds in lateness:
        claims_mod.observe_lateness(doc, seconds)


# SPEC §9: at least 64 KiB of each run's output is kept with the run, for hosts without its log.
OUTPUT_TAIL_BYTES = 64 * 1024


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
