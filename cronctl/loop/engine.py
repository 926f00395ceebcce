"""One tick of the scheduler: claim what is due, dispatch it through the gate,
renew the leases of what runs, and record what ended (fenced).

The engine owns no thread. The loop (scheduler.py) calls `tick()`; the
supervisor's thread only hands results over through a queue, so every store
write of the loop happens on the tick thread.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from cronctl.context import Context
from cronctl.jobs.state import JobView
from cronctl.models import AuditEvent, JobSpec, RunStatus, command_text
from cronctl.proc.run import RunResult
from cronctl.proc.spawn import BlockedConfig, RunRequest, SpawnError
from cronctl.proc.supervisor import Supervisor
from cronctl.schedule.slots import fire_at
from cronctl.store import claims as claims_mod
from cronctl.store import history
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Lease, NewClaim, Outcome, Owner
from cronctl.timefmt import from_iso, to_iso

LOG_CAP = 1_000_000
# How long before its instant a slot is claimed and its child spawned at the gate, at
# least; more when many children are due at once (SPAWN_COST_START each, then measured).
PRESPAWN_LEAD = 2.0
SPAWN_COST_START = 0.004
# The "dispatched" write of runs claimed ahead is made this much (plus twice the last
# such write's duration) before their instant, then the supervisor opens their gates.
RELEASE_MARGIN = 0.05
# run.started rows of runs released at an instant are written this long after it, when
# the burst of children no longer needs the CPU.
STARTED_REPORT_DELAY = 0.3
# While a batch released at an instant starts, its children need every core: results
# are recorded (and run.started rows written) only after this many seconds per run
# released, at most BURST_QUIET_MAX.
BURST_QUIET_PER_RUN = 0.002
BURST_QUIET_MAX = 1.0
# Test seam: CRONCTL_FAULT_LOOP_CRASH=after_claim SIGKILLs the loop right after a claim is written;
# =held_at_gate once children claimed ahead wait at their gates, before they are marked dispatched.
CRASH_ENV = "CRONCTL_FAULT_LOOP_CRASH"
ON_FAILURE_TIMEOUT = 300.0


@dataclass
class ActiveRun:
    job: str
    run_id: str
    spec: JobSpec
    slot: str
    attempt: int
    log_path: str


@dataclass
class HeldRun:
    """A run claimed ahead of its slot, its child waiting at the gate."""

    job: str
    run_id: str
    spec: JobSpec
    slot: str
    due: datetime  # slot + jitter: when the gate opens
    advanced_to: str | None  # what the claim set next_run_at to
    pid: int
    start_time: float
    released: bool = False  # marked dispatched, gate opening handed to the supervisor


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
                 wake: threading.Event | None = None) -> None:
        self.ctx = ctx
        self.supervisor = supervisor
        self.owner = owner
        self.options = options or EngineOptions()
        self.wake = wake or threading.Event()
        self.active: dict[str, ActiveRun] = {}
        self.on_failure_runs: set[str] = set()
        self.finished_listeners: list[Callable[[dict[str, Any]], None]] = []
        self._pending = _Pending()
        self._signature: Any = None
        self._doc: dict[str, Any] | None = None
        self._next_due: datetime | None = None
        self._next_ahead: datetime | None = None
        self.held: dict[str, HeldRun] = {}
        # Runs handed back before their gate opened: their not_started result is no news.
        self._discarded: set[str] = set()
        self._release_write = 0.0  # seconds the last release write took
        self._spawn_cost = SPAWN_COST_START  # seconds per gated child, as last measured
        self._ahead_count = 0  # slots that fire with (or within a second of) the next one
        self._lateness: list[float] = []  # observed, not yet persisted (runs claimed ahead)
        self._quiet_until: datetime | None = None  # no result recording before (a burst starts)
        self._last_renew = ctx.clock.monotonic()
        # Due jobs left unclaimed for want of --max-parallel room: only a run's end
        # makes room, and it wakes the tick, so sleeping until then is no delay.
        self._saturated = False

    # --- wiring ----------------------------------------------------------------

    def on_result(self, result: RunResult) -> None:
        """Called on the supervisor thread: hand over and wake the tick thread.

        Not during a burst's quiet window: the tick wakes at its end anyway.
        """
        self._pending.results.put(result)
        quiet = self._quiet_until
        if quiet is None or self.ctx.clock.now() >= quiet:
            self.wake.set()

    def lease(self) -> Lease:
        return Lease(self.ctx.clock.monotonic() + self.options.lease,
                     self.ctx.clock.now() + timedelta(seconds=self.options.lease))

    # --- the tick ----------------------------------------------------------------

    def tick(self) -> TickReport:
        report = TickReport()
        report.finished = self.record_results()
        report.claimed = self.fire_due()
        report.claimed += self.fire_ahead()
        self.release_held()
        self.report_started()
        self.renew_if_due()
        report.sleep_hint = self.sleep_hint()
        return report

    def fire_due(self) -> int:
        now = self.ctx.clock.now()
        self._saturated = False
        self._refresh_next_due()
        if self._next_due is None or self._next_due > now:
            return 0
        capacity = self._capacity()
        if capacity == 0:
            return 0
        with self.ctx.store.transaction() as doc:
            batch = claims_mod.claim_due(doc, now, self.owner, self.lease(), capacity)
        self._saturated = batch.deferred > 0
        self._signature = None  # our own write changed the store: recompute the next due instant
        self._write_events(batch.events)
        if batch.claims and os.environ.get(CRASH_ENV) == "after_claim":
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: die between claim and dispatch
        self.dispatch(batch)
        return len(batch.claims)

    def force(self, name: str) -> ClaimBatch:
        """force-run: claim now under the usual overlap rules and dispatch."""
        now = self.ctx.clock.now()
        with self.ctx.store.transaction() as doc:
            batch = claims_mod.claim_force(doc, name, now, self.owner, self.lease())
        self._write_events(batch.events)
        self.dispatch(batch)
        return batch

    @property
    def doc(self) -> dict[str, Any]:
        """The store as last read, re-read only when the file changed (one stat otherwise).

        Shared with the healer, so an idle tick parses nothing. Read-only: every change
        goes through a transaction, which reads the store afresh under its lock.
        """
        self._refresh_next_due()
        assert self._doc is not None
        return self._doc

    def _refresh_next_due(self) -> None:
        doc, signature = self.ctx.store.read_if_changed(self._signature)
        if doc is None:
            return
        self._signature = signature
        self._doc = doc
        self._next_due, self._next_ahead, self._ahead_count = next_instants(doc)

    def sleep_hint(self) -> float:
        now = self.ctx.clock.now()
        wake: list[datetime] = []
        if not self._saturated:
            if self._next_due is not None:
                wake.append(self._next_due)
            if self._next_ahead is not None and self.options.prespawn_lead > 0:
                wake.append(self._next_ahead - timedelta(seconds=self._lead()))
        quiet = self._quiet_until
        for held in self.held.values():
            if not held.released:
                wake.append(held.due - self._release_margin())
                continue
            # Never sooner than a moment from now: a gate the supervisor has yet to open, or
            # a result on its way, must not make the tick spin.
            report_at = max(held.due + timedelta(seconds=STARTED_REPORT_DELAY), now + timedelta(seconds=0.05))
            wake.append(max(report_at, quiet) if quiet is not None else report_at)
        if quiet is not None:
            wake.append(quiet)
        if not wake:
            return 1.0
        return max(0.0, min(1.0, (min(wake) - now).total_seconds()))

    # --- claiming ahead of the slot --------------------------------------------------

    def fire_ahead(self) -> int:
        """Claim the slots of the next PRESPAWN_LEAD seconds and spawn their children at the gate.

        One write claims them all (slot recorded, next_run_at advanced); their children
        are spawned now, when forking hundreds costs no lateness, and wait at the gate.
        """
        if self.options.prespawn_lead <= 0 or self._saturated:
            return 0
        lead = self._lead()
        self._refresh_next_due()
        now = self.ctx.clock.now()
        if self._next_ahead is None or self._next_ahead - now > timedelta(seconds=lead):
            return 0
        capacity = self._capacity()
        if capacity == 0:
            return 0
        try:
            with self.ctx.store.transaction() as doc:
                batch = claims_mod.claim_ahead(doc, now, now + timedelta(seconds=lead), self.owner, self.lease(),
                                               capacity)
                advanced = {new.run_id: doc["jobs"][new.job]["state"].get("next_run_at") for new in batch.claims}
        finally:
            self._signature = None  # recompute the next instants from the store as it now is
        self._saturated = batch.deferred > 0
        self._write_events(batch.events)
        if not batch.claims:
            return 0
        if os.environ.get(CRASH_ENV) == "after_claim":
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: die between claim and dispatch
        began = self.ctx.clock.monotonic()
        spawned = self._spawn_all(batch.claims)
        if spawned:
            self._spawn_cost = max(0.0005, (self.ctx.clock.monotonic() - began) / len(batch.claims))
        by_id = {new.run_id: new for new in batch.claims}
        for run in spawned:
            new = by_id[run.run_id]
            assert new.held_until is not None
            self.held[run.run_id] = HeldRun(new.job, run.run_id, new.spec, to_iso(new.slot) or "", new.held_until,
                                            advanced[run.run_id], run.pid, run.start_time)
        if spawned and os.environ.get(CRASH_ENV) == "held_at_gate":
            os.kill(os.getpid(), signal.SIGKILL)  # test seam: die with children waiting at their gates
        return len(spawned)

    def _lead(self) -> float:
        """The configured lead, plus twice the time to spawn the children due together, plus
        room for the two store writes a big store makes slow (the claim ahead, then the
        release; the last release write tells their cost)."""
        return self.options.prespawn_lead + 2 * self._ahead_count * self._spawn_cost + 3 * self._release_write

    def _release_margin(self) -> timedelta:
        return timedelta(seconds=RELEASE_MARGIN + 2 * self._release_write)

    def release_held(self, force: bool = False) -> None:
        """Just before their instant: mark held runs dispatched (one write), then let the
        supervisor open their gates at the instant. A run whose job was paused, edited or
        removed since its claim, or whose claim was taken away, is handed back instead."""
        now = self.ctx.clock.now()
        margin = self._release_margin()
        due = [h for h in self.held.values() if not h.released and (force or h.due - now <= margin)]
        if not due:
            return
        started = self.ctx.clock.monotonic()
        kept: list[HeldRun] = []
        events: list[Event] = []
        with self.ctx.store.transaction() as doc:
            for held in due:
                why = _changed_since_claim(doc, held, self.owner)
                if why is not None:
                    event = claims_mod.unhold(doc, held.job, held.run_id, held.advanced_to, why)
                    events.append(event or Event(AuditEvent.RUN_SKIPPED, {
                        "job": held.job, "run_id": held.run_id, "slot": held.slot,
                        "reason": "cancelled_before_slot", "why": why}))
                    continue
                mono = self.ctx.clock.monotonic() + (held.due - self.ctx.clock.now()).total_seconds()
                run = Dispatched(held.job, held.run_id, held.pid, held.start_time, mono)
                if claims_mod.mark_dispatched(doc, self.owner, [run], held.due, observe=False):
                    kept.append(held)
            self._flush_lateness(doc)
        self._signature = None
        self._release_write = self.ctx.clock.monotonic() - started
        kept_ids = {held.run_id for held in kept}
        for held in due:
            if held.run_id not in kept_ids:
                self._discard(held.run_id)
        self._write_events(events)
        by_instant: dict[datetime, list[str]] = {}
        for held in kept:
            held.released = True
            by_instant.setdefault(held.due, []).append(held.run_id)
        for instant, run_ids in sorted(by_instant.items()):
            quiet = instant + timedelta(seconds=min(BURST_QUIET_MAX, BURST_QUIET_PER_RUN * len(run_ids)))
            if self._quiet_until is None or quiet > self._quiet_until:
                self._quiet_until = quiet
            self.supervisor.open_gates_after(run_ids, (instant - self.ctx.clock.now()).total_seconds())

    def report_started(self, ending: dict[str, RunResult] | None = None) -> None:
        """After the instant: run.started rows and the lateness of the runs released then.

        A run in `ending` is reported now, whatever the time: its run.finished row follows.
        """
        ending = ending or {}
        now = self.ctx.clock.now()
        if not ending and self._quiet_until is not None and now < self._quiet_until:
            return
        ready = [h for h in self.held.values()
                 if h.released and (h.run_id in ending or now - h.due >= timedelta(seconds=STARTED_REPORT_DELAY))]
        if not ready:
            return
        opened = self.supervisor.gate_opened_at([h.run_id for h in ready if h.run_id not in ending])
        for run_id, result in ending.items():
            opened[run_id] = result.started_mono if result.status != RunStatus.NOT_STARTED.value else None
        mono_now, wall_now = self.ctx.clock.monotonic(), self.ctx.clock.now()
        for held in ready:
            if held.run_id not in opened:
                continue  # ended: its result, on its way, reports it (record_results)
            when = opened[held.run_id]
            if when is None and held.run_id not in ending:
                continue  # still closed: looked at again on the next tick
            self.held.pop(held.run_id, None)
            if when is None:
                continue  # ended before its gate opened; its result says so
            late = (wall_now - timedelta(seconds=mono_now - when) - held.due).total_seconds()
            self._lateness.append(late)
            run = self.active.get(held.run_id)
            self.ctx.audit.append(AuditEvent.RUN_STARTED, job=held.job, run_id=held.run_id, slot=held.slot,
                                  pid=held.pid, attempt=run.attempt if run else 1, held=True,
                                  late_ms=round(max(0.0, late) * 1000, 1))

    def cancel_held(self, why: str) -> int:
        """Hand back every held run whose gate has not opened (the loop stops): nothing of them ran."""
        back = [h for h in list(self.held.values()) if self.supervisor.cancel_gate(h.run_id)]
        if not back:
            return 0
        events = []
        with self.ctx.store.transaction() as doc:
            for held in back:
                event = claims_mod.unhold(doc, held.job, held.run_id, held.advanced_to, why)
                if event is not None:
                    events.append(event)
        self._signature = None
        for held in back:
            self._discard(held.run_id)
        self._write_events(events)
        return len(back)

    def _discard(self, run_id: str) -> None:
        self.held.pop(run_id, None)
        self.active.pop(run_id, None)
        self._discarded.add(run_id)
        self.supervisor.cancel_gate(run_id)

    def _flush_lateness(self, doc: dict[str, Any]) -> None:
        for seconds in self._lateness:
            claims_mod.observe_lateness(doc, seconds)
        self._lateness.clear()

    # --- dispatch ----------------------------------------------------------------

    def dispatch(self, batch: ClaimBatch) -> None:
        for new in batch.claims:
            for old in new.replaces:
                if old in self.active:
                    self.supervisor.kill(old, "replaced")
        spawned = self._spawn_all(batch.claims)
        if not spawned:
            return
        now = self.ctx.clock.now()
        try:
            with self.ctx.store.transaction() as doc:
                kept = claims_mod.mark_dispatched(doc, self.owner, spawned, now)
        except BaseException:
            # Not persisted, so not allowed to begin: cancelled at the gate, they end
            # as not_started and their claims are released when that is recorded.
            # Left gated, they would hold their claims forever with no timeout.
            for run in spawned:
                self.supervisor.cancel_gate(run.run_id)
            raise
        kept_ids = {run.run_id for run in kept}
        for run in spawned:
            if run.run_id not in kept_ids:
                self.supervisor.cancel_gate(run.run_id)
        self.supervisor.open_gates(sorted(kept_ids))
        for run in kept:
            self.ctx.audit.append(AuditEvent.RUN_STARTED, job=run.job, run_id=run.run_id,
                                  slot=self.active[run.run_id].slot, pid=run.pid,
                                  attempt=self.active[run.run_id].attempt)

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
        refused: list[tuple[NewClaim, Outcome | None, Event]] = []
        for new in claims:
            self._spawn_one(new, spawned, refused)
        self._release_refused(refused)
        return spawned

    def _spawn_one(self, new: NewClaim, spawned: list[Dispatched],
                   refused: list[tuple[NewClaim, Outcome | None, Event]]) -> None:
        log_path = self.ctx.paths.run_log(new.job, new.run_id)
        request = RunRequest(
            run_id=new.run_id, job=new.job, command=new.spec.command, cwd=new.spec.cwd,
            env=run_env(new.spec, new.run_id, to_iso(new.slot) or "", new.attempt),
            timeout=new.spec.timeout, kill_grace=new.spec.kill_grace, log_path=log_path,
            log_cap=self.options.log_cap, drain_timeout=self.options.drain_timeout,
        )
        try:
            child = self.supervisor.spawn_gated(request)
        except BlockedConfig as exc:
            outcome = Outcome(RunStatus.NOT_STARTED, "blocked_config", output_tail=exc.message, fault="job")
            refused.append((new, outcome, Event(AuditEvent.RUN_SKIPPED, {
                "job": new.job, "run_id": new.run_id, "slot": to_iso(new.slot), "reason": "blocked_config",
                "field": exc.field, "message": exc.message})))
            return
        except SpawnError as exc:
            refused.append((new, None, Event(AuditEvent.RUN_SPAWN_FAILED, {
                "job": new.job, "run_id": new.run_id, "slot": to_iso(new.slot), "reason": "spawn_failed",
                "errno": exc.errno, "error": str(exc)})))
            return
        except Exception as exc:
            # Anything else that stops one spawn must not leak this claim, nor
            # leave the rest of the batch claimed and gated forever.
            refused.append((new, None, Event(AuditEvent.RUN_SPAWN_FAILED, {
                "job": new.job, "run_id": new.run_id, "slot": to_iso(new.slot), "reason": "spawn_failed",
                "errno": getattr(exc, "errno", None), "error": f"{type(exc).__name__}: {exc}"})))
            return
        self.active[new.run_id] = ActiveRun(new.job, new.run_id, new.spec, to_iso(new.slot) or "", new.attempt,
                                            str(log_path))
        spawned.append(Dispatched(new.job, new.run_id, child.pid, child.start_time, self.ctx.clock.monotonic()))

    def _release_refused(self, refused: list[tuple[NewClaim, Outcome | None, Event]]) -> None:
        """Spawn failures release the claim at once; a blocked config is recorded once, then skipped."""
        if not refused:
            return
        now = self.ctx.clock.now()
        rows: list[Event] = []
        records: list[dict[str, Any]] = []
        with self.ctx.store.transaction() as doc:
            for new, outcome, event in refused:
                state = doc["jobs"].get(new.job, {}).get("state", {})
                if outcome is None or state.get("blocked") == outcome.output_tail:
                    claims_mod.release(doc, new.job, new.run_id)
                    rows.append(event)
                    continue
                done = claims_mod.finish(doc, new.job, new.run_id, self.owner, outcome, now)
                state["blocked"] = outcome.output_tail
                rows.extend(done.events)
                if done.record:
                    records.append(done.record)
        self._write_events(rows)
        for record in records:
            history.append_record(self.ctx.paths, record)

    # --- results -------------------------------------------------------------------

    def record_results(self) -> int:
        if self._quiet_until is not None:
            if self.ctx.clock.now() < self._quiet_until:
                return 0
            self._quiet_until = None
        results: list[RunResult] = []
        while True:
            try:
                results.append(self._pending.results.get_nowait())
            except queue.Empty:
                break
        results = [r for r in results if not self._is_on_failure(r) and not self._was_discarded(r)]
        if not results:
            return 0
        if self.held:
            self.report_started({r.run_id: r for r in results if r.run_id in self.held})
        now = self.ctx.clock.now()
        done_list = []
        try:
            with self.ctx.store.transaction() as doc:
                for result in results:
                    run = self.active.get(result.run_id)
                    job = run.job if run else _job_of(doc, result.run_id)
                    done = claims_mod.finish(doc, job or "?", result.run_id, self.owner, outcome_of(result), now)
                    if not done.fenced:
                        state = doc["jobs"][job]["state"]
                        state.pop("blocked", None)
                    done_list.append((run, done))
                self._flush_lateness(doc)
        except BaseException:
            # Nothing was written: keep the results for the next tick. Dropped,
            # their runs would stay "running" (and renewed) forever.
            for result in results:
                self._pending.results.put(result)
            raise
        for result in results:
            self.active.pop(result.run_id, None)
            self.held.pop(result.run_id, None)
        for run, done in done_list:
            self._after_finish(run, done)
        return len(results)

    def _after_finish(self, run: ActiveRun | None, done: claims_mod.Finished) -> None:
        self._write_events(done.events)
        if done.record is None:
            return
        done.record["log"] = run.log_path if run else None
        history.append_record(self.ctx.paths, done.record)
        history.prune_logs(self.ctx.paths, done.record["job"])
        if done.run_on_failure and run is not None:
            self._start_on_failure(run, done.record)
        for listener in list(self.finished_listeners):
            listener(done.record)

    def _was_discarded(self, result: RunResult) -> bool:
        if result.run_id in self._discarded:
            self._discarded.discard(result.run_id)
            return True
        return False

    def _is_on_failure(self, result: RunResult) -> bool:
        if result.run_id in self.on_failure_runs:
            self.on_failure_runs.discard(result.run_id)
            return True
        return False

    def _start_on_failure(self, run: ActiveRun, record: dict[str, Any]) -> None:
        """The job's own notifier: its failure must never wedge or crash the loop."""
        assert run.spec.on_failure is not None
        hook_id = f"{run.run_id}.on_failure"
        env = {**run.spec.env, "CRONCTL_JOB": run.job, "CRONCTL_RUN_ID": run.run_id,
               "CRONCTL_STATUS": record["status"], "CRONCTL_EXIT_CODE": str(record.get("exit_code") or ""),
               "CRONCTL_LOG": run.log_path, "CRONCTL_SLOT": run.slot}
        request = RunRequest(run_id=hook_id, job=run.job, command=run.spec.on_failure, cwd=run.spec.cwd,
                             env=env, timeout=min(run.spec.timeout or ON_FAILURE_TIMEOUT, ON_FAILURE_TIMEOUT),
                             kill_grace=run.spec.kill_grace,
                             log_path=self.ctx.paths.job_runs_dir(run.job) / f"{hook_id}.log",
                             log_cap=self.options.log_cap, drain_timeout=self.options.drain_timeout)
        try:
            self.supervisor.spawn_gated(request)
        except (BlockedConfig, SpawnError) as exc:
            print(f"cronctl: on_failure of {run.job} could not start: {exc}", file=sys.stderr)
            return
        self.on_failure_runs.add(hook_id)
        self.supervisor.open_gates([hook_id])

    # --- leases --------------------------------------------------------------------------

    def renew_if_due(self, force: bool = False) -> None:
        mono = self.ctx.clock.monotonic()
        if not self.active or (not force and mono - self._last_renew < self.options.renew_every):
            return
        self._last_renew = mono
        with self.ctx.store.transaction() as doc:
            lost = claims_mod.renew(doc, self.owner, {r: a.job for r, a in self.active.items()}, self.lease())
        for run_id in lost:
            # Someone (an operator's resume, a healer) took the claim away: stop the work we no longer own.
            self.supervisor.kill(run_id, "claim_released")

    def adopt(self, new_owner: Owner) -> int:
        """A new generation takes over the runs this process still supervises."""
        old = self.owner
        self.owner = new_owner
        adopted = 0
        with self.ctx.store.transaction() as doc:
            for run_id, run in self.active.items():
                claim = (doc["jobs"].get(run.job, {}).get("state", {}).get("claims") or {}).get(run_id)
                if claim is not None and old.owns(claim):
                    claim["owner"] = new_owner.to_dict()
                    adopted += 1
        return adopted

    def shutdown(self, wait: float | None = None) -> int:
        """Stop every run (kill_grace each), record them `killed` reason shutdown.

        Bounded: a child stuck in the kernel must not keep the loop from exiting; its claim
        then stays, and the next loop reclaims it as lost.
        """
        try:
            self.cancel_held("shutdown")
        except Exception as exc:  # their claims then stay, and the next loop reclaims them
            print(f"cronctl: could not hand back runs claimed ahead: {exc}", file=sys.stderr)
        if wait is None:
            graces = [run.spec.kill_grace for run in self.active.values()]
            wait = max(graces, default=0.0) + self.options.drain_timeout + 10.0
        self.supervisor.shutdown("shutdown", wait=wait)
        self._quiet_until = None  # every result now, whatever burst was starting
        return self.record_results()

    def _write_events(self, events: list[Event]) -> None:
        for event in events:
            self.ctx.audit.append(event.name, **event.details)


