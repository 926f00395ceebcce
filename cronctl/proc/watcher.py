"""The supervisor thread: one selector over every run's pidfd and pipe, deadlines in a heap.

Each run's output pipe and its pidfd sit in one selector next to a wake pipe
for commands from other threads. Timeouts, kill graces and drain bounds are
deadlines in a heap, never sleeps, so one slow kill never delays another run.
500 runs mean the same two threads as one.

A run moves on (`_advance`) as far as it can each time something happens to
it: timeout, end of its root, drain of its pipe, termination, leftovers, and
finally its result, delivered once through `on_result`.
"""

from __future__ import annotations

import heapq
import itertools
import os
import selectors
import sys
import time
import traceback
from collections.abc import Callable, Iterator

from cronctl.models import RunStatus
from cronctl.proc.burst import BURST_ROUND
from cronctl.proc.reaping import collect_exit, reap_orphans
from cronctl.proc.run import RunResult, TrackedRun
from cronctl.proc.shared import WAKE_BACKSTOP, SharedRuns
from cronctl.proc.termination import ScanQueue

# In subreaper mode orphans exit without telling us; look for them this often.
_ORPHAN_REAP_INTERVAL = 0.25
# With no run at all, only a leftover of an earlier run can end: looked for rarely (a
# zombie costs a pid entry meanwhile, nothing else), so an idle loop's supervisor sleeps.
_IDLE_ORPHAN_REAP_INTERVAL = 10.0


