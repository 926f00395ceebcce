"""Every known wedge, found and healed by one idempotent pass (SPEC §6).

`heal_pass` takes `now`, liveness checks and a process killer, so it is
unit-testable without a clock or a fork. Processes are killed BEFORE the
claim is released, and each release goes through the lease store, which
re-checks the claim in its transaction, so a run that just ended for real is
never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Container

from cronctl.context import Context
from cronctl.jobs.health import claim_problem, persisted_error_wedge
from cronctl.jobs.state import JobView
from cronctl.proc.identity import boot_id
from cronctl.store.claims import Owner
from cronctl.store.lease_types import RunClaim
from cronctl.store.suspects import Suspect, is_suspect

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


def run_deadline(timeout: float | None, kill_grace: float | None, spec_retries: int,
                 retry_delay: float) -> float | None:
    """Seconds after the start by which any run must have ended (None: no timeout, no deadline)."""
    if float(timeout or 0.0) <= 0:
        return None
    return float(timeout or 0.0) + float(kill_grace or 0.0) + spec_retries * retry_delay + DEADLINE_SLACK


def heal_pass(ctx: Context, now: datetime, live: Liveness, kill: Killer,
              supervised: Container[str] = frozenset(), found: list[Suspect] | None = None) -> HealReport:
    """One sweep.

    `supervised` are the run ids this process really watches: only their deadline is
    checked. Every other claim, even one held in this process's name (leaked), is judged
    by its owner's life and its lease. `found`: the lease store's `suspects()` as the
    caller just asked them (the loop, from its cached read: an idle tick re-parses
    nothing); every change re-reads the claim under the lock anyway.
    """
    report = HealReport()
    broken: list[tuple[RunClaim, str]] = []
    for suspect in found if found is not None else ctx.leases.suspects():
        for claim in suspect.claims:
            problem = None if claim.run_id in supervised else problem_of(claim, live)
            if problem is not None:
                broken.append((claim, problem))
            else:
                _check_deadline(ctx, suspect.view, claim, now, live, kill, report)
        if persisted_error_wedge(suspect.view, now):
            _rearm(ctx, suspect.job, now, report)
    ended = _kill_all([claim for claim, _ in broken], kill)
    for claim, problem in broken:
        _reclaim_typed(ctx, claim, problem, now, ended[claim.run_id], report)
    return report


def problem_of(claim: RunClaim, live: Liveness) -> str | None:
    """'owner_dead', 'lease_expired' or None for a healthy claim (jobs/health.py's claim_problem)."""
    return claim_problem({"owner": claim.owner_dict, **claim.lease_fields}, live.owner_alive, live.lease_expired)


def _kill_all(broken: list[RunClaim], kill: Killer) -> dict[str, int]:
    """Kill the processes of every broken run at once: each may wait out its kill_grace,
    and a new leader healing many orphans must not look hung meanwhile."""
    if len(broken) <= 1:
        return {claim.run_id: kill(claim.run_id, claim.child, _grace_of(claim)) for claim in broken}
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, len(broken)), thread_name_prefix="cronctl-heal") as pool:
        futures = {claim.run_id: pool.submit(kill, claim.run_id, claim.child, _grace_of(claim)) for claim in broken}
        return {run_id: future.result() for run_id, future in futures.items()}


def _grace(claim: dict[str, Any]) -> float:
    return float(claim.get("kill_grace") or 0.0)


def _grace_of(claim: RunClaim) -> float:
    return float(claim.kill_grace or 0.0)


