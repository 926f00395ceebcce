"""Shared pieces of the store tests: the worker subprocess and a few small checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]

from cronctl.paths import Paths  # noqa: E402
from cronctl.store.jsonstore import Store  # noqa: E402

from .worker import STORE_ERROR_EXIT  # noqa: E402

__all__ = [
    "REPO_ROOT",
    "STORE_ERROR_EXIT",
    "WORKER",
    "run_worker",
    "seed",
    "temp_files",
    "worker_command",
    "worker_env",
]

WORKER = Path(__file__).with_name("worker.py")


def worker_env(**extra: str) -> dict[str, str]:
    """The environment for a worker: cronctl importable from this checkout, no stray fault seam."""
    env = {key: value for key, value in os.environ.items() if key != "CRONCTL_FAULT_STORE_CRASH"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def worker_command(*args: str | os.PathLike[str]) -> list[str]:
    return [sys.executable, str(WORKER), *map(str, args)]


def run_worker(
    *args: str | os.PathLike[str], prefix: list[str] | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the worker to completion, optionally under a wrapper command such as strace."""
    return subprocess.run(
        [*(prefix or []), *worker_command(*args)],
        env=worker_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=30,
    )


def temp_files(paths: Paths) -> list[str]:
    """Leftovers of a write: the store's and the backup's temp files."""
    prefixes = (f"{paths.store.name}.tmp.", f"{paths.store_backup.name}.tmp.")
    return sorted(name for name in os.listdir(paths.home) if name.startswith(prefixes))


def seed(paths: Paths, jobs: dict[str, Any]) -> bytes:
    """Write a first document through the store and return its bytes on disk."""
    with Store(paths).transaction() as doc:
        doc["jobs"].update(jobs)
    return paths.store.read_bytes()
