"""Ending a run's processes: the one call the loop, the use cases and doctor share."""

from __future__ import annotations

from typing import Any

from cronctl.proc.identity import ProcIdentity, terminate_run

# A kill asked for by the loop or an operator never waits longer than this per step,
# whatever kill_grace a job declares: the caller is holding up other work.
MAX_KILL_GRACE = 10.0


def kill_run_processes(run_id: str, child: dict[str, Any] | None, grace: float) -> int:
    """SIGTERM, then SIGKILL after `grace`, every process of run `run_id`; how many were ended.

    `child` is the claim's child record (pid + start time) when known; the run's other
    processes are found by the run id in their environment (see proc.identity).
    """
    root = ProcIdentity(int(child["pid"]), float(child["start_time"])) if child and child.get("pid") else None
    report = terminate_run(run_id, root, grace=min(grace, MAX_KILL_GRACE))
    return report.terminated + report.killed
