"""The store in lease terms: the one interface the loop, the healer and the use cases write through.

`LeaseStore` names every write the run path makes (SPEC §5, MULTIHOST §2–§4):

- claim: `claim_due`, `claim_ahead`, `claim_force`: a slot (job, slot, attempt) is
  claimed at most once, each claim held by one `Owner` under a `Lease`;
- the gate: `mark_dispatched` (and `release_held` for runs claimed ahead) succeeds only
  for claims this owner still holds; a child whose claim was not marked never begins;
- `renew` extends the leases still held and returns the run ids that were lost;
- `finish_many` is fenced by owner (a stale owner's result is refused, not written) and
  idempotent (a second finish of the same run finds no claim and is fenced);
- hand-backs of runs that never began: `unhold`, `release_refused`;
- recovery without an owner: `reclaim`, `end_past_deadline`, `end_unsupervised`, `rearm`;
- `adopt` moves claims to a new generation of the same process;
- read views: `has_job`, `jobs`, `job`, `counters`, `claims_of`, `find_run`, `history`;
- chains (SPEC §10): every finish also records its chain (triggers, skips, the chain's
  end) in the same write, `claim_due` also claims the ready nodes, `force_chain` starts one.

Arguments and results are dataclasses and plain values; no store document leaks out.
Every method is one transaction (one write per batch, as the hot paths need) and writes
its audit rows and history records itself, after that transaction committed.

`JsonLeaseStore` implements it over today's JSON document with the pure functions of
`claims.py`; the bytes on disk and the audit rows are the ones those always wrote.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from cronctl.jobs.health import persisted_error_wedge
from cronctl.jobs.state import JobView, get_entry
from cronctl.models import AuditEvent, Fault, JobSpec, RunStatus
from cronctl.paths import Paths
from cronctl.schedule.slots import first_slot
from cronctl.store import chain_skips, chains, history, notify_owed, outbox
from cronctl.store import claims as claims_mod
from cronctl.store.audit import AuditLog
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Finished, Lease, Outcome, Owner
from cronctl.store.jsonstore import Store
from cronctl.store.outbox import OwedHook, WriterAlive
from cronctl.store.schema import bump_counter, claims_of, find_claim, job_of_run
from cronctl.timefmt import from_iso, to_iso


@dataclass(frozen=True)
class HeldGate:
    """A run claimed ahead whose child waits at its gate, to be marked dispatched now."""

    job: str
    run_id: str
    spec: JobSpec  # as claimed: a job edited since is handed back, not started
    slot: str
    advanced_to: str | None  # what the claim set next_run_at to (unhold puts it back)
    run: Dispatched  # the child, with the monotonic instant its gate opens
    opens_at: datetime  # slot + jitter


@dataclass(frozen=True)
class Unhold:
    """A run claimed ahead to hand back with its slot: nothing of it ran."""

    job: str
    run_id: str
    advanced_to: str | None


@dataclass(frozen=True)
class Refused:
    """A claimed run whose child could not be spawned.

    `outcome` None: released at once (spawn failure). Otherwise a blocked config,
    recorded once as `outcome`, then released without a record while it stays the same.
    """

    job: str
    run_id: str
    outcome: Outcome | None
    event: Event  # the row that says why
    # Record `outcome` every time, with `event` (a forced run whose spawn failed: whoever
    # asked for it, perhaps with --wait, learns it from its record), not as a blocked config.
    always_record: bool = False


@dataclass(frozen=True)
class RunEnd:
    """A run's end as its supervisor saw it; `job` None: looked up from the claim."""

    run_id: str
    outcome: Outcome
    job: str | None = None
    log: str | None = None  # the run's log file, kept in its history record


