"""A job's own notifier (`on_failure`), started when a run failed for good.

Its failure must never wedge or crash the loop: it is spawned like a run but holds no
claim, is bounded by ON_FAILURE_TIMEOUT, and the engine drops its result.
"""

from __future__ import annotations

import sys
from typing import Any

from cronctl.jobs.state import JobView
from cronctl.loop.held import ActiveRun
from cronctl.paths import Paths
from cronctl.proc.childsetup import child_setup_of
from cronctl.proc.spawn import BlockedConfig, RunRequest, SpawnError
from cronctl.proc.supervisor import Supervisor
from cronctl.store.outbox import OwedHook

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


class FailureHooks:
    """The on_failure hooks an engine started, whose results are no run's (the engine drops them)."""

    def __init__(self, paths: Paths, supervisor: Supervisor, log_cap: int, drain_timeout: float) -> None:
        self.paths = paths
        self.supervisor = supervisor
        self.log_cap = log_cap
        self.drain_timeout = drain_timeout
        self.running: set[str] = set()

    def start(self, run: ActiveRun, record: dict[str, Any]) -> None:
        """The job's own notifier: its failure must never wedge or crash the loop."""
        request = on_failure_request(self.paths, run, record, self.log_cap, self.drain_timeout)
        try:
            self.supervisor.spawn_gated(request)
        except (BlockedConfig, SpawnError) as exc:
            print(f"cronctl: on_failure of {run.job} could not start: {exc}", file=sys.stderr)
            return
        self.running.add(request.run_id)
        self.supervisor.open_gates([request.run_id])

    def start_owed(self, hook: OwedHook, entry: dict[str, Any] | None) -> None:
        """A hook a writer that died owed (store/outbox.py); `entry`: its job as stored now."""
        if entry is None:
            return  # the job was removed since: nobody to notify with
        spec = JobView.from_entry(entry).spec
        if spec.on_failure is None:
            return
        record = hook.record
        log = record.get("log") or str(self.paths.run_log(hook.job, hook.run_id))
        run = ActiveRun(hook.job, hook.run_id, spec, str(record.get("slot") or ""), int(record.get("attempt") or 1),
                        str(log))
        self.start(run, record)

    def ended(self, run_id: str) -> bool:
        """Whether a result is a hook's (told once)."""
        if run_id in self.running:
            self.running.discard(run_id)
            return True
        return False
