"""A job's own notifier (`on_failure`), started when a run failed for good.

Its failure must never wedge or crash the loop: it is spawned like a run but holds no
claim, is bounded by ON_FAILURE_TIMEOUT, and its result is dropped by the engine.
"""

from __future__ import annotations

import sys
from typing import Any

from cronctl.loop.held import ActiveRun
from cronctl.paths import Paths
from cronctl.proc.supervisor import BlockedConfig, RunRequest, SpawnError, Supervisor

ON_FAILURE_TIMEOUT = 300.0


def start_on_failure(paths: Paths, supervisor: Supervisor, run: ActiveRun, record: dict[str, Any],
                     log_cap: int, drain_timeout: float) -> str | None:
    """Spawn and start the hook of `run`; its run id, or None if it could not start."""
    assert run.spec.on_failure is not None
    hook_id = f"{run.run_id}.on_failure"
    env = {**run.spec.env, "CRONCTL_JOB": run.job, "CRONCTL_RUN_ID": run.run_id,
           "CRONCTL_STATUS": record["status"], "CRONCTL_EXIT_CODE": str(record.get("exit_code") or ""),
           "CRONCTL_LOG": run.log_path, "CRONCTL_SLOT": run.slot}
    request = RunRequest(run_id=hook_id, job=run.job, command=run.spec.on_failure, cwd=run.spec.cwd,
                         env=env, timeout=min(run.spec.timeout or ON_FAILURE_TIMEOUT, ON_FAILURE_TIMEOUT),
                         kill_grace=run.spec.kill_grace,
                         log_path=paths.job_runs_dir(run.job) / f"{hook_id}.log",
                         log_cap=log_cap, drain_timeout=drain_timeout)
    try:
        supervisor.spawn_gated(request)
    except (BlockedConfig, SpawnError) as exc:
        print(f"cronctl: on_failure of {run.job} could not start: {exc}", file=sys.stderr)
        return None
    supervisor.open_gates([hook_id])
    return hook_id