@dataclass(frozen=True)
class RunClaim:
    """A read view of one claim (a run in flight)."""

    job: str
    run_id: str
    slot: str
    trigger: str
    attempt: int
    owner: Owner | None
    dispatched: bool
    child: dict[str, Any] | None  # {"pid", "start_time"} once dispatched
    kill_grace: float | None
    lease_until: str | None
    owner_host: str | None = None  # PostgreSQL: the host the owner runs on (its pid means nothing elsewhere)

    @property
    def owner_dict(self) -> dict[str, Any]:
        """The owner as the liveness checks take it ({} for none)."""
        if self.owner is None:
            return {}
        return {**self.owner.to_dict(), **({"host": self.owner_host} if self.owner_host else {})}


class LeaseStore(Protocol):
    """What a backend (the JSON document today, PostgreSQL next) must provide. See the module doc."""

    def claim_due(self, now: datetime, owner: Owner, lease: Lease, capacity: int | None = None) -> ClaimBatch: ...

    def claim_ahead(self, now: datetime, horizon: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None) -> ClaimBatch: ...

    def claim_force(self, job: str, now: datetime, owner: Owner, lease: Lease) -> ClaimBatch: ...

    def mark_dispatched(self, owner: Owner, runs: list[Dispatched], now: datetime) -> list[Dispatched]: ...

    def release_held(self, owner: Owner, gates: list[HeldGate], lateness: list[float]) -> list[str]: ...

    def unhold(self, runs: list[Unhold], why: str) -> int: ...

    def release_refused(self, owner: Owner, refused: list[Refused], now: datetime) -> None: ...

    def renew(self, owner: Owner, runs: dict[str, str], lease: Lease) -> list[str]: ...

    def finish_many(self, owner: Owner, ends: list[RunEnd], now: datetime,
                    lateness: list[float] | None = None) -> list[Finished]: ...

    def adopt(self, old: Owner, new: Owner, runs: dict[str, str]) -> int: ...

    def reclaim(self, job: str, run_id: str, seen_owner: Owner | None, reason: str, now: datetime,
                processes_killed: int) -> bool: ...

    def end_past_deadline(self, job: str, run_id: str, deadline_s: float, now: datetime,
                          processes_killed: int) -> bool: ...

    def end_unsupervised(self, job: str, run_id: str, outcome: Outcome, now: datetime,
                         processes_killed: int) -> bool: ...

    def rearm(self, job: str, now: datetime) -> bool: ...

    def bump(self, counter: str) -> None: ...

    def has_job(self, job: str) -> bool: ...

    def jobs(self) -> list[JobView]: ...

    def job(self, name: str) -> JobView: ...

    def counters(self) -> dict[str, int]: ...

    def claims_of(self, job: str) -> list[RunClaim]: ...

    def find_run(self, job: str, run_id: str) -> RunClaim | None: ...

    def history(self, job: str | None, count: int | None = None) -> list[dict[str, Any]]: ...

    def force_chain(self, job: str, now: datetime) -> tuple[str, list[str]]: ...

    def claim_chain(self, chain_id: str, now: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None) -> ClaimBatch: ...

    # What must follow a run's end (store/outbox.py): delivered by the writer right after
    # the commit; `settle` says an owed on_failure hook was started too; `deliver_pending`
    # completes what a dead writer left (rows, records; the hooks it returns are the
    # caller's to start, then settle).

    def settle(self, runs: list[tuple[str, str]]) -> None: ...

    def flush_settled(self) -> None: ...

    def deliver_pending(self, writer_alive: WriterAlive, doc: dict[str, Any] | None = None) -> list[OwedHook]: ...

    # Notifications owed (store/notify_owed.py, SPEC §12): the entries due, a lease on some
    # for one try, each try's outcome; `stale` raised (or cleared) by the loop's health pass.

    def notify_due(self, now: datetime) -> list[notify_owed.Item]: ...

    def notify_take(self, wanted: list[tuple[str, str]], by: str, now: datetime,
                    lease_s: float) -> list[notify_owed.Item]: ...

    def notify_settle(self, results: list[notify_owed.Result], now: datetime,
                      policy: notify_owed.RetryPolicy) -> None: ...

    def notify_stale(self, job: str, stale: tuple[str, str] | None, now: datetime) -> bool: ...


