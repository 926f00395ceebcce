"""Every known wedge, found and healed by one idempotent pass (SPEC §6).

`heal_pass` takes `now`, liveness checks and a process killer, so it is
unit-testable without a clock or a fork. Processes are killed BEFORE the
claim is released, and each release re-reads the claim under the store lock,
so a run that just ended for real is never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Container

from cronctl.context import Context
from cronctl.jobs.health import FAILED, claim_problem, persisted_error_wedge
from cronctl.jobs.state import JobView
from cronctl.models import AuditEvent, RunStatus
from cronctl.schedule.slots import first_slot
from cronctl.store import claims as claims_mod
from cronctl.store import history
from cronctl.store.claims import Event, Outcome
from cronctl.timefmt import from_iso, to_iso

DEADLINE_SLACK = 120.0

# (run_id, child {"pid","start_time"} or None, grace seconds) -> number of processes ended
Killer = Callable[[str, "dict[str, Any] | None", float], int]


@dataclass
class Liveness:
    owner_alive: Callable[[dict[str, Any]], bool]
    lease_expired: Callable[[dict[str, Any]], bool]
    monotonic: Callable[[], float]


@dataclass
class HealReport:
    reclaimed: list[tuple[str, str, str]] = field(default_factory=list)  # (job, run_id, reason)
    deadline_terminated: list[tuple[str, str]] = field(default_factory=list)
    rearmed: list[str] = field(default_factory=list)

    @property
    def anything(self) -> bool:
        return bool(self.reclaimed or self.deadline_terminated or self.rearmed)


def bump(doc: dict[str, Any], counter: str, by: int = 1) -> None:
    counters = doc.setdefault("counters", {})
    counters[counter] = int(counters.get(counter) or 0) + by


def run_deadline(claim: dict[str, Any], spec_retries: int, retry_delay: float) -> float | None:
    """Seconds after the start by which any run must have ended (None: no timeout, no deadline)."""
    timeout = float(claim.get("timeout") or 0.0)
    if timeout <= 0:
        return None
    return timeout + float(claim.get("kill_grace") or 0.0) + spec_retries * retry_delay + DEADLINE_SLACK


def heal_pass(ctx: Context, now: datetime, live: Liveness, kill: Killer,
              supervised: Container[str] = frozenset(), doc: dict[str, Any] | None = None) -> HealReport:
    """One sweep.

    `supervised` are the run ids this process really watches: only their deadline is
    checked. Every other claim, even one held in this process's name (leaked), is judged
    by its owner's life and its lease. `doc` is a recent read of the store (the loop
    passes the one it cached, so an idle tick re-parses nothing); every change re-reads
    the claim under the lock anyway.
    """
    report = HealReport()
    broken: list[tuple[str, str, dict[str, Any], str]] = []
    for name, entry in _suspects(doc if doc is not None else ctx.store.read()):
        view = JobView.from_entry(entry)
        for run_id, claim in list(view.claims.items()):
            problem = None if run_id in supervised else claim_problem(claim, live.owner_alive, live.lease_expired)
            if problem is not None:
                broken.append((name, run_id, claim, problem))
            else:
                _check_deadline(ctx, view, run_id, claim, now, live, kill, report)
        if persisted_error_wedge(view, now):
            _rearm(ctx, name, now, report)
    ended = _kill_all(broken, kill)
    for name, run_id, claim, problem in broken:
        reclaim(ctx, name, run_id, claim, problem, now, lambda *_, done=ended[run_id]: done, report)
    return report


def _kill_all(broken: list[tuple[str, str, dict[str, Any], str]], kill: Killer) -> dict[str, int]:
    """Kill the processes of every broken run at once: each may wait out its kill_grace,
    and a new leader healing many orphans must not look hung meanwhile."""
    if len(broken) <= 1:
        return {run_id: kill(run_id, claim.get("child"), _grace(claim)) for _, run_id, claim, _ in broken}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, len(broken)), thread_name_prefix="cronctl-heal") as pool:
        futures = {run_id: pool.submit(kill, run_id, claim.get("child"), _grace(claim))
                   for _, run_id, claim, _ in broken}
        return {run_id: future.result() for run_id, future in futures.items()}


def _grace(claim: dict[str, Any]) -> float:
    return float(claim.get("kill_grace") or 0.0)


def _suspects(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Only jobs with a claim or a failed last run can need healing; the rest cost one dict lookup."""
    return [(name, entry) for name, entry in doc["jobs"].items()
            if entry["state"].get("claims") or entry["state"].get("last_status") in FAILED]


