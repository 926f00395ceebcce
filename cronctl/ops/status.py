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
from cronctl.jobs.health import JobHealth, alert_limit, failure_streak, job_health
from cronctl.jobs.state import JobView
from cronctl.loop.heartbeat import LoopStatus, loop_status
from cronctl.ops.liveness import judges


@dataclass(frozen=True)
class JobStatus:
    view: JobView
    health: JobHealth


@dataclass(frozen=True)
class StatusReport:
    loop: LoopStatus
    jobs: list[JobStatus]
    counters: dict[str, int]
    # On PostgreSQL: every loop the store remembers (`loop` sums them up); None on the JSON store.
    loops: list[dict[str, Any]] | None = None
    # `status --stale` on PostgreSQL judges only the jobs that may be stale (store/pg/stale.py):
    # whether the store holds any job is then said here. None: `jobs` is every job.
    any_jobs: bool | None = None

    @property
    def has_jobs(self) -> bool:
        return bool(self.jobs) if self.any_jobs is None else self.any_jobs

    @property
    def stale_jobs(self) -> list[JobStatus]:
        return [j for j in self.jobs if j.health.stale]

    @property
    def loop_stale(self) -> bool:
        """The loop side is stale: on PostgreSQL also when no loop is live or one stopped answering."""
        return self.loop.stale or (self.loops is not None and self.loop.state != "ok")

    @property
    def stale(self) -> bool:
        return bool(self.stale_jobs) or (self.loop_stale and self.has_jobs)


def status(ctx: Context, only_stale: bool = False) -> StatusReport:
    """Every job with its health; `only_stale` may leave out jobs that cannot be stale."""
    now = ctx.clock.now()
    # On the JSON store one document read, not ctx.leases.jobs(): the fast path of `status --json`
    # must not import the lease machinery (about 20 ms), and this one read gives jobs and counters.
    # On PostgreSQL `status --stale` reads only the jobs that may be stale.
    views, counters, chains, any_jobs = ctx.backend.overview(now if only_stale else None)
    alive, expired = judges(ctx)
    specs = {view.spec.name: view.spec for view in views} if chains else {}
    jobs = []
    for view in views:
        health = chain_health(chains, view, specs, now) if chains else None
        jobs.append(JobStatus(view, health or job_health(view, now, alive, expired)))
    if ctx.cluster is not None:  # many loops, on any host: the store lists them
        from cronctl.ops.cluster import cluster_loops, cluster_summary

        rows = cluster_loops(ctx)
        return StatusReport(cluster_summary(rows), jobs, counters, [row.to_dict() for row in rows], any_jobs)
    return StatusReport(loop_status(ctx.paths, now), jobs, counters, any_jobs=any_jobs)


def status_json(report: StatusReport, only_stale: bool) -> dict[str, Any]:
    """The document of `cronctl status --json` (keys documented in docs/json.md)."""
    jobs = report.stale_jobs if only_stale else report.jobs
    return {
        "loop": report.loop.to_dict(),
        **({"loops": report.loops} if report.loops is not None else {}),
        "loop_stale": report.loop_stale and report.has_jobs,
        "stale": report.stale,
        "counters": report.counters,
        "jobs": [
            {
                "name": j.view.spec.name, "state": j.health.state, "reason": j.health.reason,
                "fault": j.health.fault, "schedule": j.view.spec.schedule_text,
                "next_run_at": j.view.state.get("next_run_at"), "last_run_at": j.view.state.get("last_run_at"),
                "last_status": j.view.state.get("last_status"), "running": sorted(j.view.claims),
                **alert_fields(j.view),
            }
            for j in jobs
        ],
    }


def alert_fields(view: JobView) -> dict[str, Any]:
    """What `status --json` says of a job's alerting (SPEC §12): its streak, its alert_after and
    the notifications given up after 24 h of tries."""
    abandoned = view.state.get("notify_abandoned")
    return {"consecutive_failures": failure_streak(view.state), "alert_after": alert_limit(view),
            "notify_abandoned": int(abandoned.get("count") or 0) if isinstance(abandoned, dict) else 0}