class JsonLeaseStore:
    """`LeaseStore` over the JSON document: each method one `Store.transaction()`."""

    def __init__(self, store: Store, audit: AuditLog, paths: Paths) -> None:
        self.store = store
        self.audit = audit
        self.paths = paths
        # Delivered entries of the outbox, dropped from the store by the next write made anyway.
        self._settled: set[tuple[str, str]] = set()
        self._settled_lock = threading.Lock()

    # --- claim ---------------------------------------------------------------------------

    def claim_due(self, now: datetime, owner: Owner, lease: Lease, capacity: int | None = None) -> ClaimBatch:
        with self._tx() as doc:
            batch = claims_mod.claim_due(doc, now, owner, lease, capacity)
            chains.claim_ready(doc, now, owner, lease, batch, capacity)
            chains.mark_roots(doc, batch)
        self._write(batch.events)
        return batch

    def claim_ahead(self, now: datetime, horizon: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None) -> ClaimBatch:
        with self._tx() as doc:
            batch = claims_mod.claim_ahead(doc, now, horizon, owner, lease, capacity)
            for new in batch.claims:
                new.advanced_to = doc["jobs"][new.job]["state"].get("next_run_at")
            chains.mark_roots(doc, batch)
        self._write(batch.events)
        return batch

    def claim_force(self, job: str, now: datetime, owner: Owner, lease: Lease) -> ClaimBatch:
        with self._tx(by_name=True) as doc:
            batch = claims_mod.claim_force(doc, job, now, owner, lease)
        self._write(batch.events)
        return batch

    # --- the gate --------------------------------------------------------------------------

    def mark_dispatched(self, owner: Owner, runs: list[Dispatched], now: datetime) -> list[Dispatched]:
        with self._tx(by_name=True) as doc:
            return claims_mod.mark_dispatched(doc, owner, runs, now)

    def release_held(self, owner: Owner, gates: list[HeldGate], lateness: list[float]) -> list[str]:
        """Mark the held runs dispatched at their instant (one write); those whose job was
        paused, edited or removed, or whose claim was taken, are handed back instead.
        Returns the run ids whose gates may open."""
        kept: list[str] = []
        events: list[Event] = []
        with self._tx(by_name=True) as doc:
            for gate in gates:
                why = _changed_since_claim(doc, gate, owner)
                if why is not None:
                    event = claims_mod.unhold(doc, gate.job, gate.run_id, gate.advanced_to, why)
                    events.append(event or Event(AuditEvent.RUN_SKIPPED, {
                        "job": gate.job, "run_id": gate.run_id, "slot": gate.slot,
                        "reason": "cancelled_before_slot", "why": why}))
                    continue
                if claims_mod.mark_dispatched(doc, owner, [gate.run], gate.opens_at, observe=False):
                    kept.append(gate.run_id)
            _observe_all(doc, lateness)
        self._write(events)
        return kept

    def unhold(self, runs: list[Unhold], why: str) -> int:
        events: list[Event] = []
        with self._tx(by_name=True) as doc:
            for run in runs:
                event = claims_mod.unhold(doc, run.job, run.run_id, run.advanced_to, why)
                if event is not None:
                    events.append(event)
        self._write(events)
        return len(events)

    def release_refused(self, owner: Owner, refused: list[Refused], now: datetime) -> None:
        """Spawn failures release the claim at once; a blocked config is recorded once, then skipped."""
        if not refused:
            return
        rows: list[Event] = []
        recorded: list[tuple[list[Event], Finished]] = []
        with self._tx(by_name=True) as doc:
            for item in refused:
                state = doc["jobs"].get(item.job, {}).get("state", {})
                if item.outcome is None or _blocked_again(item, item.outcome, state):
                    claims_mod.release(doc, item.job, item.run_id)
                    rows.append(item.event)
                    continue
                done = claims_mod.finish(doc, item.job, item.run_id, owner, item.outcome, now)
                if not item.always_record:
                    state["blocked"] = item.outcome.output_tail
                owed = [item.event, *done.events] if item.always_record else done.events
                outbox.owe(doc, done, owed, hook=False)
                recorded.append((owed, done))
        self._write(rows)
        for owed, done in recorded:
            self._deliver(owed, done)

    # --- leases ----------------------------------------------------------------------------

    def renew(self, owner: Owner, runs: dict[str, str], lease: Lease) -> list[str]:
        with self._tx(by_name=True) as doc:
            return claims_mod.renew(doc, owner, runs, lease)

    def adopt(self, old: Owner, new: Owner, runs: dict[str, str]) -> int:
        with self._tx(by_name=True) as doc:
            return adopt_claims(doc, old, new, runs)

    # --- finish ------------------------------------------------------------------------------

    def finish_many(self, owner: Owner, ends: list[RunEnd], now: datetime,
                    lateness: list[float] | None = None) -> list[Finished]:
        """The fenced terminal writes of a batch of ended runs, in one write.

        Then, per run: its audit rows, its history record (with its log) and the pruning
        of its old logs. Raises if nothing could be written: the caller keeps the ends.
        """
        done_list: list[tuple[RunEnd, Finished]] = []
        rev = self.store.last_written_rev
        try:
            with self._tx(by_name=all(end.job for end in ends)) as doc:
                done_list.clear()
                for end in ends:
                    job = end.job or job_of_run(doc, end.run_id)
                    done = claims_mod.finish(doc, job or "?", end.run_id, owner, end.outcome, now)
                    if not done.fenced and done.record is not None:
                        doc["jobs"][job]["state"].pop("blocked", None)
                        done.record["log"] = end.log
                        outbox.owe(doc, done, done.events, done.run_on_failure)
                    done_list.append((end, done))
                _observe_all(doc, lateness or [])
        except Exception as exc:
            if not self._committed_anyway(rev):
                raise
            print(f"cronctl: the store recorded {len(ends)} run end(s) but said: {exc}", file=sys.stderr)
        for _, done in done_list:
            self._deliver(done.events, done, settle=not done.run_on_failure)
        return [done for _, done in done_list]

    # --- recovery ------------------------------------------------------------------------------

    def reclaim(self, job: str, run_id: str, seen_owner: Owner | None, reason: str, now: datetime,
                processes_killed: int) -> bool:
        """Release a claim whose owner is gone as lost / not_started; fenced on the owner seen
        when it was judged broken, so a run that ended for real, or was reclaimed by someone
        else meanwhile, is left alone."""
        with self._tx(by_name=True) as doc:
            reclaimed = reclaim_claim(doc, job, run_id, seen_owner, reason, now, processes_killed)
            if reclaimed is None:
                return False
            done, rows = reclaimed
            outbox.owe(doc, done, rows, hook=False)
        self._deliver(rows, done)
        return True

    def end_past_deadline(self, job: str, run_id: str, deadline_s: float, now: datetime,
                          processes_killed: int) -> bool:
        """A run past any deadline it could have: recorded timeout (the runner's own record wins)."""
        outcome = Outcome(RunStatus.TIMEOUT, "deadline_janitor", fault=Fault.JOB)
        with self._tx(by_name=True) as doc:
            if find_claim(doc, job, run_id) is None:
                return False  # the runner recorded it meanwhile: never overwrite a real ending
            done = claims_mod.finish(doc, job, run_id, None, outcome, now)
            bump_counter(doc, "deadline_terminated")
            rows = [Event(AuditEvent.RECOVERY_DEADLINE_TERMINATED, {
                "job": job, "run_id": run_id, "reason": "deadline_janitor", "deadline_s": round(deadline_s, 3),
                "processes_killed": processes_killed,
            }), *done.events]
            outbox.owe(doc, done, rows, hook=False)
        self._deliver(rows, done)
        return True

    def end_unsupervised(self, job: str, run_id: str, outcome: Outcome, now: datetime,
                         processes_killed: int) -> bool:
        """Record the end of a run no loop supervises (its processes already ended by the caller)."""
        with self._tx(by_name=True) as doc:
            if find_claim(doc, job, run_id) is None:
                return False
            done = claims_mod.finish(doc, job, run_id, None, outcome, now)
            if done.events:
                done.events[0].details["processes_killed"] = processes_killed
            outbox.owe(doc, done, done.events, hook=False)
        self._deliver(done.events, done)
        return True

    def rearm(self, job: str, now: datetime) -> bool:
        """A recurring job that failed and was pushed past its next slot fires again soon.

        Marked either way, so one failure is re-armed (or judged not wedged) exactly once.
        """
        with self._tx(by_name=True) as doc:
            event = rearm_wedged(doc, job, now)
        if event is None:
            return False
        self._write([event])
        return True

    def bump(self, counter: str) -> None:
        """One more of a recovery counter (`status` shows them)."""
        with self._tx(by_name=True) as doc:
            bump_counter(doc, counter)

    # --- read views ------------------------------------------------------------------------------

    def has_job(self, job: str) -> bool:
        return job in self.store.read()["jobs"]

    def jobs(self) -> list[JobView]:
        """Every job with its state, by name (`list`, `status`)."""
        doc = self.store.read()
        return [JobView.from_entry(doc["jobs"][name]) for name in sorted(doc["jobs"])]

    def job(self, name: str) -> JobView:
        """One job; JobNotFoundError names it when there is none."""
        return JobView.from_entry(get_entry(self.store.read(), name))

    def counters(self) -> dict[str, int]:
        """The recovery counters (`status`, `metrics`)."""
        return dict(self.store.read().get("counters") or {})

    def claims_of(self, job: str) -> list[RunClaim]:
        entry = self.store.read()["jobs"].get(job)
        return [run_claim(job, claim) for _, claim in sorted(claims_of(entry).items())]

    def find_run(self, job: str, run_id: str) -> RunClaim | None:
        claim = find_claim(self.store.read(), job, run_id)
        return None if claim is None else run_claim(job, claim)

    def history(self, job: str | None, count: int | None = None) -> list[dict[str, Any]]:
        records = history.read_records(self.paths, job)
        if count is None:
            return records
        return records[-count:] if count > 0 else []

    # --- chains (SPEC §10) -------------------------------------------------------------------------

    def force_chain(self, job: str, now: datetime) -> tuple[str, list[str]]:
        """A new chain rooted at `job`, recorded ready for the loop's next claim write.

        Returns its id and its jobs (upstreams first). The chain's other writes ride on
        claim_due (ready nodes are claimed there) and on every finish (triggers, skips).
        """
        chain_id = claims_mod.new_run_id(now)
        with self._tx() as doc:
            events = chains.start_forced(doc, job, chain_id, now)
            jobs = list(doc["chains"][chain_id]["nodes"])
        self._write(events)
        return chain_id, jobs

    def claim_chain(self, chain_id: str, now: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None) -> ClaimBatch:
        """The due nodes of one chain only (`force-run --chain` run here, with no loop; the loop's
        hop, right after the finish that made them ready): a write of its jobs, not the store."""
        batch = ClaimBatch()
        with self._tx(by_name=True) as doc:
            chains.claim_ready(doc, now, owner, lease, batch, capacity, only=chain_id)
        self._write(batch.events)
        return batch

    # --- the outbox: what must follow a run's end -----------------------------------------------------

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
        with self._tx(by_name=True):
            pass

    def deliver_pending(self, writer_alive: WriterAlive, doc: dict[str, Any] | None = None) -> list[OwedHook]:
        """Complete what writers that died left pending: their rows and records now (once),
        their owed hooks returned for the caller to start and `settle`. `doc`: a recent
        read, for the cheap look (the loop passes its cached one)."""
        if not outbox.orphaned(doc if doc is not None else self.store.read(), writer_alive):
            return []
        with self._tx() as current:
            # Again under the lock: two processes recovering at once never deliver one entry twice.
            found = outbox.orphaned(current, writer_alive)
            return outbox.deliver_orphans(current, found, self.audit, self.paths)

    # --- notifications owed (SPEC §12) -------------------------------------------------------

    def notify_due(self, now: datetime) -> list[notify_owed.Item]:
        return notify_owed.owed_items(self.store.read(), now, leases=False)

    def notify_take(self, wanted: list[tuple[str, str]], by: str, now: datetime,
                    lease_s: float) -> list[notify_owed.Item]:
        with self._tx(by_name=True) as doc:
            # One loop per home: a lease found here is a dead loop's (the caller skips its own tries).
            return notify_owed.take(doc, wanted, by, now, lease_s, leases=False)

    def notify_settle(self, results: list[notify_owed.Result], now: datetime,
                      policy: notify_owed.RetryPolicy) -> None:
        with self._tx(by_name=True) as doc:
            rows = notify_owed.settle(doc, results, now, policy)
        self._write([Event(name, details) for name, details in rows])

    def notify_stale(self, job: str, stale: tuple[str, str] | None, now: datetime) -> bool:
        """`stale`: (state, reason) when the job is late or wedged, None when it is healthy again."""
        with self._tx(by_name=True) as doc:
            if stale is None:
                notify_owed.healthy_again(doc, job)
                return False
            return notify_owed.owe_stale(doc, job, stale[0], stale[1], now)

    @contextmanager
    def _tx(self, by_name: bool = False) -> Iterator[dict[str, Any]]:
        """A store transaction that also drops the outbox entries delivered since the last one.

        `by_name`: the body looks jobs up by name only (a store transaction with
        lazy_jobs: a few jobs of a large store cost a few jobs, not the store).
        """
        with self._settled_lock:
            settled = set(self._settled)
        with self.store.transaction(lazy_jobs=by_name) as doc:
            yield doc
            if settled:
                outbox.drop(doc, settled)
        with self._settled_lock:
            self._settled -= settled

    def _committed_anyway(self, rev_before: int | None) -> bool:
        """Whether a transaction that raised had put its document in place (a failed directory
        fsync comes after the rename): what follows the commit is then still owed now."""
        after = self.store.last_written_rev
        return after is not None and after != rev_before

    # --- after the commit --------------------------------------------------------------------------

    def _write(self, events: list[Event]) -> None:
        for event in events:
            self.audit.append(event.name, **event.details)
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


