"""`cronctl run --echo-output`: every line a job prints, copied to the loop's stdout as
`JOB RUN | line` (for containers and `journalctl -u`, as supercronic does).

Bounded, so that a job printing without end can slow neither the loop nor the other
jobs' lines:
- the supervisor thread only hands bytes over (`feed`): it never waits for stdout;
- each run has its own queue of at most RUN_BUDGET bytes; what does not fit is dropped
  and counted (the whole output is still in the run's log);
- one writer thread takes from the runs in turn, at most TURN_BYTES from each, so a
  quiet job's line waits behind at most one turn of each busy one.
Dropped lines are reported on the same stdout, prefixed like the job's own: when the
run ends, and every REPORT_EVERY seconds while it drops.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import BinaryIO

RUN_BUDGET = 256 * 1024
TURN_BYTES = 16 * 1024
MAX_LINE = 16 * 1024  # a longer line is echoed in pieces of this size
REPORT_EVERY = 10.0


@dataclass(eq=False)
class _RunEcho:
    prefix: bytes
    lines: deque[bytes] = field(default_factory=deque)
    queued: int = 0  # bytes in `lines`
    partial: bytes = b""
    dropped_lines: int = 0
    dropped_bytes: int = 0
    reported_lines: int = 0
    reported_at: float = 0.0
    ended: bool = False


class EchoSink:
    """Per-run bounded queues and the one thread that writes them to `out`."""

    def __init__(self, out: BinaryIO, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._mono = monotonic
        self._runs: dict[str, _RunEcho] = {}
        self._order: deque[str] = deque()  # runs with something to write, in turn
        self._cond = threading.Condition()
        self._closing = False
        self.dropped_lines = 0  # all runs', for tests and the final report
        self._thread = threading.Thread(target=self._write_loop, name="cronctl-echo", daemon=True)
        self._thread.start()

    # --- the supervisor thread's side: never blocks on stdout --------------------------

    def feed(self, job: str, run_id: str, data: bytes) -> None:
        with self._cond:
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = _RunEcho(f"{job} {run_id} | ".encode(), reported_at=self._mono())
            if run.queued >= RUN_BUDGET:
                self._drop(run, data)  # a flood: counted without splitting it into lines
                return
            pieces = (run.partial + data).split(b"\n")
            run.partial = pieces.pop()
            if len(run.partial) >= MAX_LINE:
                pieces.append(run.partial)
                run.partial = b""
            for piece in pieces:
                self._queue(run_id, run, piece)
            self._maybe_report(run_id, run)

    def end(self, run_id: str) -> None:
        """The run's output is over: its last partial line and its drop count go out."""
        with self._cond:
            run = self._runs.get(run_id)
            if run is None:
                return
            if run.partial:
                self._queue(run_id, run, run.partial)
                run.partial = b""
            run.ended = True
            self._report(run_id, run, final=True)
            if not run.lines:
                del self._runs[run_id]

    def close(self, wait: float = 2.0) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(wait)

    # --- under the lock ------------------------------------------------------------

    def _queue(self, run_id: str, run: _RunEcho, line: bytes) -> None:
        entry = run.prefix + line + b"\n"
        if run.queued + len(entry) > RUN_BUDGET:
            run.dropped_lines += 1
            run.dropped_bytes += len(line) + 1
            self.dropped_lines += 1
            return
        self._append(run_id, run, entry)

    def _append(self, run_id: str, run: _RunEcho, entry: bytes) -> None:
        if not run.lines and run_id not in self._order:
            self._order.append(run_id)
            self._cond.notify()
        run.lines.append(entry)
        run.queued += len(entry)

    def _drop(self, run: _RunEcho, data: bytes) -> None:
        count = data.count(b"\n")
        run.dropped_lines += count
        run.dropped_bytes += len(data)
        self.dropped_lines += count
        if count:  # the next line to echo begins after the last newline dropped
            run.partial = data[data.rfind(b"\n") + 1:][:MAX_LINE]

    def _maybe_report(self, run_id: str, run: _RunEcho) -> None:
        if run.dropped_lines > run.reported_lines and self._mono() - run.reported_at >= REPORT_EVERY:
            self._report(run_id, run, final=False)

    def _report(self, run_id: str, run: _RunEcho, final: bool) -> None:
        new = run.dropped_lines - run.reported_lines
        if new <= 0:
            return
        when = "in all" if final else "so far"
        note = (f"[cronctl] {run.dropped_lines} line(s) ({run.dropped_bytes} bytes) of this run not echoed {when}: "
                "it printed faster than stdout took them; the run's log has its output")
        run.reported_lines, run.reported_at = run.dropped_lines, self._mono()
        self._append(run_id, run, run.prefix + note.encode() + b"\n")  # past the budget: never dropped

    # --- the writer thread ----------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._order and not self._closing:
                    self._cond.wait()
                if not self._order:
                    return
                chunk = self._take_turn()
            if chunk:
                try:
                    self._out.write(chunk)
                    self._out.flush()
                except (OSError, ValueError):
                    pass  # stdout closed or broken: echoing is best effort, the logs have it all

    def _take_turn(self) -> bytes:
        """Up to TURN_BYTES of the next run's lines; the run goes to the back if more remain."""
        run_id = self._order.popleft()
        run = self._runs.get(run_id)
        if run is None:
            return b""
        taken: list[bytes] = []
        size = 0
        while run.lines and size < TURN_BYTES:
            line = run.lines.popleft()
            taken.append(line)
            size += len(line)
        run.queued = max(0, run.queued - size)
        if run.lines:
            self._order.append(run_id)
        elif run.ended:
            del self._runs[run_id]
        return b"".join(taken)
