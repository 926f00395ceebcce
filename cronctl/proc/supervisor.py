"""Spawn gated children and supervise all of them from one thread: the API.

The runner knows nothing of the store: it takes RunRequests, hands back a
Spawned (pid and start time, known before the command begins: proc.gate) and,
later, one RunResult per run through the `on_result` callback.

Any thread may call the methods here. They start children (proc.spawn), open
and cancel gates, and post commands under one lock (proc.shared); the one
supervisor thread (proc.watcher) does everything else: exits, output,
timeouts, kills (proc.termination) and the results (proc.run).
"""

from __future__ import annotations

import errno
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from cronctl.proc.echo import EchoSink
from cronctl.proc.fds import raise_fd_limit
from cronctl.proc.guard import Guard, start_guard
from cronctl.proc.identity import is_child_subreaper, set_child_subreaper
from cronctl.proc.run import RunResult, TrackedRun
from cronctl.proc.shared import SharedRuns
from cronctl.proc.spawn import (
    BlockedConfig,
    GatedChild,
    RunRequest,
    Spawned,
    SpawnError,
    SpawnFn,
    open_run_log,
    preflight,
    spawn_session,
    start_gated,
)
from cronctl.proc.warm_pool import WarmPool
from cronctl.proc.watcher import Watcher


