"""One tick of the scheduler: claim what is due, dispatch it through the gate,
renew the leases of what runs, and record what ended (fenced).

The engine owns no thread. The loop (scheduler.py) calls `tick()`; the
supervisor's thread only hands results over through a queue, so every store
write of the loop happens on the tick thread.
"""

from __future__ import annotations

import errno
import os
import queue
import signal
import sys
import threading
from collections.abc import Iterable
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Protocol

from cronctl.context import Context
from cronctl.loop import fence as fence_mod
from cronctl.loop.due import DueIndex
from cronctl.loop.fence import SelfFence
from cronctl.loop.held import PRESPAWN_LEAD as PRESPAWN_LEAD  # the loop (scheduler.py) imports it from here
from cronctl.loop.held import ActiveRun, HeldRun, HeldRuns
from cronctl.loop.hop_start import HopStart
from cronctl.loop.notify_worker import NotifyPump
from cronctl.loop.on_failure import FailureHooks
from cronctl.loop.warm_hops import WarmHops
from cronctl.models import AuditEvent, Fault, JobSpec, RunStatus, Trigger
from cronctl.proc.childsetup import child_setup_of
from cronctl.proc.identity import identify
from cronctl.proc.liveness import owner_alive
from cronctl.proc.run import RunResult
from cronctl.proc.spawn import BlockedConfig, RunRequest, SpawnError
from cronctl.proc.supervisor import Supervisor
from cronctl.store import claims as claims_mod
from cronctl.store import outbox
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Finished, Lease, NewClaim, Outcome, Owner
from cronctl.store.leases import HeldGate, Refused, RunEnd, Unhold
from cronctl.store.outbox import PENDING
from cronctl.timefmt import to_iso

LOG_CAP = 1_000_000


def _own_start_time() -> float:
    found = identify(os.getpid())
    assert found is not None  # this very process is alive
    return found.start_time


outbox.use_start_time_reader(_own_start_time)  # an engine's process writes the outbox: without psutil
# Test seam: CRONCTL_FAULT_LOOP_CRASH=after_claim SIGKILLs the loop right after a claim is written;
# =held_at_gate once children claimed ahead wait at their gates, before they are marked dispatched;
# =after_finish right after a run's end (and its chain's triggers) is written, before the next claim;
# =after_hop_claim right after a hop's claim write marked its warm children dispatched, gates closed.
CRASH_ENV = "CRONCTL_FAULT_LOOP_CRASH"


class DueSource(Protocol):
    """Where the engine learns what is next: `DueIndex` (the JSON document) or, on
    PostgreSQL, `loop.cluster.ClusterDueIndex` (the database, fed by each beat)."""

    @property
    def next_due(self) -> datetime | None: ...

    @property
    def next_ahead(self) -> datetime | None: ...

    @property
    def ahead_count(self) -> int: ...

    @property
    def job_count(self) -> int: ...

    def refresh(self) -> None: ...

    def invalidate(self) -> None: ...

    def watch_late(self, now: datetime) -> bool: ...

    @property
    def doc(self) -> dict[str, Any]: ...

    def steady(self) -> AbstractContextManager[None]:
        """Within the block the store is looked at once, however many steps of a tick ask."""
        ...

    @property
    def watching(self) -> bool:
        """Whether something read must be looked at again within a second (no idle spell)."""
        ...

    @property
    def signature(self) -> Any:
        """Of the store as last read (None: to be read again, or not a file)."""
        ...


@dataclass
class EngineOptions:
    lease: float = claims_mod.DEFAULT_LEASE
    max_parallel: int | None = None
    drain_timeout: float = 2.0
    log_cap: int = LOG_CAP
    # Seconds ahead of a slot to claim it and spawn its child at the gate; 0: only at the
    # instant. The loop (scheduler.py) uses PRESPAWN_LEAD.
    prespawn_lead: float = 0.0

    @property
    def renew_every(self) -> float:
        return self.lease / 3


@dataclass
class TickReport:
    claimed: int = 0
    finished: int = 0
    sleep_hint: float = 1.0


@dataclass
class _Pending:
    """Results the supervisor thread handed over, waiting for the tick thread."""

    results: queue.Queue[RunResult] = field(default_factory=queue.Queue)


