"""Who is the loop: the scheduler.lock flock and the scheduler.json heartbeat.

The flock is held for the loop's whole life and released by the kernel the
instant the process dies, which is what lets a standby take over within a
fraction of a second. Its descriptor is close-on-exec, so no job child can
inherit it and keep the lock alive after the loop is gone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cronctl.paths import Paths


@dataclass
class SchedulerLock:
    path: Path
    fd: int | None = None

    def try_acquire(self) -> bool:
        if self.fd is None:
            # Never O_TRUNC or unlink: the file is the lock's identity for every process.
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        return True

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def lock_holder(paths: Paths) -> int | None:
    """The pid holding scheduler.lock, from /proc/locks (None if nobody does)."""
    from cronctl.store import find_lock_holder

    return find_lock_holder(paths.scheduler_lock)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Small state files (heartbeat, control replies): temp + rename, readers never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, (json.dumps(data, sort_keys=True) + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
