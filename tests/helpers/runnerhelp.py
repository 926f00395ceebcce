"""Shared pieces of the runner tests: a result collector, a started supervisor, a request builder,
the live members of a process group."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil

from cronctl.proc.run import RunResult
from cronctl.proc.spawn import RunRequest


class Results:
    """The on_result callback: collects results and lets a test wait for one."""

    def __init__(self) -> None:
        self.by_id: dict[str, RunResult] = {}
        self.arrived: dict[str, float] = {}
        self._cond = threading.Condition()

    def __call__(self, result: RunResult) -> None:
        with self._cond:
            self.by_id[result.run_id] = result
            self.arrived[result.run_id] = time.monotonic()
            self._cond.notify_all()

    def wait(self, run_id: str, timeout: float = 20.0) -> RunResult:
        with self._cond:
            assert self._cond.wait_for(lambda: run_id in self.by_id, timeout), f"no result for {run_id}"
            return self.by_id[run_id]


def request(tmp_path: Path, command: str | tuple[str, ...], **overrides: Any) -> RunRequest:
    run_id = overrides.pop("run_id", None) or uuid.uuid4().hex
    env = {"CRONCTL_JOB": "job", "CRONCTL_RUN_ID": run_id, "CRONCTL_SLOT": "2026-01-01T00:00:00+00:00",
           "CRONCTL_ATTEMPT": "1"}
    env.update(overrides.pop("env", {}))
    fields: dict[str, Any] = {
        "run_id": run_id,
        "job": "job",
        "command": command,
        "cwd": None,
        "env": env,
        "timeout": 30.0,
        "kill_grace": 2.0,
        "log_path": tmp_path / "runs" / "job" / f"{run_id}.log",
    }
    fields.update(overrides)
    return RunRequest(**fields)


def live_group_members(pgid: int) -> list[int]:
    # Orphans killed here are reaped by init, which may take its time; a
    # zombie left in the group has finished running all the same.
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return members