class Engine:
    def __init__(self, ctx: Context, supervisor: Supervisor, owner: Owner, options: EngineOptions | None = None,
                 wake: threading.Event | None = None, due: DueSource | None = None) -> None:
        self.ctx = ctx
        self.supervisor = supervisor
        self.hops_claimed = 0  # chain nodes claimed by record_results (the hop), counted in the tick's report
        self.owner = owner
        self.options = options or EngineOptions()
        self.wake = wake or threading.Event()
        self.active: dict[str, ActiveRun] = {}
        self.hooks = FailureHooks(ctx.paths, supervisor, self.options.log_cap, self.options.drain_timeout)
        self.finished_listeners: list[Callable[[dict[str, Any]], None]] = []
        self._pending = _Pending()
        # The next instants to act at: from the JSON document, or (loop/cluster.py) from PostgreSQL.
        self.due: DueSource = due or DueIndex(ctx.store)
        # On PostgreSQL, the thread that ends runs whose lease the database has not confirmed
        # in time (loop/fence.py); the engine tells it each confirmation. None: no self-fence.
        self.fence: SelfFence | None = None
        self._claim_began = ctx.clock.monotonic()  # when the last claim's round trip began
        self.held = HeldRuns()  # runs claimed ahead of their slot, at their gates (loop/held.py)
        self._last_renew = ctx.clock.monotonic()
        # Due jobs left unclaimed for want of --max-parallel room: only a run's end
        # makes room, and it wakes the tick, so sleeping until then is no delay.
        self._saturated = False
        # The document last looked at for a dead writer's pending entries (recover_pending).
        self._outbox_seen: dict[str, Any] | None = None
        # Owed notifications handed to their worker at the end of each tick (loop/notify_worker.py).
        self.notifications: NotifyPump | None = None
        # Children spawned ahead for the chain hops this loop makes (loop/warm_hops.py).
        self.warm_hops = WarmHops(supervisor, ctx.clock.monotonic)

    # --- wiring ----------------------------------------------------------------

    def on_result(self, result: RunResult) -> None:
        """Called on the supervisor thread: hand over and wake the tick thread.

        Not during a burst's quiet window: the tick wakes at its end anyway.
        """
        self._pending.results.put(result)
        quiet = self.held.quiet_until
        if quiet is None or self.ctx.clock.now() >= quiet:
            self.wake.set()

    def lease(self) -> Lease:
        self._claim_began = self.ctx.clock.monotonic()  # a lease granted now is confirmed from now at best
        return Lease(self.ctx.clock.monotonic() + self.options.lease,
                     self.ctx.clock.now() + timedelta(seconds=self.options.lease))

    # --- the tick ----------------------------------------------------------------

    def tick(self) -> TickReport:
        report = TickReport()
        self.recover_pending()
        report.finished = self.record_results()
        report.claimed, self.hops_claimed = self.hops_claimed + self.fire_due(), 0
        report.claimed += self.fire_ahead()
        self.release_held()
        self.report_started()
        self.renew_if_due()
        if self.notifications is not None:
            self.notifications.pump(self)
        self.warm_hops.tend(self.busy)
        report.sleep_hint = self.sleep_hint()
        return report

    def fire_due(self) -> int:
        now = self.ctx.clock.now()
        self._saturated = False
        self.due.refresh()
        if self.due.next_due is None or self.due.next_due > now:
            return 0
        capacity = self._capacity()
        if capacity == 0:
            return 0
        batch = self.ctx.leases.claim_due(now, self.owner, self.lease(), capacity)
        self._saturated = batch.deferred > 0
        self.due.invalidate()  # our own write changed the store: recompute the next due instant
        if batch.claims and os.environ.get(CRASH_ENV) == "after_claim":
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: die between claim and dispatch
        self.dispatch(batch)
        return len(batch.claims)

    def force(self, name: str) -> ClaimBatch:
        """force-run: claim now under the usual overlap rules and dispatch."""
        now = self.ctx.clock.now()
        batch = self.ctx.leases.claim_force(name, now, self.owner, self.lease())
        self.dispatch(batch)
        return batch

    def kill_run(self, run_id: str, reason: str) -> bool:
        """End one run this engine's supervisor watches (loop/control.py's `Controls`)."""
        return self.supervisor.kill(run_id, reason)

    def kill_job(self, job: str, reason: str) -> list[str]:
        """End every run of `job` this engine supervises; their run ids."""
        mine = [run_id for run_id, run in self.active.items() if run.job == job]
        for run_id in mine:
            self.supervisor.kill(run_id, reason)
        return mine

    def tend(self) -> float:
        """Record what ended and renew what runs, nothing else (`--once` after its first tick)."""
        self.record_results()
        self.renew_if_due()
        return 1.0

    def ended_elsewhere(self, run_ids: list[str]) -> None:
        """The healer ended these runs and recorded them (past any deadline): no longer ours to tend."""
        for run_id in run_ids:
            self.active.pop(run_id, None)

    @property
    def doc(self) -> dict[str, Any]:
        """The store as last read, with every job the loop watches (see DueIndex); shared with the
        JSON beat's healer (loop/beat.py) and the notification pump, so an idle tick parses nothing."""
        return self.due.doc

    def sleep_hint(self, longest: float = 1.0) -> float:
        """Seconds until the engine has something to do, at most `longest`."""
        now = self.ctx.clock.now()
        wake: list[datetime] = []
        if not self._saturated:
            if self.due.next_due is not None:
                wake.append(self.due.next_due)
            if self.due.next_ahead is not None and self.options.prespawn_lead > 0:
                wake.append(self.due.next_ahead - timedelta(seconds=self._lead()))
        wake.extend(self.held.wakeups(now))
        if self.held.quiet_until is not None:
            wake.append(self.held.quiet_until)
        if not wake:
            return longest
        return max(0.0, min(longest, (min(wake) - now).total_seconds()))

    # --- claiming ahead of the slot --------------------------------------------------

    def fire_ahead(self) -> int:
        """Claim the slots of the next PRESPAWN_LEAD seconds and spawn their children at the gate.

        One write claims them all (slot recorded, next_run_at advanced); their children
        are spawned now, when forking hundreds costs no lateness, and wait at the gate.
        """
        if self.options.prespawn_lead <= 0 or self._saturated:
            return 0
        lead = self._lead()
        self.due.refresh()
        now = self.ctx.clock.now()
        if self.due.next_ahead is None or self.due.next_ahead - now > timedelta(seconds=lead):
            return 0
        capacity = self._capacity()
        if capacity == 0:
            return 0
        together = self.due.ahead_count  # the whole burst, whatever share of it this loop claims
        claiming = self.ctx.clock.monotonic()
        try:
            batch = self.ctx.leases.claim_ahead(now, now + timedelta(seconds=lead), self.owner, self.lease(),
                                                capacity)
        finally:
            self.due.invalidate()  # recompute the next instants from the store as it now is
        claim_write = self.ctx.clock.monotonic() - claiming
        self._saturated = batch.deferred > 0
        if not batch.claims:
            return 0  # another loop took the burst: nothing measured
        if os.environ.get(CRASH_ENV) == "after_claim":
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: die between claim and dispatch
        began = self.ctx.clock.monotonic()
        spawned = self._spawn_all(batch.claims)
        self.held.claimed(claim_write, len(spawned), self.ctx.clock.monotonic() - began, len(batch.claims))
        self.warm_hops.dispatched(batch.claims)  # a chain's root claimed ahead: warm children before its slot
        by_id = {new.run_id: new for new in batch.claims}
        for run in spawned:
            new = by_id[run.run_id]
            assert new.held_until is not None
            self.held.hold(HeldRun(new.job, run.run_id, new.spec, to_iso(new.slot) or "", new.held_until,
                                   new.advanced_to, run.pid, run.start_time, together=together))
        if spawned and os.environ.get(CRASH_ENV) == "held_at_gate":
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: die with children waiting at their gates
        return len(spawned)

    def _lead(self) -> float:
        return self.held.lead(self.options.prespawn_lead, self.due.ahead_count)

    def release_held(self, force: bool = False) -> None:
        """Just before their instant: mark held runs dispatched (one write), then let the
        supervisor open their gates at the instant. A run whose job was paused, edited or
        removed since its claim, or whose claim was taken away, is handed back instead."""
        due = self.held.to_release(self.ctx.clock.now(), force)
        if not due:
            return
        started = self.ctx.clock.monotonic()
        gates = [self._gate_of(held) for held in due]
        kept_ids = set(self.ctx.leases.release_held(self.owner, gates, self.held.lateness))
        self._confirm(sorted(kept_ids), started)  # the dispatch restarted their leases
        self.due.invalidate()
        for held in due:
            if held.run_id not in kept_ids:
                self._discard(held.run_id)
        kept = [held for held in due if held.run_id in kept_ids]
        for instant, run_ids, burst in self.held.released(kept, self.ctx.clock.monotonic() - started):
            self.supervisor.open_gates_after(run_ids, (instant - self.ctx.clock.now()).total_seconds(), burst)

    def _gate_of(self, held: HeldRun) -> HeldGate:
        # The monotonic instant its gate opens: the child's start as the healer measures it.
        mono = self.ctx.clock.monotonic() + (held.due - self.ctx.clock.now()).total_seconds()
        run = Dispatched(held.job, held.run_id, held.pid, held.start_time, mono)
        return HeldGate(held.job, held.run_id, held.spec, held.slot, held.advanced_to, run, held.due)

    def report_started(self, ending: dict[str, RunResult] | None = None) -> None:
        """After the instant: run.started rows and the lateness of the runs released then.

        A run in `ending` is reported now, whatever the time: its run.finished row follows.
        """
        ending = ending or {}
        ready = self.held.to_report(self.ctx.clock.now(), ending)
        if not ready:
            return
        opened = self.supervisor.gate_opened_at([h.run_id for h in ready if h.run_id not in ending])
        for run_id, result in ending.items():
            opened[run_id] = result.started_mono if result.status != RunStatus.NOT_STARTED.value else None
        mono_now, wall_now = self.ctx.clock.monotonic(), self.ctx.clock.now()
        rows: list[tuple[str, dict[str, Any]]] = []
        for held in ready:
            if held.run_id not in opened:
                continue  # ended: its result, on its way, reports it (record_results)
            when = opened[held.run_id]
            if when is None and held.run_id not in ending:
                continue  # still closed: looked at again on the next tick
            if when is None:
                self.held.runs.pop(held.run_id, None)
                continue  # ended before its gate opened; its result says so
            late = self.held.started(held, wall_now - timedelta(seconds=mono_now - when))
            run = self.active.get(held.run_id)
            rows.append((AuditEvent.RUN_STARTED, {
                "job": held.job, "run_id": held.run_id, "slot": held.slot, "pid": held.pid,
                "attempt": run.attempt if run else 1, "held": True, "late_ms": round(max(0.0, late) * 1000, 1)}))
        if rows:  # one write for the burst (one transaction on PostgreSQL), as a unit of work writes its rows
            self.ctx.audit.append_many(rows)

    def cancel_held(self, why: str) -> int:
        """Hand back every held run whose gate has not opened (the loop stops): nothing of them ran."""
        return self.hand_back(self.close_held_gates(), why)

    def close_held_gates(self) -> list[HeldRun]:
        """The held runs whose gate this cancelled before it opened (certain nothing of them ran).
        No store write: safe from another thread while the tick thread waits on the store."""
        return [h for h in list(self.held.runs.values()) if self.supervisor.cancel_gate(h.run_id)]

    def hand_back(self, back: list[HeldRun], why: str) -> int:
        """Give the claims of these cancelled held runs back to the store (their slots fire again)."""
        if not back:
            return 0
        self.ctx.leases.unhold([Unhold(h.job, h.run_id, h.advanced_to) for h in back], why)
        self.due.invalidate()
        for held in back:
            self._discard(held.run_id)
        return len(back)

    def end_quiet(self) -> None:
        """Results are recorded now, whatever burst was starting (the loop stops)."""
        self.held.end_quiet()

    def discard(self, run_id: str) -> None:
        """Forget a run handed back before its gate opened: its not_started result is no news."""
        self._discard(run_id)

    def _discard(self, run_id: str) -> None:
        self.held.discard(run_id)
        self.active.pop(run_id, None)
        self._forget_lease(run_id)
        self.supervisor.cancel_gate(run_id)

    # --- dispatch ----------------------------------------------------------------

    def dispatch(self, batch: ClaimBatch) -> None:
        self._kill_replaced(batch.claims)
        self.warm_hops.before_start(batch.claims)
        spawned = self._spawn_all(batch.claims)
        self.warm_hops.dispatched(batch.claims)
        if not spawned:
            return
        now, began = self.ctx.clock.now(), self.ctx.clock.monotonic()
        try:
            kept = self.ctx.leases.mark_dispatched(self.owner, spawned, now)
        except BaseException:
            # Not persisted, so not allowed to begin: cancelled at the gate, they end
            # as not_started and their claims are released when that is recorded.
            # Left gated, they would hold their claims forever with no timeout.
            for run in spawned:
                self.supervisor.cancel_gate(run.run_id)
            raise
        # The dispatch restarted their leases; their run.started rows were written with the mark.
        self._open_kept(spawned, {run.run_id for run in kept}, began)

    def _kill_replaced(self, claims: Iterable[NewClaim]) -> None:
        """The runs these claims replace (overlap: replace), killed if this loop runs them."""
        for new in claims:
            for old in new.replaces:
                if old in self.active:
                    self.supervisor.kill(old, "replaced")

    def _open_kept(self, spawned: Iterable[Dispatched], kept: set[str], began: float) -> None:
        """The gates of the runs a write marked dispatched opened, their leases confirmed from
        `began`; a spawned run it did not keep is cancelled at its gate (it ends not_started)."""
        self._confirm(sorted(kept), began)
        for run in spawned:
            if run.run_id not in kept:
                self.supervisor.cancel_gate(run.run_id)
        self.supervisor.open_gates(sorted(kept))

    def _capacity(self) -> int | None:
        """How many more runs --max-parallel allows (None: no limit); 0 marks us saturated."""
        if self.options.max_parallel is None:
            return None
        capacity = max(0, self.options.max_parallel - len(self.active))
        if capacity == 0:
            self._saturated = True
        return capacity

    def _spawn_all(self, claims: list[NewClaim]) -> list[Dispatched]:
        """Spawn every claimed run at its gate; the ones that cannot start give their claim back."""
        spawned: list[Dispatched] = []
        refused: list[Refused] = []
        try:
            for new in claims:
                self._spawn_one(new, spawned, refused)
        finally:
            if spawned:
                self.supervisor.wake()  # once for the batch (spawn_gated(wake=False))
        self.ctx.leases.release_refused(self.owner, refused, self.ctx.clock.now())
        return spawned

    def _spawn_one(self, new: NewClaim, spawned: list[Dispatched], refused: list[Refused]) -> None:
        request = self.request_of(new)
        try:
            child = self.supervisor.spawn_gated(request, wake=False, warm=new.chain is not None)
        except BlockedConfig as exc:
            outcome = Outcome(RunStatus.NOT_STARTED, "blocked_config", output_tail=exc.message, fault=Fault.JOB)
            refused.append(Refused(new.job, new.run_id, outcome, Event(AuditEvent.RUN_SKIPPED, {
                "job": new.job, "run_id": new.run_id, "slot": to_iso(new.slot), "reason": "blocked_config",
                "field": exc.field, "message": exc.message})))
            return
        except SpawnError as exc:
            refused.append(spawn_refused(new, exc.errno, str(exc)))
            return
        except Exception as exc:
            # Anything else that stops one spawn must not leak this claim, nor
            # leave the rest of the batch claimed and gated forever; nor a child that
            # was started before it failed: its gate closes, so nothing of it runs.
            self.supervisor.cancel_gate(new.run_id)
            refused.append(spawn_refused(new, getattr(exc, "errno", None), f"{type(exc).__name__}: {exc}"))
            return
        spawned.append(self.now_active(new, request, child.pid, child.start_time))

    def request_of(self, new: NewClaim) -> RunRequest:
        return RunRequest(
            run_id=new.run_id, job=new.job, command=new.spec.command, cwd=new.spec.cwd,
            env={**run_env(new.spec, new.run_id, to_iso(new.slot) or "", new.attempt, new.fence), **new.extra_env},
            timeout=new.spec.timeout, kill_grace=new.spec.kill_grace,
            log_path=self.ctx.paths.run_log(new.job, new.run_id),
            log_cap=new.spec.keep_log or self.options.log_cap, drain_timeout=self.options.drain_timeout,
            setup=child_setup_of(new.spec),
        )

    def now_active(self, new: NewClaim, request: RunRequest, pid: int, start_time: float) -> Dispatched:
        """A child of `new` is at its gate: the run is this engine's to tend."""
        self.active[new.run_id] = ActiveRun(new.job, new.run_id, new.spec, to_iso(new.slot) or "", new.attempt,
                                            str(request.log_path))
        self._confirm([new.run_id], self._claim_began)  # its lease began with the claim's round trip
        return Dispatched(new.job, new.run_id, pid, start_time, self.ctx.clock.monotonic())

    # --- results -------------------------------------------------------------------

    def record_results(self) -> int:
        if self.held.quiet(self.ctx.clock.now()):
            return 0
        results: list[RunResult] = []
        while True:
            try:
                results.append(self._pending.results.get_nowait())
            except queue.Empty:
                break
        results = [r for r in results if not self.hooks.ended(r.run_id) and not self.held.was_discarded(r.run_id)]
        if not results:
            return 0
        if self.held:
            self.report_started({r.run_id: r for r in results if r.run_id in self.held})
        now = self.ctx.clock.now()
        runs = [self.active.get(result.run_id) for result in results]
        ends = [RunEnd(result.run_id, outcome_of(result), run.job if run else None, run.log_path if run else None)
                for result, run in zip(results, runs, strict=True)]
        try:
            # Its directory fsync, rows and records wait for the hop's claim write below, whose
            # commit makes both durable at once (or for flush_deferred): one fsync less a hop.
            finished = self.ctx.leases.finish_many(self.owner, ends, now, self.held.lateness, defer_flush=True)
            self.held.lateness.clear()
            if os.environ.get(CRASH_ENV) == "after_finish":
                os.kill(os.getpid(), signal.SIGKILL)  # test seam: die between a finish and the next claim
        except BaseException:
            # Nothing was written: keep the results for the next tick. Dropped,
            # their runs would stay "running" (and renewed) forever.
            for result in results:
                self._pending.results.put(result)
            raise
        for result in results:
            self.active.pop(result.run_id, None)
            self.held.runs.pop(result.run_id, None)
            self._forget_lease(result.run_id)
        hops = triggered_chains(finished)
        if hops:
            self.due.invalidate()  # what the hop below leaves (a full --max-parallel) fire_due claims
        try:
            self._claim_hops(hops)
        finally:
            try:
                self.ctx.leases.flush_deferred()  # the ends durable, their rows and records written
            finally:
                for run, done in zip(runs, finished, strict=True):
                    self._after_finish(run, done)
        return len(results)

    def busy(self) -> bool:
        """A result waits to be recorded, or something falls due within 50 ms: no warm spawn now."""
        if not self._pending.results.empty():
            return True
        self.due.refresh()  # after the tick's own writes: what is due now, not what was before them
        return self.sleep_hint(0.1) < 0.05

    def _claim_hops(self, chain_ids: list[str]) -> None:
        """The dependants those finishes made ready, claimed and started now (SPEC §10: within
        50 ms of the upstream's recorded end): a write of the chain's jobs alone, not the full
        claim write of fire_due, whose cost grows with the store (44 ms at 1000 jobs). The warm
        children it adopts are marked dispatched in that same write (loop/hop_start.py): one
        write from an upstream's recorded end to its dependants' open gates, not two."""
        for chain_id in chain_ids:
            capacity = self._capacity()
            if capacity == 0:
                return
            adopting = HopStart(self)
            try:
                # The adopted children's gates open inside, the moment the write commits (adopting.committed).
                batch = self.ctx.leases.claim_chain(chain_id, self.ctx.clock.now(), self.owner, self.lease(), capacity,
                                                    start=adopting)
            except BaseException:
                adopting.undo()  # nothing was written: their gates never open
                raise
            self.dispatch(adopting.rest(batch))
            self.hops_claimed += len(batch.claims)

    def open_adopted(self, batch: ClaimBatch, started: list[Dispatched]) -> None:
        """Open the gates of the hop's runs its claim write marked dispatched (run.started rows
        written with it); one it did not keep is cancelled at its gate, as dispatch does. Called the
        moment that write commits (HopStart.committed), before its rows are delivered."""
        if batch.dispatched and os.environ.get(CRASH_ENV) == "after_hop_claim":
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: die with a hop's runs marked, gates closed
        kept = {run.run_id for run in batch.dispatched}
        self._kill_replaced(new for new in batch.claims if new.run_id in kept)
        self._open_kept(started, kept, self._claim_began)  # the claim write restarted their leases
        self.warm_hops.dispatched([new for new in batch.claims if new.run_id in kept])

    def _after_finish(self, run: ActiveRun | None, done: Finished) -> None:
        """The lease store wrote the rows and the record; what is left is the loop's."""
        if done.record is None:
            return
        if done.run_on_failure:
            if run is not None:
                self._start_on_failure(run, done.record)
            self.ctx.leases.settle([(done.record["job"], done.record["run_id"])])
        for listener in list(self.finished_listeners):
            listener(done.record)

    def recover_pending(self) -> int:
        """Deliver what a writer that died after a run's end left pending (store/outbox.py):
        its rows and record, and the on_failure hook it owed. Looked at once per new
        document, so an idle tick costs one identity test."""
        self.due.refresh()
        doc = self.due.doc
        if doc is self._outbox_seen:
            return 0
        self._outbox_seen = doc
        if not any(PENDING in entry.get("state", {}) for entry in doc["jobs"].values()):
            return 0
        owed = self.ctx.leases.deliver_pending(owner_alive, doc)
        for hook in owed:
            self.hooks.start_owed(hook, self.due.doc["jobs"].get(hook.job))
        self.ctx.leases.settle([(hook.job, hook.run_id) for hook in owed])
        self.due.invalidate()
        return len(owed)

    def _start_on_failure(self, run: ActiveRun, record: dict[str, Any]) -> None:
        self.hooks.start(run, record)

    # --- leases --------------------------------------------------------------------------

    def renew_if_due(self, force: bool = False) -> None:
        mono = self.ctx.clock.monotonic()
        if not self.active or (not force and mono - self._last_renew < self._renew_every()):
            return
        self._last_renew = mono
        runs = {r: a.job for r, a in self.active.items()}
        lost = self.ctx.leases.renew(self.owner, runs, self.lease())
        self._confirm([run_id for run_id in runs if run_id not in lost], mono)
        for run_id in lost:
            # Someone (an operator's resume, a healer) took the claim away: stop the work we no longer own.
            self.supervisor.kill(run_id, "claim_released")

    def _renew_every(self) -> float:
        """A third of the lease; with a self-fence, often enough that three renewals fit before its kill."""
        if self.fence is None:
            return self.options.renew_every
        grace = max((run.spec.kill_grace for run in self.active.values()), default=0.0)
        return fence_mod.renew_every(self.options.lease, grace)

    def _confirm(self, run_ids: list[str], since_mono: float) -> None:
        """The database confirmed these runs' leases in a round trip begun at `since_mono`."""
        if self.fence is None:
            return
        self.fence.confirmed({run_id: (run.job, run.spec.kill_grace) for run_id in run_ids
                              if (run := self.active.get(run_id)) is not None}, since_mono)

    def _forget_lease(self, run_id: str) -> None:
        if self.fence is not None:
            self.fence.forget(run_id)

    def adopt(self, new_owner: Owner) -> int:
        """A new generation takes over the runs this process still supervises."""
        old = self.owner
        self.owner = new_owner
        return self.ctx.leases.adopt(old, new_owner, {r: a.job for r, a in self.active.items()})

    def shutdown(self, wait: float | None = None) -> int:
        """Stop every run (kill_grace each), record them `killed` reason shutdown.

        Bounded: a child stuck in the kernel must not keep the loop from exiting; its claim
        then stays, and the next loop reclaims it as lost.
        """
        try:
            self.held.handed_back = self.cancel_held("shutdown")
        except Exception as exc:  # their claims then stay, and the next loop reclaims them
            print(f"cronctl: could not hand back runs claimed ahead: {exc}", file=sys.stderr)
        if wait is None:
            graces = [run.spec.kill_grace for run in self.active.values()]
            wait = max(graces, default=0.0) + self.options.drain_timeout + 10.0
        self.supervisor.shutdown("shutdown", wait=wait)
        self.held.end_quiet()  # every result now, whatever burst was starting
        recorded = self.record_results()
        self.drop_delivered()
        return recorded

    def drop_delivered(self) -> None:
        """Before this process exits: drop from the store the outbox entries it delivered.
        Left there, the next loop or force-run finds them orphaned and checks each against
        the audit log (about 0.2 s at 10,000 jobs). A failure here loses nothing."""
        with suppress(Exception):
            self.ctx.leases.flush_settled()