def suspect_entries(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The stored entries of the jobs that may need healing (store/suspects.py), untyped: `doctor`
    reports on a store whatever its entries hold."""
    return [(name, entry) for name, entry in doc["jobs"].items() if is_suspect(entry)]


def _reclaim_typed(ctx: Context, claim: RunClaim, reason: str, now: datetime, ended: int,
                   report: HealReport) -> None:
    """Release a broken claim whose processes were ended (fenced on the owner seen)."""
    if ctx.leases.reclaim(claim.job, claim.run_id, claim.owner, reason, now, ended):
        report.reclaimed.append((claim.job, claim.run_id, reason))


def reclaim(ctx: Context, job: str, run_id: str, claim: dict[str, Any], reason: str, now: datetime,
            kill: Killer, report: HealReport | None = None) -> bool:
    """Kill what is left of a run, then release its claim as lost / not_started (fenced on its owner)."""
    ended = kill(run_id, claim.get("child"), _grace(claim))
    owner = claim.get("owner")
    seen = Owner.from_dict(owner) if owner else None
    if not ctx.leases.reclaim(job, run_id, seen, reason, now, ended):
        return False  # it ended for real, or was reclaimed by someone else meanwhile
    if report is not None:
        report.reclaimed.append((job, run_id, reason))
    return True


def _check_deadline(ctx: Context, view: JobView, claim: RunClaim, now: datetime, live: Liveness, kill: Killer,
                    report: HealReport) -> None:
    limit = run_deadline(claim.timeout, claim.kill_grace, view.spec.retries, view.spec.retry_delay)
    if claim.started_mono is None or limit is None or claim.boot_id is None:
        return
    if live.monotonic() - float(claim.started_mono) <= limit:
        return
    ended = kill(claim.run_id, claim.child, _grace_of(claim))
    if ctx.leases.end_past_deadline(view.spec.name, claim.run_id, limit, now, ended):
        report.deadline_terminated.append((view.spec.name, claim.run_id))


def _rearm(ctx: Context, job: str, now: datetime, report: HealReport) -> None:
    if ctx.leases.rearm(job, now):
        report.rearmed.append(job)


def owner_unresponsive(claim: dict[str, Any], live: Liveness, loop_wedged_pid: int | None) -> bool:
    """Dead, lease run out, stopped by a signal, or the wedged loop itself: not worth waiting for."""
    owner = claim.get("owner") or {}
    if claim_problem(claim, live.owner_alive, live.lease_expired) is not None:
        return True
    if loop_wedged_pid is not None and owner.get("pid") == loop_wedged_pid:
        return True
    # A pid says something only in the boot (and on the host) it was recorded in.
    return owner.get("boot_id") == boot_id() and _process_stopped(owner.get("pid"))


def _process_stopped(pid: Any) -> bool:
    import psutil

    try:
        return bool(pid) and psutil.Process(int(pid)).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def dead_claims(doc: dict[str, Any], live: Liveness) -> list[tuple[str, str, str]]:
    """(job, run_id, problem) of every claim whose owner died or whose lease ran out: what
    `doctor` reports (nothing heals them while no loop runs, and force-run of the job
    reclaims them first)."""
    found = []
    for name, entry in suspect_entries(doc):
        for run_id, claim in (entry["state"].get("claims") or {}).items():
            problem = claim_problem(claim, live.owner_alive, live.lease_expired)
            if problem is not None:
                found.append((name, run_id, problem))
    return found


def release_dead_claims(ctx: Context, job: str, live: Liveness, kill: Killer,
                        doc: dict[str, Any] | None = None) -> list[str]:
    """The claims of `job` whose owner died or whose lease ran out, reclaimed as the loop's
    heal pass would: for `force-run` without a loop, before it refuses "is running". A
    force-run that died (kill -9, a failed store write) held its claim like any owner.
    `doc`: the caller's fresh read of the store, if it made one (each reclaim re-checks
    under the lock)."""
    entry = (doc if doc is not None else ctx.store.read())["jobs"].get(job)
    if entry is None:
        return []
    released = []
    for run_id, claim in JobView.from_entry(entry).claims.items():
        problem = claim_problem(claim, live.owner_alive, live.lease_expired)
        if problem is not None and reclaim(ctx, job, run_id, claim, problem, ctx.clock.now(), kill):
            released.append(run_id)
    return released


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
