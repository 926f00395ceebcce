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

from cronctl import claims as claims_mod
from cronctl import history
from cronctl.claims import ClaimBatch, Dispatched, Event, Lease, NewClaim, Outcome, Owner
from cronctl.context import Context
from cronctl.jobs import JobView
from cronctl.models import AuditEvent, JobSpec, RunStatus, command_text
from cronctl.planning import fire_at
from cronctl.runner import BlockedConfig, RunRequest, RunResult, SpawnError, Supervisor
from cronctl.timefmt import from_iso, to_iso

LOG_CAP = 1_000_000
# Test seam: CRONCTL_FAULT_LOOP_CRASH=after_claim SIGKILLs the loop right after a claim is written.
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
class EngineOptions:
    lease: float = claims_mod.DEFAULT_LEASE
    max_parallel: int | None = None
    drain_timeout: float = 2.0
    log_cap: int = LOG_CAP

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
        self._next_due: datetime | None = None
        self._last_renew = ctx.clock.monotonic()
        # Due jobs left unclaimed for want of --max-parallel room: only a run's end
        # makes room, and it wakes the tick, so sleeping until then is no delay.
        self._saturated = False

    # --- wiring ----------------------------------------------------------------

    def on_result(self, result: RunResult) -> None:
        """Called on the supervisor thread: hand over and wake the tick thread."""
        self._pending.results.put(result)
        self.wake.set()

    def lease(self) -> Lease:
        return Lease(self.ctx.clock.monotonic() + self.options.lease,
                     self.ctx.clock.now() + timedelta(seconds=self.options.lease))

    # --- the tick ----------------------------------------------------------------

    def tick(self) -> TickReport:
        report = TickReport()
        report.finished = self.record_results()
        report.claimed = self.fire_due()
        self.renew_if_due()
        report.sleep_hint = self.sleep_hint()
        return report

    def fire_due(self) -> int:
        now = self.ctx.clock.now()
        self._saturated = False
        self._refresh_next_due()
        if self._next_due is None or self._next_due > now:
            return 0
        capacity = None
        if self.options.max_parallel is not None:
            capacity = max(0, self.options.max_parallel - len(self.active))
        if capacity == 0:
            self._saturated = True
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

    def _refresh_next_due(self) -> None:
        doc, signature = self.ctx.store.read_if_changed(self._signature)
        if doc is None:
            return
        self._signature = signature
        self._next_due = earliest_fire(doc)

    def sleep_hint(self) -> float:
        now = self.ctx.clock.now()
        if self._next_due is None or self._saturated:
            return 1.0
        return max(0.0, min(1.0, (self._next_due - now).total_seconds()))

    # --- dispatch ----------------------------------------------------------------

    def dispatch(self, batch: ClaimBatch) -> None:
        for new in batch.claims:
            for old in new.replaces:
                if old in self.active:
                    self.supervisor.kill(old, "replaced")
        spawned: list[Dispatched] = []
        refused: list[tuple[NewClaim, Outcome | None, Event]] = []
        for new in batch.claims:
            self._spawn_one(new, spawned, refused)
        self._release_refused(refused)
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
        results: list[RunResult] = []
        while True:
            try:
                results.append(self._pending.results.get_nowait())
            except queue.Empty:
                break
        results = [r for r in results if not self._is_on_failure(r)]
        if not results:
            return 0
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
        except BaseException:
            # Nothing was written: keep the results for the next tick. Dropped,
            # their runs would stay "running" (and renewed) forever.
            for result in results:
                self._pending.results.put(result)
            raise
        for result in results:
            self.active.pop(result.run_id, None)
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
        if wait is None:
            graces = [run.spec.kill_grace for run in self.active.values()]
            wait = max(graces, default=0.0) + self.options.drain_timeout + 10.0
        self.supervisor.shutdown("shutdown", wait=wait)
        return self.record_results()

    def _write_events(self, events: list[Event]) -> None:
        for event in events:
            self.ctx.audit.append(event.name, **event.details)


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