def build_engine(ctx: Context, owner: Owner, options: EngineOptions | None = None,
                 wake: threading.Event | None = None, subreaper: bool = False,
                 make_supervisor: Callable[..., Supervisor] = Supervisor, due: DueSource | None = None) -> Engine:
    """The one place that wires an engine and its supervisor: the supervisor hands every
    result to the engine (on its own thread), the engine drives the supervisor. The
    supervisor is not started: the caller starts it and shuts it down. `make_supervisor`
    takes the Supervisor's keyword arguments (tests pass one that does not fork)."""
    engines: list[Engine] = []  # the engine needs its supervisor, the supervisor its result callback
    supervisor = make_supervisor(on_result=lambda result: engines[0].on_result(result), subreaper=subreaper)
    engine = Engine(ctx, supervisor, owner, options, wake, due)
    engines.append(engine)
    return engine


@dataclass(frozen=True)
class OneRun:
    run_id: str
    record: dict[str, Any] | None  # its history record; None if it was never recorded


def run_one(engine: Engine, job: str) -> OneRun | None:
    """force-run without a loop: claim `job` now, then tend it with the loop's own steps
    (record results, renew leases) until it has ended. None: the job's overlap skipped it.

    The caller owns the supervisor: it started it, and shuts it down afterwards (which
    also ends an on_failure hook still running)."""
    records: list[dict[str, Any]] = []
    engine.finished_listeners.append(records.append)
    batch = engine.force(job)
    if not batch.claims:
        return None
    run_id = batch.claims[0].run_id
    while engine.active and not records:
        engine.wake.wait(1.0)
        engine.wake.clear()
        engine.record_results()
        engine.renew_if_due()
    engine.record_results()
    return OneRun(run_id, records[0] if records else None)


