"""The flocks of a home: the scheduler.lock held by the loop, and who holds any flock.

The flock is held for the loop's whole life and released by the kernel the
instant the process dies, which is what lets a standby take over within a
fraction of a second. Its descriptor is close-on-exec, so no job child can
inherit it and keep the lock alive after the loop is gone.
"""

from __future__ import annotations

import errno
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

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
    return find_lock_holder(paths.scheduler_lock)


def find_lock_holder(lock_path: str | os.PathLike[str]) -> int | None:
    """The pid holding a flock on lock_path, from /proc/locks, or None if it cannot be found."""
    try:
        info = os.stat(lock_path)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            table = handle.read()
    except OSError:
        return None
    device = (os.major(info.st_dev), os.minor(info.st_dev))
    same_inode: list[int] = []
    for line in table.splitlines():
        # "3: FLOCK  ADVISORY  WRITE 4321 fd:01:1234 0 EOF"; a waiter's line has "->"
        # in the second field and is skipped.
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        pid, where = fields[4], fields[5].split(":")
        if len(where) != 3 or not pid.isdigit() or int(pid) <= 0:
            continue
        try:
            major, minor, inode = int(where[0], 16), int(where[1], 16), int(where[2])
        except ValueError:
            continue
        if inode != info.st_ino:
            continue
        if (major, minor) == device:
            return int(pid)
        # Some filesystems (btrfs subvolumes) report another device in stat than in
        # /proc/locks; a lone inode match is still the best guess.
        same_inode.append(int(pid))
    return same_inode[0] if len(same_inode) == 1 else None


def describe_lock_holder(lock_path: str | os.PathLike[str]) -> str:
    pid = find_lock_holder(lock_path)
    if pid is None:
        return "a process that could not be identified (no entry for it in /proc/locks)"
    who = f"pid {pid}"
    if pid == os.getpid():
        who += " (another thread of this process)"
    command = _command_line(pid)
    return f"{who}: {command}" if command else who


def _command_line(pid: int) -> str:
    # psutil is imported only here: this runs once per timeout, not per command.
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline())
    except (psutil.Error, OSError):
        return ""
