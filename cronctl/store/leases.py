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
- read views: `has_job`, `jobs`, `job`, `counters`, `claims_of`, `find_run`, `history`, and
  `suspects` (the jobs the healer looks at, store/suspects.py);
- chains (SPEC §10): every finish also records its chain (triggers, skips, the chain's
  end) in the same write, `claim_due` also claims the ready nodes, `force_chain` starts one.

Arguments and results are dataclasses and plain values (store/lease_types.py); no store
document leaks out. Every method is one unit of work (store/unit.py): the jobs it
touches locked, its decisions taken, its audit rows and history records delivered with
the commit.

`UnitLeaseStore` writes each method once, over a backend's `Units`: the JSON document
(`JsonLeaseStore`, store/json_unit.py: the bytes on disk and the audit rows are the ones
it always wrote) or PostgreSQL (`PgLeaseStore`, store/pg/unit.py). The judgments it
takes on a unit's document are the pure functions of claims.py and decisions.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from cronctl.errors import StoreError
from cronctl.jobs.state import JobView, get_entry
from cronctl.paths import Paths
from cronctl.store import chains, decisions, notify_owed
from cronctl.store import claims as claims_mod
from cronctl.store.audit import AuditLog
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Finished, Lease, Outcome, Owner
from cronctl.store.json_unit import JsonUnits
from cronctl.store.jsonstore import Store
from cronctl.store.lease_types import HeldGate, Refused, RunClaim, RunEnd, Unhold, run_claim
from cronctl.store.outbox import OwedHook, WriterAlive
from cronctl.store.schema import bump_counter
from cronctl.store.suspects import Suspect, suspects_in
from cronctl.store.unit import CHAINS_NOT_STORED, JobsUnit, Units


class StartInWrite(Protocol):
    """Children already there for some of a write's new claims (a hop's warm children,
    adopted while its unit holds the jobs' lock)."""

    def __call__(self, claims: list[claims_mod.NewClaim]) -> list[Dispatched]:
        """The runs given one, with their identities (marked dispatched in the same write)."""
        ...

    def committed(self, batch: ClaimBatch) -> None:
        """The write is committed (`batch.dispatched` as kept): their gates may open now,
        before the write's rows are delivered."""
        ...

__all__ = ["HeldGate", "JsonLeaseStore", "LeaseStore", "Refused", "RunClaim", "RunEnd", "StartInWrite", "Suspect",
           "UnitLeaseStore", "Unhold", "run_claim"]


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
                    lateness: list[float] | None = None, defer_flush: bool = False) -> list[Finished]: ...

    def flush_deferred(self) -> None: ...

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

    def jobs(self, prefix: str | None = None) -> list[JobView]: ...

    def may_be_stale(self, now: datetime) -> tuple[list[JobView], bool | None]: ...

    def job(self, name: str) -> JobView: ...

    def counters(self) -> dict[str, int]: ...

    def claims_of(self, job: str) -> list[RunClaim]: ...

    def find_run(self, job: str, run_id: str) -> RunClaim | None: ...

    def history(self, job: str | None, count: int | None = None) -> list[dict[str, Any]]: ...

    def suspects(self, doc: dict[str, Any] | None = None) -> list[Suspect]: ...

    def force_chain(self, job: str, now: datetime) -> tuple[str, list[str]]: ...

    def claim_chain(self, chain_id: str, now: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None, start: StartInWrite | None = None) -> ClaimBatch: ...

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


