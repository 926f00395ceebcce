"""`cronctl status`: the loop and every job with its health, and the stable JSON of it.

Kept apart from the other run use cases (runops) so that `status --json` imports only
what it reads: it is what monitoring polls, and its fast path (fastpath.py) must not
pay for the claim, control and process machinery of force-run and kill.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cronctl.context import Context
from cronctl.jobs.chain_health import chain_health
from cronctl.jobs.health import JobHealth, job_health
from cronctl.jobs.state import JobView
from cronctl.loop.heartbeat import LoopStatus, loop_status
from cronctl.proc.liveness import lease_checker, owner_alive


@dataclass(frozen=True)
class JobStatus:
    view: JobView
    health: JobHealth


@dataclass(frozen=True)
class StatusReport:
    loop: LoopStatus
    jobs: list[JobStatus]
    counters: dict[str, int]

    @property
    def stale_jobs(self) -> list[JobStatus]:
        return [j for j in self.jobs if j.health.stale]

    @property
    def stale(self) -> bool:
        return bool(self.stale_jobs) or (self.loop.stale and bool(self.jobs))


def status(ctx: Context) -> StatusReport:
    now = ctx.clock.now()
    # The document itself, not ctx.leases.jobs(): the fast path of `status --json` must not
    # import the lease machinery (about 20 ms), and this one read gives jobs and counters.
    doc = ctx.store.read()
    expired = lease_checker()
    views = {name: JobView.from_entry(doc["jobs"][name]) for name in sorted(doc["jobs"])}
    chains = doc.get("chains") or {}
    specs = {name: view.spec for name, view in views.items()} if chains else {}
    jobs = []
    for view in views.values():
        health = chain_health(chains, view, specs, now) if chains else None
        jobs.append(JobStatus(view, health or job_health(view, now, owner_alive, expired)))
    return StatusReport(loop_status(ctx.paths, now), jobs, dict(doc.get("counters") or {}))


def status_json(report: StatusReport, only_stale: bool) -> dict[str, Any]:
    """The document of `cronctl status --json` (keys documented in docs/json.md)."""
    jobs = report.stale_jobs if only_stale else report.jobs
    return {
        "loop": report.loop.to_dict(),
        "loop_stale": report.loop.stale and bool(report.jobs),
        "stale": report.stale,
        "counters": report.counters,
        "jobs": [
            {
                "name": j.view.spec.name, "state": j.health.state, "reason": j.health.reason,
                "fault": j.health.fault, "schedule": j.view.spec.schedule_text,
                "next_run_at": j.view.state.get("next_run_at"), "last_run_at": j.view.state.get("last_run_at"),
                "last_status": j.view.state.get("last_status"), "running": sorted(j.view.claims),
            }
            for j in jobs
        ],
    }