def run_claim(job: str, claim: dict[str, Any]) -> RunClaim:
    owner = claim.get("owner")
    return RunClaim(
        job=job, run_id=str(claim["run_id"]), slot=str(claim["slot"]), trigger=str(claim["trigger"]),
        attempt=int(claim["attempt"]), owner=Owner.from_dict(owner) if owner else None,
        dispatched=bool(claim.get("dispatched")), child=claim.get("child"),
        kill_grace=claim.get("kill_grace"), lease_until=claim.get("lease_until"),
        owner_host=owner.get("host") if isinstance(owner, dict) else None,
    )


def _blocked_again(item: Refused, outcome: Outcome, state: dict[str, Any]) -> bool:
    """A blocked config already recorded as it is now: released without another record."""
    return not item.always_record and state.get("blocked") == outcome.output_tail


def _held_by(claim: dict[str, Any], owner: Owner | None) -> bool:
    """Whether `claim` is still held by `owner` (None: by nobody, as it was seen)."""
    if owner is None:
        return not claim.get("owner")
    return owner.owns(claim)


def _changed_since_claim(doc: dict[str, Any], gate: HeldGate, owner: Owner) -> str | None:
    """Why a run claimed ahead must not start after all, or None."""
    entry = doc["jobs"].get(gate.job)
    if entry is None:
        return "removed"
    claim = find_claim(doc, gate.job, gate.run_id)
    if claim is None or not owner.owns(claim):
        return "claim_released"
    view = JobView.from_entry(entry)
    if view.paused:
        return "paused"
    if view.spec != gate.spec:
        return "edited"
    return None