class UnitLeaseStore:
    """`LeaseStore`, each method written once over its backend's units of work (store/unit.py)."""

    def __init__(self, units: Units) -> None:
        self.units = units

    # --- claim ---------------------------------------------------------------------------

    def claim_due(self, now: datetime, owner: Owner, lease: Lease, capacity: int | None = None) -> ClaimBatch:
        with self.units.due(now) as unit:
            at, held = unit.judge(now), unit.lease(lease)
            batch = claims_mod.claim_due(unit.claimable(), at, owner, held, capacity)
            if self.units.chains:
                chains.claim_ready(unit.doc, at, owner, held, batch, capacity)
                chains.mark_roots(unit.doc, batch)
            unit.claimed(batch)
            unit.emit(batch.events)
        return batch

    def claim_ahead(self, now: datetime, horizon: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None) -> ClaimBatch:
        with self.units.ahead(now, horizon) as unit:
            at = unit.judge(now)
            batch = claims_mod.claim_ahead(unit.doc, at, at + (horizon - now), owner, unit.lease(lease), capacity)
            unit.claimed(batch)
            for new in batch.claims:
                new.advanced_to = unit.doc["jobs"][new.job]["state"].get("next_run_at")
            if self.units.chains:
                chains.mark_roots(unit.doc, batch)
            unit.emit(batch.events)
        return batch

    def claim_force(self, job: str, now: datetime, owner: Owner, lease: Lease) -> ClaimBatch:
        with self.units.named([job]) as unit:
            batch = claims_mod.claim_force(unit.doc, job, unit.judge(now), owner, unit.lease(lease))
            unit.claimed(batch)
            unit.emit(batch.events)
        return batch

    # --- the gate --------------------------------------------------------------------------

    def mark_dispatched(self, owner: Owner, runs: list[Dispatched], now: datetime) -> list[Dispatched]:
        """Persist the gated children of claims this owner still holds, with their run.started
        rows; returns those kept (the others' gates must not open)."""
        with self.units.named([run.job for run in runs], meta=True) as unit:
            at = unit.judge(now)
            kept = claims_mod.mark_dispatched(unit.doc, owner, runs, at)
            unit.gate_opened(kept, at)
            unit.emit(decisions.started_rows(unit.doc, kept))
            return kept

    def release_held(self, owner: Owner, gates: list[HeldGate], lateness: list[float]) -> list[str]:
        """Mark the held runs dispatched at their instant (one write); those whose job was
        paused, edited or removed, or whose claim was taken, are handed back instead.
        Returns the run ids whose gates may open."""
        kept: list[str] = []
        with self.units.named([gate.job for gate in gates], meta=True) as unit:
            for gate in gates:
                handed_back = decisions.hand_back_changed(unit.doc, gate, owner)
                if handed_back is not None:
                    unit.emit([handed_back])
                elif claims_mod.mark_dispatched(unit.doc, owner, [gate.run], gate.opens_at, observe=False):
                    unit.gate_opened([gate.run], gate.opens_at)
                    kept.append(gate.run_id)
            decisions.observe_all(unit.doc, lateness)
        return kept

    def unhold(self, runs: list[Unhold], why: str) -> int:
        with self.units.named([run.job for run in runs]) as unit:
            events = [event for run in runs
                      if (event := claims_mod.unhold(unit.doc, run.job, run.run_id, run.advanced_to, why)) is not None]
            unit.emit(events)
        return len(events)

    def release_refused(self, owner: Owner, refused: list[Refused], now: datetime) -> None:
        """Spawn failures release the claim at once; a blocked config is recorded once, then
        skipped; a forced run is recorded every time (decisions.refuse)."""
        if not refused:
            return
        with self.units.named([item.job for item in refused]) as unit:
            for item in refused:
                done, rows = decisions.refuse(unit.doc, item, owner, unit.judge(now))
                if done is None:
                    unit.emit(rows)
                else:
                    unit.record(done, rows)

    # --- leases ----------------------------------------------------------------------------

    def renew(self, owner: Owner, runs: dict[str, str], lease: Lease) -> list[str]:
        with self.units.named(runs.values()) as unit:
            return claims_mod.renew(unit.doc, owner, runs, unit.lease(lease))

    def adopt(self, old: Owner, new: Owner, runs: dict[str, str]) -> int:
        with self.units.named(runs.values()) as unit:
            return decisions.adopt_claims(unit.doc, old, new, runs)

    # --- finish ------------------------------------------------------------------------------

    def finish_many(self, owner: Owner, ends: list[RunEnd], now: datetime,
                    lateness: list[float] | None = None, defer_flush: bool = False) -> list[Finished]:
        """The fenced terminal writes of a batch of ended runs, in one unit.

        Then, per run: its audit rows, its history record (with its log) and the pruning
        of its old logs. Raises if nothing could be written: the caller keeps the ends.
        `defer_flush` (Units.named): those, and the JSON document's directory fsync, wait for
        the caller's next write or `flush_deferred` (the loop's chain hop: its claim write).
        """
        jobs = self._jobs_of(ends)
        finished: list[Finished] = []
        with self.units.named({job for job in jobs.values() if job}, meta=True, defer_flush=defer_flush,
                              committed_note=f"the store recorded {len(ends)} run end(s)") as unit:
            at = unit.judge(now)
            for end in ends:
                done = decisions.end_run(unit.doc, jobs[end.run_id], end, owner, at)
                unit.record(done, done.events, hook=done.run_on_failure)
                finished.append(done)
            decisions.observe_all(unit.doc, lateness or [])
        return finished

    def _jobs_of(self, ends: list[RunEnd]) -> dict[str, str | None]:
        """Each end's job: given, else looked up by its run id (a run never changes job)."""
        found: dict[str, str | None] = {end.run_id: end.job for end in ends}
        missing = [run_id for run_id, job in found.items() if job is None]
        if missing:
            found.update(self.units.locate(missing))
        return found

    # --- recovery ------------------------------------------------------------------------------

    def reclaim(self, job: str, run_id: str, seen_owner: Owner | None, reason: str, now: datetime,
                processes_killed: int) -> bool:
        """Release a claim whose owner is gone as lost / not_started; fenced on the owner seen
        when it was judged broken, so a run that ended for real, or was reclaimed by someone
        else meanwhile, is left alone (and, where the unit says so, on a lease found fresh again)."""
        with self.units.named([job], meta=True) as unit:
            at = unit.judge(now)
            if unit.renewed_since_judged(job, run_id, reason, at):
                return False
            reclaimed = decisions.reclaim_claim(unit.doc, job, run_id, seen_owner, reason, at, processes_killed)
            if reclaimed is None:
                return False
            unit.record(*reclaimed)
        return True

    def end_past_deadline(self, job: str, run_id: str, deadline_s: float, now: datetime,
                          processes_killed: int) -> bool:
        """A run past any deadline it could have: recorded timeout (the runner's own record wins)."""
        with self.units.named([job], meta=True) as unit:
            ended = decisions.end_past_deadline(unit.doc, job, run_id, deadline_s, unit.judge(now), processes_killed)
            if ended is None:
                return False
            unit.record(*ended)
        return True

    def end_unsupervised(self, job: str, run_id: str, outcome: Outcome, now: datetime,
                         processes_killed: int) -> bool:
        """Record the end of a run no loop supervises (its processes already ended by the caller)."""
        with self.units.named([job]) as unit:
            ended = decisions.end_unsupervised(unit.doc, job, run_id, outcome, unit.judge(now), processes_killed)
            if ended is None:
                return False
            unit.record(*ended)
        return True

    def rearm(self, job: str, now: datetime) -> bool:
        """A recurring job that failed and was pushed past its next slot fires again soon.

        Marked either way, so one failure is re-armed (or judged not wedged) exactly once.
        """
        with self.units.named([job], meta=True) as unit:
            event = decisions.rearm_wedged(unit.doc, job, unit.judge(now))
            if event is None:
                return False
            unit.emit([event])
        return True

    def bump(self, counter: str) -> None:
        """One more of a recovery counter (`status` shows them)."""
        with self.units.named([], meta=True) as unit:
            bump_counter(unit.doc, counter)

    # --- read views ------------------------------------------------------------------------------

    def has_job(self, job: str) -> bool:
        return self.units.has_job(job)

    def jobs(self, prefix: str | None = None) -> list[JobView]:
        """Every job with its state, by name (`list`, `status`); with `prefix`, only the jobs
        whose name starts with it (`list NAME-PREFIX`)."""
        entries = self.units.entries(prefix=prefix) if prefix else self.units.entries()
        return [JobView.from_entry(entries[name]) for name in sorted(entries)]

    def may_be_stale(self, now: datetime) -> tuple[list[JobView], bool | None]:
        """The jobs `status --stale` must judge at `now`, and whether the store holds any job
        (None: as the jobs say). Here every job; PostgreSQL reads only those that may be stale."""
        return self.jobs(), None

    def job(self, name: str) -> JobView:
        """One job; JobNotFoundError names it when there is none."""
        return JobView.from_entry(get_entry({"jobs": self.units.entries(name)}, name))

    def counters(self) -> dict[str, int]:
        """The recovery counters (`status`, `metrics`)."""
        return self.units.counters()

    def claims_of(self, job: str) -> list[RunClaim]:
        return [run_claim(job, claim) for claim in self.units.live_claims(job)]

    def find_run(self, job: str, run_id: str) -> RunClaim | None:
        found = self.units.live_claims(job, run_id)
        return run_claim(job, found[0]) if found else None

    def history(self, job: str | None, count: int | None = None) -> list[dict[str, Any]]:
        """Ended runs' records, job by job, each oldest first; the last `count` of them."""
        return self.units.history(job, count)

    def suspects(self, doc: dict[str, Any] | None = None) -> list[Suspect]:
        """The jobs the healer looks at (a claim, or a failed last run), their claims typed.
        `doc`: a recent read holding them (the loop's cached one), where the backend reads a document."""
        return suspects_in(self.units.suspect_entries(doc))

    # --- chains (SPEC §10) -------------------------------------------------------------------------

    def force_chain(self, job: str, now: datetime) -> tuple[str, list[str]]:
        """A new chain rooted at `job`, recorded ready for the loop's next claim write.

        Returns its id and its jobs (upstreams first). The chain's other writes ride on
        claim_due (ready nodes are claimed there) and on every finish (triggers, skips).
        """
        self._need_chains()
        chain_id = claims_mod.new_run_id(now)
        with self.units.whole() as unit:
            unit.emit(chains.start_forced(unit.doc, job, chain_id, unit.judge(now)))
            jobs = list(unit.doc["chains"][chain_id]["nodes"])
        return chain_id, jobs

    def claim_chain(self, chain_id: str, now: datetime, owner: Owner, lease: Lease,
                    capacity: int | None = None, start: StartInWrite | None = None) -> ClaimBatch:
        """The due nodes of one chain only (`force-run --chain` run here, with no loop; the loop's
        hop, right after the finish that made them ready): a write of its jobs, not the store.

        `start`: the caller's children already there (warm ones) for some of the new claims,
        adopted while this unit holds the lock; those runs are marked dispatched in this same
        write, with their run.started rows (`batch.dispatched`), so their gates need no second
        write; `start.committed` opens them right after the commit, before those rows are
        delivered (on PostgreSQL they committed with it; on JSON a crash before them loses
        them whichever comes first). A crash
        after this commit leaves them as any dispatched run whose gate never opened:
        reclaimed `lost`, their processes found by the identity recorded here.
        """
        self._need_chains()
        batch = ClaimBatch()
        with self.units.chain(chain_id) as unit:
            at = unit.judge(now)
            chains.claim_ready(unit.doc, at, owner, unit.lease(lease), batch, capacity, only=chain_id)
            unit.emit(batch.events)
            if start is not None and batch.claims:
                self._dispatch_in_write(unit, owner, start(batch.claims), at, batch)
                unit.on_commit(lambda: start.committed(batch))
        return batch

    @staticmethod
    def _dispatch_in_write(unit: JobsUnit, owner: Owner, runs: list[Dispatched], at: datetime,
                           batch: ClaimBatch) -> None:
        if not runs:
            return
        batch.dispatched = claims_mod.mark_dispatched(unit.doc, owner, runs, at)
        unit.gate_opened(batch.dispatched, at)
        unit.emit(decisions.started_rows(unit.doc, batch.dispatched))

    def _need_chains(self) -> None:
        if not self.units.chains:
            raise StoreError(CHAINS_NOT_STORED)

    # --- what must follow a run's end -----------------------------------------------------------

    def settle(self, runs: list[tuple[str, str]]) -> None:
        """These runs' pending entries are delivered (hook included): the next write drops them."""
        self.units.settle(runs)

    def flush_settled(self) -> None:
        """Drop the settled entries now (a process about to exit)."""
        self.units.flush_settled()

    def flush_deferred(self) -> None:
        """What a `finish_many(defer_flush=True)` still owes (its flush, rows and records), now."""
        self.units.flush_deferred()

    def deliver_pending(self, writer_alive: WriterAlive, doc: dict[str, Any] | None = None) -> list[OwedHook]:
        """Complete what writers that died left pending (rows, records); the hooks returned
        are the caller's to start, then settle. `doc`: a recent read, for the cheap look."""
        return self.units.deliver_pending(writer_alive, doc)

    # --- notifications owed (SPEC §12) -------------------------------------------------------
    # On a store many loops share, a try is leased to one of them; on the JSON store one
    # loop runs per home, so a lease found there is a dead loop's (the caller skips its own tries).

    def notify_due(self, now: datetime) -> list[notify_owed.Item]:
        doc, at = self.units.notify_view(now)
        return notify_owed.owed_items(doc, at, leases=self.units.shared)

    def notify_take(self, wanted: list[tuple[str, str]], by: str, now: datetime,
                    lease_s: float) -> list[notify_owed.Item]:
        with self.units.named([job for job, _ in wanted]) as unit:
            return notify_owed.take(unit.doc, wanted, by, unit.judge(now), lease_s, leases=self.units.shared)

    def notify_settle(self, results: list[notify_owed.Result], now: datetime,
                      policy: notify_owed.RetryPolicy) -> None:
        with self.units.named([result.job for result in results], meta=True) as unit:
            rows = notify_owed.settle(unit.doc, results, unit.judge(now), policy)
            unit.emit(Event(name, details) for name, details in rows)

    def notify_stale(self, job: str, stale: tuple[str, str] | None, now: datetime) -> bool:
        """`stale`: (state, reason) when the job is late or wedged, None when it is healthy again."""
        with self.units.named([job]) as unit:
            if stale is None:
                notify_owed.healthy_again(unit.doc, job)
                return False
            return notify_owed.owe_stale(unit.doc, job, stale[0], stale[1], unit.judge(now))


class JsonLeaseStore(UnitLeaseStore):
    """`LeaseStore` over the JSON document: each method one `Store.transaction()` (store/json_unit.py)."""

    def __init__(self, store: Store, audit: AuditLog, paths: Paths) -> None:
        super().__init__(JsonUnits(store, audit, paths))
        self.store = store
        self.audit = audit
        self.paths = paths