def reclaim(ctx: Context, job: str, run_id: str, claim: dict[str, Any], reason: str, now: datetime,
            kill: Killer, report: HealReport | None = None) -> bool:
    """Kill what is left of a run, then release its claim as lost / not_started (fenced on run_id)."""
    ended = kill(run_id, claim.get("child"), _grace(claim))
    dispatched = bool(claim.get("dispatched"))
    outcome = Outcome(
        RunStatus.LOST if dispatched else RunStatus.NOT_STARTED,
        "executor_lost_mid_run" if dispatched else "run_claimed_without_dispatch",
        fault="platform",
    )
    with ctx.store.transaction() as doc:
        current = (doc["jobs"].get(job, {}).get("state", {}).get("claims") or {}).get(run_id)
        if current is None or current.get("owner") != claim.get("owner"):
            return False  # it ended for real, or was reclaimed by someone else meanwhile
        done = claims_mod.finish(doc, job, run_id, None, outcome, now)
        bump(doc, "operator_release" if reason == "operator" else reason)
    _write(ctx, [Event(AuditEvent.CLAIM_RECLAIMED, {
        "job": job, "run_id": run_id, "reason": reason, "status": outcome.status.value,
        "run_reason": outcome.reason, "processes_killed": ended, "owner_pid": (claim.get("owner") or {}).get("pid"),
    }), *done.events])
    if done.record:
        history.append_record(ctx.paths, done.record)
    if report is not None:
        report.reclaimed.append((job, run_id, reason))
    return True


def _check_deadline(ctx: Context, view: JobView, run_id: str, claim: dict[str, Any], now: datetime,
                    live: Liveness, kill: Killer, report: HealReport) -> None:
    started = claim.get("started_mono")
    limit = run_deadline(claim, view.spec.retries, view.spec.retry_delay)
    if started is None or limit is None or claim.get("boot_id") is None:
        return
    if live.monotonic() - float(started) <= limit:
        return
    ended = kill(run_id, claim.get("child"), float(claim.get("kill_grace") or 0.0))
    outcome = Outcome(RunStatus.TIMEOUT, "deadline_janitor", fault="job")
    with ctx.store.transaction() as doc:
        current = (doc["jobs"].get(view.spec.name, {}).get("state", {}).get("claims") or {}).get(run_id)
        if current is None:
            return  # the runner recorded it meanwhile: never overwrite a real ending
        done = claims_mod.finish(doc, view.spec.name, run_id, None, outcome, now)
        bump(doc, "deadline_terminated")
    _write(ctx, [Event(AuditEvent.RECOVERY_DEADLINE_TERMINATED, {
        "job": view.spec.name, "run_id": run_id, "reason": "deadline_janitor", "deadline_s": round(limit, 3),
        "processes_killed": ended,
    }), *done.events])
    if done.record:
        history.append_record(ctx.paths, done.record)
    report.deadline_terminated.append((view.spec.name, run_id))


def _rearm(ctx: Context, job: str, now: datetime, report: HealReport) -> None:
    with ctx.store.transaction() as doc:
        entry = doc["jobs"].get(job)
        if entry is None:
            return
        view = JobView.from_entry(entry)
        if not persisted_error_wedge(view, now):
            return
        state = entry["state"]
        previous = state.get("next_run_at")
        target = _rearm_target(view, now)
        # Marked either way, so one failure is re-armed (or judged not wedged) exactly once.
        state["rearmed_for"] = state.get("last_run_at")
        old = from_iso(previous)
        if target is None or (old is not None and target >= old):
            return
        state["next_run_at"] = to_iso(target)
        bump(doc, "persisted_error_rearmed")
    _write(ctx, [Event(AuditEvent.RECOVERY_PERSISTED_ERROR_REARMED, {
        "job": job, "previous_next_run_at": previous, "next_run_at": to_iso(target),
        "last_status": state.get("last_status"), "reason": "persisted_error",
    })])
    report.rearmed.append(job)


def _rearm_target(view: JobView, now: datetime) -> datetime | None:
    """Now for an interval job; the next legal slot for a cron job."""
    if view.spec.every is not None:
        return now
    return first_slot(view.spec, now - timedelta(microseconds=1))


def _write(ctx: Context, events: list[Event]) -> None:
    for event in events:
        ctx.audit.append(event.name, **event.details)


def owner_unresponsive(claim: dict[str, Any], live: Liveness, loop_wedged_pid: int | None) -> bool:
    """Dead, lease run out, stopped by a signal, or the wedged loop itself: not worth waiting for."""
    owner = claim.get("owner") or {}
    if claim_problem(claim, live.owner_alive, live.lease_expired) is not None:
        return True
    if loop_wedged_pid is not None and owner.get("pid") == loop_wedged_pid:
        return True
    return _process_stopped(owner.get("pid"))


def _process_stopped(pid: Any) -> bool:
    import psutil

    try:
        return bool(pid) and psutil.Process(int(pid)).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def release_stuck_claims(ctx: Context, job: str, live: Liveness, kill: Killer,
                         loop_wedged_pid: int | None) -> list[str]:
    """`cronctl resume JOB`: kill the processes of runs held by a hung or dead owner, release the claims.

    A run whose owner is healthy is left alone: resume never interrupts real work.
    """
    entry = ctx.store.read()["jobs"].get(job)
    if entry is None:
        return []
    view = JobView.from_entry(entry)
    released = []
    for run_id, claim in view.claims.items():
        if owner_unresponsive(claim, live, loop_wedged_pid):
            if reclaim(ctx, job, run_id, claim, "operator", ctx.clock.now(), kill):
                released.append(run_id)
    return released
