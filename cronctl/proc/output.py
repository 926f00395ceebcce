"""A run's output: drained from its pipe into its log (capped) and a tail for the result."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TAIL_BYTES = 4096
_READ_CHUNK = 65536
# At the drain bound, what is already in the pipe is still worth keeping, but
# a writer that never stops must not keep us reading.
_FINAL_READS = 16


@dataclass(eq=False)
class OutputCapture:
    """The read end of a run's stdout/stderr pipe and where its bytes go.

    Only the supervisor thread touches it. The pipe stays open until end of
    file, or until the drain bound after the run's end: a grandchild holding
    the pipe must not keep the run from finishing.
    """

    pipe_fd: int | None
    log_fd: int | None
    log_path: Path
    log_cap: int
    drain_deadline: float | None = None  # set when the run's root process has ended
    log_written: int = 0
    log_truncated: bool = False
    tail: bytearray = field(default_factory=bytearray)
    echo: Callable[[bytes], None] | None = None  # `run --echo-output` (proc/echo.py): every byte read


    def read(self) -> bool:
        """Read what the pipe holds now; False once it is at end of file (or broken)."""
        assert self.pipe_fd is not None
        try:
            data = os.read(self.pipe_fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if data:
            self._record(data)
        return bool(data)

    def read_remaining(self) -> None:
        """At the drain bound: keep what is already in the pipe, a bounded amount of it."""
        assert self.pipe_fd is not None
        for _ in range(_FINAL_READS):
            try:
                data = os.read(self.pipe_fd, _READ_CHUNK)
            except OSError:
                break
            if not data:
                break
            self._record(data)

    def take_pipe(self) -> int | None:
        """Hand the pipe's fd over for closing (it may be registered in a selector)."""
        fd, self.pipe_fd = self.pipe_fd, None
        return fd

    def close_log(self) -> None:
        if self.log_fd is not None:
            os.close(self.log_fd)
            self.log_fd = None

    def tail_text(self) -> str:
        return bytes(self.tail).decode(errors="replace")

    def _record(self, data: bytes) -> None:
        if self.echo is not None:
            self.echo(data)
        self.tail += data
        del self.tail[:-TAIL_BYTES]
        if self.log_fd is None or self.log_truncated:
            return
        room = self.log_cap - self.log_written
        try:
            if room > 0:
                os.write(self.log_fd, data[:room])
                self.log_written += min(room, len(data))
            if len(data) > room:
                self.log_truncated = True
                note = f"\n[cronctl] output truncated: the log is capped at {self.log_cap} bytes\n"
                os.write(self.log_fd, note.encode())
        except OSError as exc:
            # A full disk must not stop the run nor the supervisor; the tail
            # still reaches the result.
            print(f"cronctl: cannot write log {self.log_path}: {exc}", file=sys.stderr)
            self.close_log()