def triggered_chains(finished: list[Finished]) -> list[str]:
    """The chains in which these finishes made a node ready to claim, in order."""
    found: dict[str, None] = {}
    for done in finished:
        for event in done.events:
            if event.name == AuditEvent.CHAIN_TRIGGERED:
                found[str(event.details["chain"])] = None
    return list(found)


def spawn_refused(new: NewClaim, errno_: int | None, error: str) -> Refused:
    """A claimed run whose child could not be spawned: its claim is released at once.

    A forced run is recorded `not_started` (spawn_failed) as well: whoever asked for it
    (perhaps waiting with --wait) learns from its record that nothing ran; so is a chain
    node, whose chain has no next slot to fire it again: it ends there, failed, and its
    dependants are decided (released, the node would be claimed and refused every tick).
    A scheduled run is only released, so its next slot (or its pending retry) fires as usual.
    """
    event = Event(AuditEvent.RUN_SPAWN_FAILED, {
        "job": new.job, "run_id": new.run_id, "slot": to_iso(new.slot), "reason": "spawn_failed",
        "errno": errno_, "error": error})
    if new.trigger != Trigger.FORCE and new.chain is None:
        return Refused(new.job, new.run_id, None, event)
    fault = Fault.JOB if errno_ == errno.E2BIG else Fault.PLATFORM
    outcome = Outcome(RunStatus.NOT_STARTED, "spawn_failed", output_tail=error, fault=fault)
    return Refused(new.job, new.run_id, outcome, event, always_record=True)


def run_env(spec: JobSpec, run_id: str, slot: str, attempt: int, fence: int = 0) -> dict[str, str]:
    """What a run is told of itself; CRONCTL_FENCE (its claim's fence number, increasing per
    job) lets the systems it writes to refuse a writer older than one they have seen."""
    return {**spec.env, "CRONCTL_JOB": spec.name, "CRONCTL_RUN_ID": run_id, "CRONCTL_SLOT": slot,
            "CRONCTL_ATTEMPT": str(attempt), **({"CRONCTL_FENCE": str(fence)} if fence else {})}


def outcome_of(result: RunResult) -> Outcome:
    status = RunStatus(result.status)
    return Outcome(status=status, reason=result.reason, exit_code=result.exit_code, signal=result.signal,
                   duration=result.duration, output_tail=result.output_tail,
                   fault=Fault.PLATFORM if result.reason == "shutdown" else None)
