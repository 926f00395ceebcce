"""`cronctl resume`: release the runs a dead or hung owner holds, then re-arm the jobs from now."""

from __future__ import annotations

from dataclasses import dataclass

from cronctl.context import Context
from cronctl.ops.definitions import ResumeResult, require_jobs, resume_jobs
from cronctl.ops.runs import release_stuck_runs


@dataclass(frozen=True)
class Resumed:
    released: list[str]  # run ids whose stuck claims were released (their processes killed)
    jobs: list[ResumeResult]


def resume(ctx: Context, names: list[str] | None) -> Resumed:
    """Resume the named jobs (None: every job); an unknown name fails before anything changes."""
    require_jobs(ctx, names)
    released = release_stuck_runs(ctx, names)
    return Resumed(released, resume_jobs(ctx, names))