class Watcher:
    """Everything the supervisor thread does; nothing here is called from another thread."""

    def __init__(
        self,
        shared: SharedRuns,
        *,
        on_result: Callable[[RunResult], None],
        monotonic: Callable[[], float],
        subreaper: bool,
    ) -> None:
        self._shared = shared
        self._on_result = on_result
        self._mono = monotonic
        self._subreaper = subreaper
        self._sel = selectors.DefaultSelector()
        self._sel.register(shared.open_wake_pipe(), selectors.EVENT_READ, ("wake", None))
        self._heap: list[tuple[float, int, TrackedRun]] = []
        self._seq = itertools.count()
        self._scans: ScanQueue[TrackedRun] = ScanQueue()
        self._next_orphan_reap = 0.0
        self._round_began = float("-inf")
        # Whether a run still goes that could ask for a pass (_others_running), as of the end
        # of the last round: computed once per round, not once per question (O(runs) each).
        self._others = True

    def run(self) -> None:
        """The thread's body: until shutdown was asked for and every result is delivered."""
        while True:
            try:
                if self._iterate():
                    break
            except Exception:  # noqa: BLE001 - see below
                # A bug here must not silently stop supervision of every run.
                print("cronctl: supervisor error (continuing):", file=sys.stderr)
                traceback.print_exc(file=sys.stderr)
                time.sleep(0.05)
        self._shared.close_wake_pipe()
        self._sel.close()

    def _iterate(self) -> bool:
        """One round of the event loop; True when the thread should end."""
        self._pace()
        events = self._sel.select(self._select_timeout())
        self._round_began = self._mono()
        # First thing after select() returns: a batch due now is not kept waiting.
        self._shared.open_timed_gates()
        now = self._mono()
        touched: dict[str, TrackedRun] = {}
        for key, _mask in events:
            kind, run = key.data
            if kind == "wake":
                self._shared.drain_wake()
            elif kind == "out" and not run.finalized:
                self._read_output(run)
                touched[run.run_id] = run
            elif kind == "exit" and not run.finalized:
                self._on_exit(run, now)
                touched[run.run_id] = run
        self._process_commands(now, touched)
        if self._subreaper and ((events and now >= self._shared.burst_until) or now >= self._next_orphan_reap):
            self._reap_orphans(now, touched)
        for run in self._due(now):
            touched[run.run_id] = run
        for run in touched.values():
            self._advance(run, now)
        self._run_scans(now)
        return self._shared.finished()

    def _pace(self) -> None:
        """While a big burst's children start, rounds come BURST_ROUND apart: the exits and
        output of that time are taken together (an exit's instant is then up to BURST_ROUND
        late), and the CPU between rounds is the children's. A gate timer due sooner cuts
        the wait short; a command (a kill) waits at most BURST_ROUND."""
        now = self._mono()
        if now >= self._shared.paced_until:
            return
        wait = min(self._round_began + BURST_ROUND, self._shared.paced_until) - now
        timer = self._shared.next_gate_timer()
        if timer is not None:
            wait = min(wait, timer - now)
        if wait > 0:
            time.sleep(wait)

    def _select_timeout(self) -> float | None:
        instants = [self._heap[0][0]] if self._heap else []
        gate_timer = self._shared.next_gate_timer()
        if gate_timer is not None:
            instants.append(gate_timer)
        if self._subreaper:
            instants.append(self._next_orphan_reap)
        now = self._mono()
        waits = [max(0.0, instant - now) for instant in instants]
        scan_wait = (self._scans.timeout(now, self._others, self._shared.burst_until)
                     if self._scans.gathering else None)
        if scan_wait is not None:
            waits.append(scan_wait)
        backstop = WAKE_BACKSTOP if self._heap or scan_wait is not None else self._shared.backstop()
        return min([*waits, backstop])

    def _process_commands(self, now: float, touched: dict[str, TrackedRun]) -> None:
        for command in self._shared.take_commands():
            if command[0] == "shutdown":
                for each in list(self._shared.runs.values()):
                    self._begin_stop(each, RunStatus.KILLED, command[1], now)
                    touched[each.run_id] = each
                continue
            run = self._shared.runs.get(command[1])
            if run is None:
                continue
            if command[0] == "register":
                self._register(run)
            elif command[0] == "kill":
                self._begin_stop(run, RunStatus.KILLED, command[2], now)
            touched[run.run_id] = run  # "opened" too: its deadline starts now

    # --- fds in the selector ----------------------------------------------------

    def _register(self, run: TrackedRun) -> None:
        if run.registered:
            return
        run.registered = True
        if run.pidfd is not None:
            self._sel.register(run.pidfd, selectors.EVENT_READ, ("exit", run))
        if run.output.pipe_fd is not None:
            self._sel.register(run.output.pipe_fd, selectors.EVENT_READ, ("out", run))

    def _release(self, fd: int, run: TrackedRun) -> None:
        """Unregister and close one of the run's fds."""
        if run.registered:
            try:
                self._sel.unregister(fd)
            except (KeyError, ValueError):
                pass
        os.close(fd)

    # --- exits, output ------------------------------------------------------------

    def _on_exit(self, run: TrackedRun, now: float) -> None:
        if collect_exit(run, now):
            self._release_pidfd(run)

    def _release_pidfd(self, run: TrackedRun) -> None:
        if run.pidfd is not None:
            self._release(run.pidfd, run)
            run.pidfd = None

    def _reap_orphans(self, now: float, touched: dict[str, TrackedRun]) -> None:
        busy = bool(self._shared.runs)
        self._next_orphan_reap = now + (_ORPHAN_REAP_INTERVAL if busy else _IDLE_ORPHAN_REAP_INTERVAL)
        with self._shared.reap_lock:
            with self._shared.lock:
                tracked = {run.pid: run for run in self._shared.runs.values() if not run.exit.exited}
            for run in reap_orphans(tracked, now):
                self._release_pidfd(run)
                touched[run.run_id] = run

    def _read_output(self, run: TrackedRun) -> None:
        if not run.output.read():
            self._close_pipe(run)

    def _close_pipe(self, run: TrackedRun, *, final_read: bool = False) -> None:
        if run.output.pipe_fd is None:
            return
        if final_read:
            run.output.read_remaining()
        fd = run.output.take_pipe()
        assert fd is not None
        self._release(fd, run)

    # --- the state of one run ---------------------------------------------------------

    def _begin_stop(self, run: TrackedRun, status: RunStatus, reason: str, now: float) -> None:
        if run.finalized:
            return
        if run.exit.exited:
            # How it ended is settled; only cut the drain short.
            if run.output.drain_deadline is not None:
                run.output.drain_deadline = min(run.output.drain_deadline, now)
            return
        if run.stopping.stop is not None:
            return
        with self._shared.lock:
            if run.gate.state == "closed":
                run.gate.cancel(reason)
        run.stopping.stop = (status, reason)
        self._scans.ask(run.run_id, run.identity, run, "stop")

    def _others_running(self) -> bool:
        """A run not yet ended nor waiting for a scan: one whose end could join a gathered pass."""
        return any(not run.exit.exited and run.run_id not in self._scans for run in list(self._shared.runs.values()))

    def _run_scans(self, now: float) -> None:
        """Find the processes of every run that asked this round, in one /proc pass."""
        if not self._scans.asked:
            return  # the usual round: no O(runs) look at who still runs
        self._others = self._others_running()
        for run, purpose, processes in self._scans.take(now, self._others, self._shared.burst_until):
            if run.finalized:
                continue
            run.stopping.found(purpose, processes, run.pid, run.req.kill_grace, now)
            self._advance(run, now)

    def _advance(self, run: TrackedRun, now: float) -> None:
        """Move the run on as far as it can go now, and schedule its next look."""
        if run.finalized:
            return
        wake: list[float] = []
        stopping, output = run.stopping, run.output
        if not run.exit.exited and stopping.stop is None and run.deadline is not None:
            if now >= run.deadline:
                self._begin_stop(run, RunStatus.TIMEOUT, "timeout", now)
            else:
                wake.append(run.deadline)
        if run.exit.exited and output.pipe_fd is not None and output.drain_deadline is not None:
            if now >= output.drain_deadline:
                self._close_pipe(run, final_read=True)
            else:
                wake.append(output.drain_deadline)
        if not stopping.settled and run.run_id not in self._scans:
            if stopping.watch_termination(now, wake):
                self._scans.ask(run.run_id, run.identity, run, "force")
        # A scan requested this round decides what comes next.
        if stopping.settled and run.exit.exited and output.pipe_fd is None and run.run_id not in self._scans:
            if not stopping.leftovers_scanned:
                self._scans.ask(run.run_id, run.identity, run, "leftovers")
            elif stopping.leftovers is None or not stopping.leftovers_alive(now, wake):
                self._finalize(run)
                return
        self._schedule(run, min(wake) if wake else None)

    # --- timers ------------------------------------------------------------------------

    def _schedule(self, run: TrackedRun, when: float | None) -> None:
        if when is None or when == run.wake_at:
            return
        run.wake_at = when
        heapq.heappush(self._heap, (when, next(self._seq), run))

    def _due(self, now: float) -> Iterator[TrackedRun]:
        """Runs whose scheduled look has come (stale entries of a rescheduled run are skipped)."""
        while self._heap and self._heap[0][0] <= now:
            when, _seq, run = heapq.heappop(self._heap)
            if run.wake_at == when and not run.finalized:
                run.wake_at = None
                yield run

    # --- the end of a run ------------------------------------------------------------------

    def _finalize(self, run: TrackedRun) -> None:
        run.finalized = True
        run.close_fds()
        with self._shared.lock:
            run.gate.release()
        result = run.result(self._mono())
        try:
            self._on_result(result)
        except Exception:  # noqa: BLE001 - whatever the callback does, supervision goes on
            print(f"cronctl: on_result failed for run {run.run_id} (continuing):", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
        # Removed only after delivery, so wait_idle() means "every result delivered".
        self._shared.forget(run.run_id)
