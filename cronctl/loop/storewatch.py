"""Wake the loop when the store file changes (inotify), so that an idle loop can beat less often.

An idle loop (nothing running, nothing claimed, nothing due for a while) ticked every
second to notice what other processes write to the store: a job added, edited or resumed
by a command (requests to the loop itself, force-run and kill, come with SIGUSR1). Those
wake-ups were most of its CPU. With this thread blocked on an inotify descriptor of the
home directory, a store replaced by any writer (every write is a rename; an editor's
in-place write closes the file) wakes the tick thread at once, and between writes the
loop only beats (loop/scheduler.py IDLE_BEAT).

When inotify is not there (no such call, no watch left: fs.inotify.max_user_watches) or
the thread fails, `alive` is False and the loop keeps its one-second tick.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import struct
import threading
from collections.abc import Callable
from pathlib import Path

_IN_CLOSE_WRITE = 0x008
_IN_MOVED_TO = 0x080
_IN_DELETE = 0x200
_IN_Q_OVERFLOW = 0x4000
_IN_CLOEXEC = 0o2000000
_IN_NONBLOCK = 0o4000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows


class StoreWatch:
    """A daemon thread that calls `wake` whenever a file named in `names` in `directory` changes."""

    def __init__(self, directory: Path, names: frozenset[str], wake: Callable[[], None]) -> None:
        self.directory, self.names, self.wake = directory, frozenset(os.fsencode(name) for name in names), wake
        self.alive = False
        self._fd: int | None = None
        self._stop_r, self._stop_w = -1, -1
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> bool:
        """Watch from now on; False (and nothing started) when inotify cannot be used here."""
        fd = _inotify_watch(self.directory)
        if fd is None:
            return False
        self._fd = fd
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC)
        self.alive = True
        threading.Thread(target=self._run, name="cronctl-store-watch", daemon=True).start()
        return True

    def stop(self) -> None:
        with self._lock:  # never a write into a descriptor the thread closed (its number reused)
            if self._fd is not None and not self._closed:
                self.alive = False
                with contextlib.suppress(OSError):
                    os.write(self._stop_w, b"x")

    def _run(self) -> None:
        assert self._fd is not None
        try:
            while self.alive:
                ready, _, _ = select.select([self._fd, self._stop_r], [], [])
                if self._stop_r in ready:
                    break
                if self._changed(os.read(self._fd, 65536)):
                    self.wake()
        except OSError:
            pass  # the loop goes back to its one-second tick
        finally:
            self.alive = False
            self.wake()  # whoever sleeps on this watch looks again now
            with self._lock:
                self._closed = True
                for fd in (self._fd, self._stop_r, self._stop_w):
                    os.close(fd)

    def _changed(self, data: bytes) -> bool:
        at, changed = 0, False
        while at + _EVENT.size <= len(data):
            _wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size:at + _EVENT.size + length].rstrip(b"\0")
            at += _EVENT.size + length
            changed = changed or bool(mask & _IN_Q_OVERFLOW) or name in self.names
        return changed


def _inotify_watch(directory: Path) -> int | None:
    """An inotify descriptor watching `directory`'s entries being written, replaced or removed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = int(libc.inotify_init1(_IN_CLOEXEC | _IN_NONBLOCK))
    except (OSError, AttributeError):
        return None
    if fd < 0:
        return None
    # Not IN_MODIFY: the loop's own beat (a pwrite into heartbeat.tick) would wake this thread.
    mask = _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_DELETE
    if int(libc.inotify_add_watch(fd, os.fsencode(directory), mask)) < 0:
        os.close(fd)
        return None
    return fd
