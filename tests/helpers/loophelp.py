"""Driving a real `cronctl run` from tests: start, wait for it, read what it wrote."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import psutil

from tests.conftest import cronctl_bin, subprocess_env


def start_loop(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    full_env = {**subprocess_env(home), **(env or {})}
    proc = subprocess.Popen([*cronctl_bin(), "run", *args], env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    return proc


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def wait_ticking(home: Path, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> dict[str, Any]:
    def ticking() -> dict[str, Any] | None:
        hb = heartbeat(home)
        return hb if hb and hb.get("pid") == proc.pid and hb.get("ticks", 0) >= 1 else None

    return wait_until(ticking, timeout)


def heartbeat(home: Path) -> dict[str, Any] | None:
    try:
        return json.loads((home / "scheduler.json").read_text())
    except (OSError, ValueError):
        return None


def audit_rows(home: Path, event: str | None = None, job: str | None = None) -> list[dict[str, Any]]:
    try:
        lines = (home / "audit.jsonl").read_bytes().splitlines()
    except FileNotFoundError:
        return []
    rows = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if (event is None or row.get("event") == event) and (job is None or row.get("job") == job):
            rows.append(row)
    return rows


def store(home: Path) -> dict[str, Any]:
    return json.loads((home / "jobs.json").read_text())


def cli(home: Path, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cronctl_bin(), *args], env=subprocess_env(home), capture_output=True, text=True,
                          timeout=timeout)


def processes_with_run_id(run_id: str) -> list[int]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("CRONCTL_RUN_ID") == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def kill_hard(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def is_guard(proc: psutil.Process) -> bool:
    """A run's guard (proc/guard.py): a child of the loop beside each run, not part of it."""
    from cronctl.proc.guard import GUARD_NAME

    try:
        return GUARD_NAME in proc.cmdline()
    except psutil.Error:
        return False


def kill_hard_with_guards(proc: subprocess.Popen[bytes]) -> None:
    """kill -9 of the loop AND of its runs' guards (proc/guard.py), as `pkill -9 -f cronctl` would:
    the one way its runs outlive it, left for a restarted loop to heal."""
    for child in psutil.Process(proc.pid).children():
        if is_guard(child):
            with contextlib.suppress(psutil.Error):
                child.kill()
    kill_hard(proc)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)
