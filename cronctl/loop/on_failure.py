"""A job's own notifier (`on_failure`), started when a run failed for good.

Its failure must never wedge or crash the loop: it is spawned like a run but holds no
claim, is bounded by ON_FAILURE_TIMEOUT, and the engine drops its result.
"""

from __future__ import annotations

from typing import Any

from cronctl.loop.held import ActiveRun
from cronctl.paths import Paths
from cronctl.proc.childsetup import child_setup_of
from cronctl.proc.spawn import RunRequest

ON_FAILURE_TIMEOUT = 300.0


def hook_id_of(run_id: str) -> str:
    return f"{run_id}.on_failure"


def on_failure_request(paths: Paths, run: ActiveRun, record: dict[str, Any], log_cap: int,
                       drain_timeout: float) -> RunRequest:
    """The hook of `run`, told what ended it through its environment."""
    assert run.spec.on_failure is not None
    hook_id = hook_id_of(run.run_id)
    env = {**run.spec.env, "CRONCTL_JOB": run.job, "CRONCTL_RUN_ID": run.run_id,
           "CRONCTL_STATUS": record["status"], "CRONCTL_EXIT_CODE": str(record.get("exit_code") or ""),
           "CRONCTL_LOG": run.log_path, "CRONCTL_SLOT": run.slot}
    return RunRequest(run_id=hook_id, job=run.job, command=run.spec.on_failure, cwd=run.spec.cwd,
                      env=env, timeout=min(run.spec.timeout or ON_FAILURE_TIMEOUT, ON_FAILURE_TIMEOUT),
                      kill_grace=run.spec.kill_grace, log_path=paths.job_runs_dir(run.job) / f"{hook_id}.log",
                      log_cap=log_cap, drain_timeout=drain_timeout,
                      setup=child_setup_of(run.spec))  # as the job's user, with its env_file and limits