def next_instants(doc: dict[str, Any]) -> tuple[datetime | None, datetime | None, int]:
    """earliest_fire(doc), the earliest slot that may be claimed ahead, and how many slots
    fire within a second of that one (whose children are to be spawned together)."""
    fires = [when for entry in doc["jobs"].values() if (when := claims_mod.ahead_fire(entry)) is not None]
    if not fires:
        return earliest_fire(doc), None, 0
    ahead = min(fires)
    together = sum(1 for when in fires if (when - ahead).total_seconds() <= 1.0)
    return earliest_fire(doc), ahead, together


def _changed_since_claim(doc: dict[str, Any], held: HeldRun, owner: Owner) -> str | None:
    """Why a run claimed ahead must not start after all, or None."""
    entry = doc["jobs"].get(held.job)
    if entry is None:
        return "removed"
    claim = (entry["state"].get("claims") or {}).get(held.run_id)
    if claim is None or not owner.owns(claim):
        return "claim_released"
    view = JobView.from_entry(entry)
    if view.paused:
        return "paused"
    if view.spec != held.spec:
        return "edited"
    return None


def earliest_fire(doc: dict[str, Any]) -> datetime | None:
    """The first instant any job may need a claim (a retry or a slot plus its jitter)."""
    earliest: datetime | None = None
    for entry in doc["jobs"].values():
        state = entry["state"]
        if state.get("paused") or entry.get("paused") or state.get("completed"):
            continue
        candidates = []
        retry = state.get("retry")
        if retry and retry.get("due_at"):
            candidates.append(from_iso(retry["due_at"]))
        if state.get("next_run_at") and not (entry.get("repeat") is not None
                                             and claims_mod.repeat_spent(JobView.from_entry(entry).spec, state)):
            slot = from_iso(state["next_run_at"])
            jitter = entry.get("jitter")
            if jitter and jitter != "0s":
                slot = fire_at(JobView.from_entry(entry).spec, slot)  # type: ignore[arg-type]
            candidates.append(slot)
        for when in candidates:
            if when is not None and (earliest is None or when < earliest):
                earliest = when
    return earliest


def run_env(spec: JobSpec, run_id: str, slot: str, attempt: int) -> dict[str, str]:
    return {**spec.env, "CRONCTL_JOB": spec.name, "CRONCTL_RUN_ID": run_id, "CRONCTL_SLOT": slot,
            "CRONCTL_ATTEMPT": str(attempt)}


def outcome_of(result: RunResult) -> Outcome:
    status = RunStatus(result.status)
    return Outcome(status=status, reason=result.reason, exit_code=result.exit_code, signal=result.signal,
                   duration=result.duration, output_tail=result.output_tail,
                   fault="platform" if result.reason == "shutdown" else None)


def _job_of(doc: dict[str, Any], run_id: str) -> str | None:
    for name, entry in doc["jobs"].items():
        if run_id in (entry["state"].get("claims") or {}):
            return name
    return None


def describe(spec: JobSpec) -> str:
    return f"{spec.name}: {spec.schedule_text}: {command_text(spec.command)}"