def reclaim_claim(doc: dict[str, Any], job: str, run_id: str, seen_owner: Owner | None, reason: str,
                  now: datetime, processes_killed: int) -> tuple[Finished, list[Event]] | None:
    """In `doc`: end a broken owner's claim as lost (it was dispatched) or not_started; its
    finish and the rows to write, or None when the claim is gone or another owner holds it
    now (fenced on the owner seen when it was judged broken). Both backends call this."""
    current = find_claim(doc, job, run_id)
    if current is None or not _held_by(current, seen_owner):
        return None
    dispatched = bool(current.get("dispatched"))
    outcome = Outcome(
        RunStatus.LOST if dispatched else RunStatus.NOT_STARTED,
        "executor_lost_mid_run" if dispatched else "run_claimed_without_dispatch",
        fault=Fault.PLATFORM,
    )
    done = claims_mod.finish(doc, job, run_id, None, outcome, now)
    bump_counter(doc, "operator_release" if reason == "operator" else reason)
    rows = [Event(AuditEvent.CLAIM_RECLAIMED, {
        "job": job, "run_id": run_id, "slot": current.get("slot"), "reason": reason, "status": outcome.status.value,
        "run_reason": outcome.reason, "processes_killed": processes_killed,
        "owner_pid": seen_owner.pid if seen_owner is not None else None,
    }), *done.events]
    return done, rows