class Supervisor:
    """Starts gated runs and supervises all of them from one thread."""

    def __init__(
        self,
        *,
        on_result: Callable[[RunResult], None],
        monotonic: Callable[[], float] = time.monotonic,
        spawn: SpawnFn | None = None,
        subreaper: bool = False,
        timeouts_enabled: bool = True,
        echo: EchoSink | None = None,
    ) -> None:
        self._on_result = on_result
        self._echo = echo  # `run --echo-output`: each run's output also goes there (proc/echo.py)
        self._mono = monotonic
        self._spawn = spawn or spawn_session
        self._subreaper = subreaper
        # Whether this supervisor made the process a subreaper, so that its shutdown can
        # undo it: a process that supervises runs once (force-run, tests) must not go on
        # adopting every orphan of its other children afterwards, with no one to reap them.
        self._became_subreaper = False
        self._shared = SharedRuns(monotonic, timeouts_enabled)
        self._thread: threading.Thread | None = None
        # Gated shells made ahead of the runs a chain hop claims (proc/warm.py).
        self.warm = WarmPool(self._shared, self._spawn, monotonic)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the supervisor is already started")
        raise_fd_limit()
        if self._subreaper and not is_child_subreaper():
            self._became_subreaper = set_child_subreaper()
            if not self._became_subreaper:
                print("cronctl: could not become a child subreaper; orphans go to init", file=sys.stderr)
        watcher = Watcher(self._shared, on_result=self._on_result, monotonic=self._mono, subreaper=self._subreaper)
        self._thread = threading.Thread(target=watcher.run, name="cronctl-supervisor", daemon=True)
        self._thread.start()

    def spawn_gated(self, req: RunRequest, wake: bool = True, warm: bool = False) -> Spawned:
        """Start the child blocked on its gate: the command has not begun yet.

        `wake=False`: one of a batch, whose caller calls `wake()` once after the last
        (a wake-up per child hands the GIL to the supervisor thread between two spawns:
        about a third of a millisecond each, 20 children on one chain hop).
        `warm`: adopt a warm child made ahead (proc/warm.py) if one can be the run."""
        self._check_accepting(req.run_id)
        self._shared.wake_if_owed()
        env, argv = preflight(req)
        adopted = self.warm.adopt(req, env, argv, self._track) if warm else None
        if adopted is not None:
            if wake:
                self._shared.wake()
            return Spawned(req.run_id, adopted.pid, adopted.start_time)
        log_fd = open_run_log(req)
        with self._shared.reap_lock:
            child = start_gated(req, env, argv, log_fd, self._spawn, self._mono)
            self._track(req, child, guard_child(req, child))
        if wake:
            self._shared.wake()
        return Spawned(req.run_id, child.pid, child.start_time)

    def adopt_warm(self, req: RunRequest, inherited: Mapping[str, str] | None = None) -> Spawned | None:
        """`req`'s gated child from a warm child made ahead (proc/warm.py), or None (none left, or
        none can be this run: the caller spawns it as usual). Spawns nothing: cheap enough to
        do while a store write holds its lock. The caller calls `wake()` after the batch (opening
        their gates does). `inherited`: preflight's, made once for the batch."""
        try:
            self._check_accepting(req.run_id)
            env, argv = preflight(req, inherited)
            adopted = self.warm.adopt(req, env, argv, self._track)
        except (RuntimeError, ValueError, BlockedConfig, SpawnError):
            return None  # the usual spawn meets it again, and says so (its claim refused there)
        return None if adopted is None else Spawned(req.run_id, adopted.pid, adopted.start_time)

    def wake(self) -> None:
        """The supervisor thread looks at what was posted (the children of a batch) now."""
        self._shared.wake()

    def open_gates(self, run_ids: Iterable[str]) -> None:
        """Release gated runs: one write each, so a batch begins together."""
        self._shared.open_gates(run_ids)

    def open_gates_after(self, run_ids: Iterable[str], delay: float, burst: int = 0) -> None:
        """Open these gates `delay` seconds from now, from the supervisor thread.

        The batch is released at its instant by the one thread that is never busy
        with the store, so a long store write cannot make a slot late. A gate
        cancelled meanwhile stays closed. `burst`: how many children start at that
        instant in all (other loops' too), if more than these (proc/burst.py).
        """
        self._shared.wake_if_owed()
        ids = tuple(run_ids)
        if delay <= 0:
            self._shared.open_gates(ids, burst)
            return
        self._shared.open_gates_at(self._mono() + delay, ids, burst)

    def gate_opened_at(self, run_ids: Iterable[str]) -> dict[str, float | None]:
        """For each known run: when its gate opened (monotonic), None while it has not."""
        self._shared.wake_if_owed()  # asked on every tick while a run is held
        with self._shared.lock:
            runs = self._shared.runs
            return {run_id: (run.gate.opened_mono if run.gate.state == "open" else None)
                    for run_id in run_ids if (run := runs.get(run_id)) is not None}

    def cancel_gate(self, run_id: str) -> bool:
        """End a gated run without running its command; True if it is certain nothing ran.

        A run whose gate is already open has begun; it is killed instead,
        reason "gate_cancelled", because pretending it never ran would lie.
        """
        with self._shared.lock:
            run = self._shared.runs.get(run_id)
            if run is None:
                return False
            if run.gate.state == "closed":
                run.gate.cancel("gate_cancelled")
                return True
            if run.gate.state != "open":
                return True  # cancelled or broken before it could begin
            self._shared.post(("kill", run_id, "gate_cancelled"))
        self._shared.wake()
        return False

    def kill(self, run_id: str, reason: str) -> bool:
        """Ask the supervisor thread to end the run (group, descendants, grace, SIGKILL)."""
        with self._shared.lock:
            if run_id not in self._shared.runs:
                return False
            self._shared.post(("kill", run_id, reason))
        self._shared.wake()
        return True

    def running(self) -> list[str]:
        """Run ids not yet finished, gated ones included."""
        self._shared.wake_if_owed()
        with self._shared.lock:
            return list(self._shared.runs)

    def shutdown(self, reason: str = "shutdown", wait: float | None = None) -> None:
        """Kill every run (each with its kill_grace), deliver results, stop the thread."""
        self.warm.drain()
        with self._shared.lock:
            self._shared.stopping = True
            thread = self._thread
            self._shared.post(("shutdown", reason))
        if thread is None:
            return
        self._shared.wake()
        if thread is not threading.current_thread():
            thread.join(wait)
            if self._became_subreaper and not thread.is_alive():
                set_child_subreaper(False)
                self._became_subreaper = False

    def wait_idle(self, timeout: float) -> bool:
        """True once every run's result has been delivered."""
        with self._shared.idle:
            return self._shared.idle.wait_for(lambda: not self._shared.runs, timeout)

    # --- spawning (caller's thread) ---------------------------------------------

    def _check_accepting(self, run_id: str) -> None:
        with self._shared.lock:
            if self._thread is None or self._shared.stopping:
                raise RuntimeError("the supervisor is not running; start() it first, and not after shutdown()")
            if run_id in self._shared.runs:
                raise ValueError(f"run {run_id} is already supervised")

    def _track(self, req: RunRequest, child: GatedChild, guard: Guard) -> None:
        """Hand the new child to the supervisor thread, unless shutdown began meanwhile."""
        with self._shared.lock:
            if not self._shared.stopping:
                self._shared.runs[req.run_id] = TrackedRun.of(req, child, self._echo, guard)
                self._shared.post(("register", req.run_id))
                return
        child.discard()
        guard.end()
        raise RuntimeError("the supervisor is shutting down")


def guard_child(req: RunRequest, child: GatedChild) -> Guard:
    """The child's guard (proc.guard); a child that cannot be guarded is discarded, never run."""
    try:
        return start_guard(child.pid, req.kill_grace)
    except OSError as exc:
        child.discard()
        raise SpawnError(exc.errno or errno.EIO, f"cannot guard run {req.run_id} of {req.job}: {exc}") from exc
