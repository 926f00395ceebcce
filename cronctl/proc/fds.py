"""File descriptors for gated children: pipes kept clear of the child's fds, run logs, the fd limit."""

from __future__ import annotations

import fcntl
import os
import resource
from collections.abc import Iterable
from pathlib import Path

# The child's fds: stdin, stdout and stderr, then its gate (see proc.gate).
GATE_FD = 3
# Runs open four fds each (pidfd, pipe, log, gate); 500 of them need room.
_WANTED_NOFILE = 65536


def pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose ends are above the fds the child gets.

    posix_spawn's dup2(fd, fd) would keep close-on-exec set, and a source fd
    among 0-3 could be overwritten by an earlier dup2 of the file actions.
    """
    r, w = os.pipe()
    try:
        r = lift(r)
    except OSError:
        os.close(w)
        raise
    try:
        return r, lift(w)
    except OSError:
        os.close(r)
        raise


def lift(fd: int) -> int:
    """`fd` itself if it is above the child's fds, else a close-on-exec copy that is (the original closed)."""
    if fd > GATE_FD:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, GATE_FD + 1)
    finally:
        os.close(fd)  # also when there is no fd left to lift it to (EMFILE)


def close_all(fds: Iterable[int | None]) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def open_log(path: Path) -> int:
    """A run's log, truncated, private to the user, and lifted above the child's fds."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
    # An existing file keeps its old mode through O_CREAT; logs may hold secrets.
    os.fchmod(fd, 0o600)
    return lift(fd)


def raise_fd_limit() -> None:
    """Raise the soft limit on open files towards what 500 runs need; silently keep it if we may not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _WANTED_NOFILE if hard == resource.RLIM_INFINITY else min(hard, _WANTED_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            pass