def adopt_claims(doc: dict[str, Any], old: Owner, new: Owner, runs: dict[str, str]) -> int:
    """In `doc`: hand `old`'s claims among `runs` (run id -> job) to `new`; how many moved."""
    adopted = 0
    for run_id, job in runs.items():
        claim = find_claim(doc, job, run_id)
        if claim is not None and old.owns(claim):
            claim["owner"] = new.to_dict()
            adopted += 1
    return adopted


def rearm_wedged(doc: dict[str, Any], job: str, now: datetime) -> Event | None:
    """In `doc`: re-arm `job` if a failure pushed it past its next slot; its audit event, or None.

    The job is marked either way, so one failure is re-armed (or judged not wedged) once.
    Both backends call this inside their transaction, so they decide alike.
    """
    entry = doc["jobs"].get(job)
    if entry is None:
        return None
    view = JobView.from_entry(entry)
    if not persisted_error_wedge(view, now):
        return None
    state = entry["state"]
    previous = state.get("next_run_at")
    target = _rearm_target(view, now)
    state["rearmed_for"] = state.get("last_run_at")
    old = from_iso(previous)
    if target is None or (old is not None and target >= old):
        return None
    state["next_run_at"] = to_iso(target)
    bump_counter(doc, "persisted_error_rearmed")
    return Event(AuditEvent.RECOVERY_PERSISTED_ERROR_REARMED, {
        "job": job, "previous_next_run_at": previous, "next_run_at": to_iso(target),
        "last_status": state.get("last_status"), "reason": "persisted_error",
    })


def _rearm_target(view: JobView, now: datetime) -> datetime | None:
    """Now for an interval job; the next legal slot for a cron job."""
    if view.spec.every is not None:
        return now
    return first_slot(view.spec, now - timedelta(microseconds=1))


def _observe_all(doc: dict[str, Any], lateness: list[float]) -> None:
    for seconds in lateness:
        claims_mod.observe_lateness(doc, seconds)
