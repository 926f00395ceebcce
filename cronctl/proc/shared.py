"""What the callers' threads and the supervisor thread share: the runs, commands, gate timers.

Everything here is read and changed under one lock. Other threads never touch
a run's processes or fds beyond its gate: they post a command and wake the
supervisor thread through a pipe that sits in its selector.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable

from cronctl.proc.burst import BURST_PACED_MIN, burst_quiet
from cronctl.proc.fds import close_all, pipe
from cronctl.proc.run import TrackedRun

# ("register", run_id) | ("opened", run_id) | ("kill", run_id, reason) | ("shutdown", reason)
Command = tuple[str, ...]
# The longest the supervisor thread sleeps with nothing due: a wake-up write that failed
# (a full disk is no excuse for a pipe, but a fault injector or a kernel bug may say so)
# delays what it was for by this much at most, instead of for ever.
WAKE_BACKSTOP = 2.0
# With nothing at all to supervise (no run, no gate timer, no wake-up ever lost), the thread
# sleeps this long instead: an idle loop's supervisor woke every 2 s for nothing, a fifth of
# the loop's idle CPU. A wake-up lost meanwhile (the only thing the backstop is for) is
# written again by the poster's next call (`wake_if_owed`), and once one was lost the
# thread keeps WAKE_BACKSTOP for good.
IDLE_BACKSTOP = 10.0


class SharedRuns:
    def __init__(self, monotonic: Callable[[], float], timeouts_enabled: bool) -> None:
        self._mono = monotonic
        self._timeouts_enabled = timeouts_enabled
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        # Held from posix_spawn until the run is tracked, and while orphans are
        # reaped, so the orphan reaper never mistakes a new child for an orphan.
        self.reap_lock = threading.Lock()
        self.runs: dict[str, TrackedRun] = {}
        self.commands: deque[Command] = deque()
        self.stopping = False
        # (monotonic instant, seq, run ids, burst): gates to open at that instant.
        self._gate_timers: list[tuple[float, int, tuple[str, ...], int]] = []
        self._seq = itertools.count()
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        # Until then (monotonic) the children of the last burst of gates start: a run's end
        # waits for its leftovers pass and result (proc/burst.py). Set under the lock, read
        # by the supervisor thread (a float: a stale read only moves the pass by a round).
        self.burst_until = float("-inf")
        self.paced_until = float("-inf")  # the same for a burst of BURST_PACED_MIN or more
        self.wakes_lost = 0  # wake-up writes that failed (not for a full pipe)
        self.wake_owed = False  # the last wake-up write failed: the next call tries again

    # --- waking the supervisor thread ------------------------------------------

    def open_wake_pipe(self) -> int:
        """The read end, for the supervisor thread's selector."""
        self._wake_r, self._wake_w = pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        return self._wake_r

    def wake(self) -> None:
        with self.lock:
            if self._wake_w is None:
                return
            try:
                os.write(self._wake_w, b"x")
                self.wake_owed = False
            except BlockingIOError:
                self.wake_owed = False  # already full: the thread will wake anyway
            except OSError:
                # ENOSPC, EIO...: the wake-up is lost, never the caller's work (a child just
                # spawned must be tracked, not reported as a spawn failure and left gated).
                # The supervisor thread sleeps at most WAKE_BACKSTOP while it has anything
                # to do, IDLE_BACKSTOP otherwise (then until the poster's next call tries
                # again), so it still sees what was posted.
                self.wakes_lost += 1
                self.wake_owed = True

    def wake_if_owed(self) -> None:
        """Write a wake-up that failed before (the engine's calls on each tick ask)."""
        if self.wake_owed:
            self.wake()

    def backstop(self) -> float:
        """The longest the supervisor thread sleeps: IDLE_BACKSTOP only with nothing to do."""
        if self.runs or self.commands or self._gate_timers or self.wakes_lost:
            return WAKE_BACKSTOP
        return IDLE_BACKSTOP

    def drain_wake(self) -> None:
        assert self._wake_r is not None
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def close_wake_pipe(self) -> None:
        with self.lock:
            wake_w, self._wake_w = self._wake_w, None
        close_all([self._wake_r, wake_w])

    # --- commands -----------------------------------------------------------------

    def post(self, command: Command) -> None:
        """Queue a command for the supervisor thread (caller holds the lock, then wakes it)."""
        self.commands.append(command)

    def take_commands(self) -> list[Command]:
        with self.lock:
            commands = list(self.commands)
            self.commands.clear()
        return commands

    def finished(self) -> bool:
        """Shutdown was asked for, and nothing is left to supervise or to do."""
        with self.lock:
            return self.stopping and not self.runs and not self.commands

    def forget(self, run_id: str) -> None:
        """Drop a run whose result was delivered, so wait_idle() means "every result delivered"."""
        with self.idle:
            self.runs.pop(run_id, None)
            self.idle.notify_all()

    # --- gates --------------------------------------------------------------------

    def open_gates(self, run_ids: Iterable[str], burst: int = 0) -> None:
        """Release gated runs: one write each, so a batch begins together. `burst`: how many
        children start at this instant in all, if more than these (other loops' share)."""
        opened: list[TrackedRun] = []
        with self.lock:
            for run_id in run_ids:
                run = self.runs.get(run_id)
                if run is None or not run.gate.can_open:
                    continue
                run.gate.write_go(self._mono())
                opened.append(run)
            # Bookkeeping only after every write, so the last run of a batch
            # is not released later than it must be.
            self._burst(opened, burst)
            for run in opened:
                assert run.gate.opened_mono is not None
                run.gate.release()
                if run.gate.state == "open" and self._timeouts_enabled and (run.req.timeout or 0) > 0:
                    run.deadline = run.gate.opened_mono + run.req.timeout
                self.post(("opened", run.run_id))
        self.wake()

    def _burst(self, opened: list[TrackedRun], burst: int) -> None:
        """Gates were just opened together: their runs' ends wait while the burst's children start."""
        started = [run.gate.opened_mono for run in opened if run.gate.state == "open"]
        if not started or started[0] is None:
            return
        size = max(len(started), burst)
        self.burst_until = max(self.burst_until, started[0] + burst_quiet(size))
        if size >= BURST_PACED_MIN:
            self.paced_until = max(self.paced_until, self.burst_until)

    def open_gates_at(self, when: float, run_ids: tuple[str, ...], burst: int = 0) -> None:
        with self.lock:
            heapq.heappush(self._gate_timers, (when, next(self._seq), run_ids, burst))
        self.wake()

    def open_timed_gates(self) -> None:
        """Release the batches whose instant has come."""
        if not self._gate_timers:
            return
        now = self._mono()
        due: list[str] = []
        burst = 0
        with self.lock:
            while self._gate_timers and self._gate_timers[0][0] <= now:
                _when, _seq, run_ids, size = heapq.heappop(self._gate_timers)
                due.extend(run_ids)
                burst = max(burst, size)
        if due:
            self.open_gates(due, burst)

    def next_gate_timer(self) -> float | None:
        timers = self._gate_timers
        return timers[0][0] if timers else None
