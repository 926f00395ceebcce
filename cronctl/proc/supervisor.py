"""Spawn gated children and supervise all of them from one thread.

The runner knows nothing of the store: it takes RunRequests, hands back a
Spawned (pid and start time, known before the command begins) and, later, one
RunResult per run through the `on_result` callback.

Every child starts as a small shell blocked on a *gate*: it reads one line
from fd 3 and execs the command only if that line is ``go``. So the pid and
start time can be persisted before anything of the job runs, a batch of runs
is released at the slot by one write each, and a gated run can be cancelled
with the certainty that nothing of it ran (SPEC §5.2). exec keeps the pid and
the start time, so the identity persisted for the gate is the command's.

One thread watches everything: each run's output pipe and its pidfd sit in
one selector next to a wake pipe for commands from other threads. Timeouts,
kill graces and drain bounds are deadlines in a heap, never sleeps, so one
slow kill never delays another run. 500 runs mean the same two threads as one.
"""

from __future__ import annotations

import errno
import fcntl
import heapq
import itertools
import os
import resource
import selectors
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cronctl.errors import CronctlError
from cronctl.proc import identity as procs
from cronctl.proc.find import snapshot_runs
from cronctl.proc.kill import Termination

SUCCESS = "success"
ERROR = "error"
TIMEOUT = "timeout"
KILLED = "killed"
NOT_STARTED = "not_started"

GATE_SHELL = "/bin/sh"
# $1 is the working directory ("" to keep ours), then either "-c" and a shell
# command, or the command's argv. The cd happens before the gate so that a
# vanished directory shows up as a run that never started rather than as the
# job's own failure.
#
# A shell command is evaluated by the gate's own shell, already started, instead
# of exec'ing a second /bin/sh: after the gate opens a job then costs one exec
# fewer (about 0.9 ms of CPU here), which is most of what separates the slot from
# the start when hundreds of runs open at once. Like `sh -c CMD` it sees no
# positional parameters and no variable of the gate; only $0 reads cronctl-gate.
GATE_SCRIPT = (
    '[ -z "$1" ] || cd -- "$1" || exit 121\n'
    "shift\n"
    "IFS= read -r line <&3\n"
    "exec 3<&-\n"
    '[ "$line" = go ] || exit 125\n'
    'if [ "$1" = -c ]; then line=$2; shift 2; eval "unset line; $line"; exit; fi\n'
    'exec "$@"\n'
)
GATE_NAME = "cronctl-gate"
GATE_CWD_FAILED = 121
GATE_FD = 3

TAIL_BYTES = 4096
_READ_CHUNK = 65536
# At the drain bound, what is already in the pipe is still worth keeping, but
# a writer that never stops must not keep us reading.
_FINAL_READS = 16
# How often survivors of a SIGTERM are looked at during their grace.
_SURVIVOR_POLL = 0.05
# A run that ended is looked for leftovers in a pass over /proc. Passes asked for
# within this long are made as one: when hundreds of runs end together, one pass
# per select() round would take the CPU their siblings need to start. A result
# waits for it, so this is how much later a run's end may be recorded.
_LEFTOVER_SCAN_COALESCE = 0.25
# In subreaper mode orphans exit without telling us; look for them this often.
_ORPHAN_REAP_INTERVAL = 0.25
# With no run at all, only a leftover of an earlier run can end: looked for less often,
# so an idle loop's supervisor wakes twice a second less than eight times.
_IDLE_ORPHAN_REAP_INTERVAL = 2.0
# Runs open four fds each (pidfd, pipe, log, gate); 500 of them need room.
_WANTED_NOFILE = 65536

# Python ignores SIGPIPE and SIGXFSZ; ignored signals survive exec, and a job
# run with SIGPIPE ignored behaves differently (`yes | head` never ends).
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True)
class RunRequest:
    run_id: str
    job: str
    command: str | tuple[str, ...]  # str: /bin/sh -c; tuple: argv
    cwd: str | None
    env: Mapping[str, str]  # merged over os.environ
    timeout: float  # seconds from the gate opening, 0 = none
    kill_grace: float
    log_path: Path
    log_cap: int = 1_000_000
    drain_timeout: float = 2.0


@dataclass(frozen=True)
class Spawned:
    run_id: str
    pid: int
    start_time: float


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: str
    exit_code: int | None
    signal: int | None
    reason: str | None
    started_mono: float
    ended_mono: float
    duration: float
    output_tail: str
    log_truncated: bool
    leftovers_killed: int


class SpawnError(CronctlError):
    """The platform could not start the child; nothing is left running."""

    def __init__(self, errno_: int, message: str) -> None:
        super().__init__(message)
        self.errno = errno_


class BlockedConfig(CronctlError):
    """The run cannot start as configured (cwd or executable missing)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


SpawnFn = Callable[[str, Sequence[str], Mapping[str, str], Sequence[tuple[Any, ...]]], int]


def spawn_session(path: str, argv: Sequence[str], env: Mapping[str, str], file_actions: Sequence[tuple[Any, ...]]) -> int:
    """The real spawn: a new session (hence its own process group), default signals.

    posix_spawn rather than subprocess.Popen, because Popen objects reap their
    own children and would race with the supervisor's reaping.
    """
    return os.posix_spawn(
        path,
        list(argv),
        dict(env),
        file_actions=list(file_actions),
        setsid=True,
        setsigmask=(),
        setsigdef=_DEFAULT_SIGNALS,
    )


# --- pre-flight -------------------------------------------------------------


def _command_argv(command: str | tuple[str, ...]) -> list[str]:
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    argv = list(command)
    if not argv or not argv[0]:
        raise BlockedConfig("command", "the command is empty; give a program to run")
    return argv


def _gate_argv(command: str | tuple[str, ...], cwd: str) -> list[str]:
    """The gated child's argv: the gate script, the directory, then what it runs (see GATE_SCRIPT)."""
    tail = ["-c", command] if isinstance(command, str) else _command_argv(command)
    return [GATE_SHELL, "-c", GATE_SCRIPT, GATE_NAME, cwd, *tail]


def _check_cwd(cwd: str | None) -> str:
    if cwd is None:
        return ""
    path = os.path.abspath(cwd)
    if not os.path.isdir(path):
        raise BlockedConfig("cwd", f"working directory {cwd!r} does not exist or is not a directory")
    if not os.access(path, os.X_OK):
        raise BlockedConfig("cwd", f"working directory {cwd!r} cannot be entered (permission denied)")
    return path


def _check_executable(program: str, env: Mapping[str, str], cwd: str) -> None:
    if "/" in program:
        path = os.path.join(cwd or os.getcwd(), program)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return
        raise BlockedConfig("command", f"executable {program!r} does not exist or is not executable")
    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise BlockedConfig("command", f"executable {program!r} not found in PATH; install it or use a full path")


# --- fds --------------------------------------------------------------------


def _pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose ends are above the fds the child gets.

    posix_spawn's dup2(fd, fd) would keep close-on-exec set, and a source fd
    among 0-3 could be overwritten by an earlier dup2 of the file actions.
    """
    r, w = os.pipe()
    try:
        r = _lift(r)
    except OSError:
        os.close(w)
        raise
    try:
        return r, _lift(w)
    except OSError:
        os.close(r)
        raise


def _lift(fd: int) -> int:
    if fd > GATE_FD:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, GATE_FD + 1)
    finally:
        os.close(fd)  # also when there is no fd left to lift it to (EMFILE)


def _close_all(fds: Iterable[int | None]) -> None:
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _open_log(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o600)
    # An existing file keeps its old mode through O_CREAT; logs may hold secrets.
    os.fchmod(fd, 0o600)
    return _lift(fd)


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _WANTED_NOFILE if hard == resource.RLIM_INFINITY else min(hard, _WANTED_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            pass


# --- one run, as the supervisor thread sees it --------------------------------


@dataclass(eq=False)
class _Run:
    req: RunRequest
    pid: int
    start_time: float
    pidfd: int | None
    out_fd: int | None
    gate_fd: int | None
    log_fd: int | None
    spawned_mono: float
    # Shared with other threads, under Supervisor._lock.
    gate: str = "closed"  # closed | open | cancelled | broken
    not_started_reason: str | None = None
    started_mono: float | None = None
    deadline: float | None = None
    # Only the supervisor thread touches the rest.
    registered: bool = False
    exited: bool = False
    exit_code: int | None = None
    signal: int | None = None
    status_lost: bool = False
    ended_mono: float | None = None
    drain_deadline: float | None = None
    stop: tuple[str, str] | None = None  # (status, reason) of a stop we began
    term: Termination | None = None
    term_deadline: float = 0.0
    term_done: bool = False
    leftovers: Termination | None = None
    leftovers_deadline: float = 0.0
    leftovers_scanned: bool = False
    next_poll: float = 0.0
    wake_at: float | None = None
    log_written: int = 0
    log_truncated: bool = False
    tail: bytearray = field(default_factory=bytearray)
    finalized: bool = False

    @property
    def run_id(self) -> str:
        return self.req.run_id

    @property
    def identity(self) -> procs.ProcIdentity:
        return procs.ProcIdentity(self.pid, self.start_time)


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
    ) -> None:
        self._on_result = on_result
        self._mono = monotonic
        self._spawn = spawn or spawn_session
        self._subreaper = subreaper
        self._timeouts_enabled = timeouts_enabled
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Held from posix_spawn until the run is tracked, and while orphans are
        # reaped, so the orphan reaper never mistakes a new child for an orphan.
        self._reap_lock = threading.Lock()
        self._runs: dict[str, _Run] = {}
        self._commands: deque[tuple[str, ...]] = deque()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._sel: selectors.BaseSelector | None = None
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._heap: list[tuple[float, int, _Run]] = []
        self._seq = itertools.count()
        # (monotonic instant, seq, run ids): gates to open at that instant, under _lock.
        self._gate_timers: list[tuple[float, int, tuple[str, ...]]] = []
        self._scans: dict[str, tuple[_Run, str]] = {}
        self._scans_waiting_since: float | None = None
        self._next_orphan_reap = 0.0

    # --- public API, callable from any thread --------------------------------

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("the supervisor is already started")
        _raise_fd_limit()
        if self._subreaper and not procs.set_child_subreaper():
            print("cronctl: could not become a child subreaper; orphans go to init", file=sys.stderr)
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = _pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._thread = threading.Thread(target=self._loop, name="cronctl-supervisor", daemon=True)
        self._thread.start()

    def spawn_gated(self, req: RunRequest) -> Spawned:
        """Start the child blocked on its gate: the command has not begun yet."""
        self._check_accepting(req.run_id)
        env = {**os.environ, **req.env}
        argv = _command_argv(req.command)
        cwd = _check_cwd(req.cwd)
        if not isinstance(req.command, str):
            _check_executable(argv[0], env, cwd)
        try:
            log_fd = _open_log(req.log_path)
        except OSError as exc:
            raise SpawnError(exc.errno or errno.EIO, f"cannot open log {req.log_path}: {exc.strerror}") from exc
        with self._reap_lock:
            run = self._spawn_tracked(req, env, _gate_argv(req.command, cwd), log_fd)
        self._wake()
        return Spawned(req.run_id, run.pid, run.start_time)

    def open_gates(self, run_ids: Iterable[str]) -> None:
        """Release gated runs: one write each, so a batch begins together."""
        opened: list[_Run] = []
        with self._lock:
            for run_id in run_ids:
                run = self._runs.get(run_id)
                if run is None or run.gate != "closed" or run.gate_fd is None:
                    continue
                try:
                    os.write(run.gate_fd, b"go\n")
                    run.gate = "open"
                except OSError:
                    # The gate's reader is gone: the child died before the
                    # command could begin, so nothing of it ran.
                    run.gate = "broken"
                run.started_mono = self._mono()
                opened.append(run)
            # Bookkeeping only after every write, so the last run of a batch
            # is not released later than it must be.
            for run in opened:
                assert run.gate_fd is not None and run.started_mono is not None
                os.close(run.gate_fd)
                run.gate_fd = None
                if run.gate == "open" and self._timeouts_enabled and (run.req.timeout or 0) > 0:
                    run.deadline = run.started_mono + run.req.timeout
                self._commands.append(("opened", run.run_id))
        self._wake()

    def open_gates_after(self, run_ids: Iterable[str], delay: float) -> None:
        """Open these gates `delay` seconds from now, from the supervisor thread.

        The batch is released at its instant by the one thread that is never busy
        with the store, so a long store write cannot make a slot late. A gate
        cancelled meanwhile stays closed.
        """
        ids = tuple(run_ids)
        if delay <= 0:
            self.open_gates(ids)
            return
        with self._lock:
            heapq.heappush(self._gate_timers, (self._mono() + delay, next(self._seq), ids))
        self._wake()

    def gate_opened_at(self, run_ids: Iterable[str]) -> dict[str, float | None]:
        """For each known run: when its gate opened (monotonic), None while it has not."""
        with self._lock:
            return {run_id: (run.started_mono if run.gate == "open" else None)
                    for run_id in run_ids if (run := self._runs.get(run_id)) is not None}

    def cancel_gate(self, run_id: str) -> bool:
        """End a gated run without running its command; True if it is certain nothing ran.

        A run whose gate is already open has begun; it is killed instead,
        reason "gate_cancelled", because pretending it never ran would lie.
        """
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return False
            if run.gate == "closed":
                self._close_gate(run, "gate_cancelled")
                return True
            if run.gate != "open":
                return True  # cancelled or broken before it could begin
            self._commands.append(("kill", run_id, "gate_cancelled"))
        self._wake()
        return False

    def kill(self, run_id: str, reason: str) -> bool:
        """Ask the supervisor thread to end the run (group, descendants, grace, SIGKILL)."""
        with self._lock:
            if run_id not in self._runs:
                return False
            self._commands.append(("kill", run_id, reason))
        self._wake()
        return True

    def running(self) -> list[str]:
        """Run ids not yet finished, gated ones included."""
        with self._lock:
            return list(self._runs)

    def shutdown(self, reason: str = "shutdown", wait: float | None = None) -> None:
        """Kill every run (each with its kill_grace), deliver results, stop the thread."""
        with self._lock:
            self._stopping = True
            thread = self._thread
            self._commands.append(("shutdown", reason))
        if thread is None:
            return
        self._wake()
        if thread is not threading.current_thread():
            thread.join(wait)

    def wait_idle(self, timeout: float) -> bool:
        """True once every run's result has been delivered."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._runs, timeout)

    # --- spawning (caller's thread) ---------------------------------------------

    def _check_accepting(self, run_id: str) -> None:
        with self._lock:
            if self._thread is None or self._stopping:
                raise RuntimeError("the supervisor is not running; start() it first, and not after shutdown()")
            if run_id in self._runs:
                raise ValueError(f"run {run_id} is already supervised")

    def _spawn_tracked(self, req: RunRequest, env: dict[str, str], argv: list[str], log_fd: int) -> _Run:
        gate_r = gate_w = out_r = out_w = None
        try:
            gate_r, gate_w = _pipe()
            out_r, out_w = _pipe()
            actions = [
                (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, out_w, 2),
                (os.POSIX_SPAWN_DUP2, gate_r, GATE_FD),
            ]
            pid = self._spawn(GATE_SHELL, argv, env, actions)
        except OSError as exc:
            _close_all([gate_r, gate_w, out_r, out_w, log_fd])
            raise SpawnError(exc.errno or errno.EIO, f"cannot start run {req.run_id} of {req.job}: {exc}") from exc
        except BaseException:
            _close_all([gate_r, gate_w, out_r, out_w, log_fd])
            raise
        _close_all([gate_r, out_w])
        spawned_mono = self._mono()
        try:
            pidfd = os.pidfd_open(pid)
            ident = procs.identify(pid)
            if ident is None:
                raise OSError(errno.ESRCH, "the child vanished before it was identified")
        except OSError as exc:
            # The child is blocked on its gate and still unreaped: killing it
            # by bare pid is safe, and nothing of the command has run.
            self._discard_child(pid)
            _close_all([gate_w, out_r, log_fd])
            raise SpawnError(exc.errno or errno.EIO, f"cannot watch run {req.run_id} of {req.job}: {exc}") from exc
        os.set_blocking(out_r, False)
        run = _Run(req, pid, ident.start_time, pidfd, out_r, gate_w, log_fd, spawned_mono)
        with self._lock:
            if self._stopping:
                shutting_down = True
            else:
                shutting_down = False
                self._runs[req.run_id] = run
                self._commands.append(("register", req.run_id))
        if shutting_down:
            self._discard_child(pid)
            _close_all([pidfd, gate_w, out_r, log_fd])
            raise RuntimeError("the supervisor is shutting down")
        return run

    @staticmethod
    def _discard_child(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass

    def _close_gate(self, run: _Run, reason: str) -> None:
        """Close a still-closed gate (caller holds _lock): the child exits 125."""
        run.gate = "cancelled"
        run.not_started_reason = reason
        if run.gate_fd is not None:
            os.close(run.gate_fd)
            run.gate_fd = None

    def _wake(self) -> None:
        with self._lock:
            if self._wake_w is None:
                return
            try:
                os.write(self._wake_w, b"x")
            except BlockingIOError:
                pass  # already full: the thread will wake anyway

    # --- the supervisor thread ------------------------------------------------

    def _loop(self) -> None:
        assert self._sel is not None
        while True:
            try:
                if self._iterate():
                    break
            except Exception:  # noqa: BLE001 - see below
                # A bug here must not silently stop supervision of every run.
                print("cronctl: supervisor error (continuing):", file=sys.stderr)
                traceback.print_exc(file=sys.stderr)
                time.sleep(0.05)
        with self._lock:
            wake_w, self._wake_w = self._wake_w, None
        self._sel.close()
        _close_all([self._wake_r, wake_w])

    def _iterate(self) -> bool:
        """One round of the event loop; True when the thread should end."""
        assert self._sel is not None
        events = self._sel.select(self._select_timeout())
        self._open_timed_gates()
        now = self._mono()
        touched: dict[str, _Run] = {}
        for key, _mask in events:
            kind, run = key.data
            if kind == "wake":
                self._drain_wake()
            elif kind == "out" and not run.finalized:
                self._read_output(run)
                touched[run.run_id] = run
            elif kind == "exit" and not run.finalized:
                self._on_exit(run, now)
                touched[run.run_id] = run
        self._process_commands(now, touched)
        if self._subreaper and (events or now >= self._next_orphan_reap):
            self._reap_orphans(now, touched)
        while self._heap and self._heap[0][0] <= now:
            when, _seq, run = heapq.heappop(self._heap)
            if run.wake_at == when and not run.finalized:
                run.wake_at = None
                touched[run.run_id] = run
        for run in touched.values():
            self._advance(run, now)
        self._run_scans(now)
        with self._lock:
            return self._stopping and not self._runs and not self._commands

    def _open_timed_gates(self) -> None:
        """Release the batches whose instant has come: first thing after select() returns."""
        if not self._gate_timers:
            return
        now = self._mono()
        due: list[str] = []
        with self._lock:
            while self._gate_timers and self._gate_timers[0][0] <= now:
                due.extend(heapq.heappop(self._gate_timers)[2])
        if due:
            self.open_gates(due)

    def _select_timeout(self) -> float | None:
        timeout: float | None = None
        if self._heap:
            timeout = max(0.0, self._heap[0][0] - self._mono())
        if self._gate_timers:
            until = max(0.0, self._gate_timers[0][0] - self._mono())
            timeout = until if timeout is None else min(timeout, until)
        if self._scans_waiting_since is not None:
            until = max(0.0, self._scans_waiting_since + _LEFTOVER_SCAN_COALESCE - self._mono())
            timeout = until if timeout is None else min(timeout, until)
        if self._subreaper:
            until = max(0.0, self._next_orphan_reap - self._mono())
            timeout = until if timeout is None else min(timeout, until)
        return timeout

    def _drain_wake(self) -> None:
        assert self._wake_r is not None
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _process_commands(self, now: float, touched: dict[str, _Run]) -> None:
        with self._lock:
            commands = list(self._commands)
            self._commands.clear()
        for command in commands:
            run = self._runs.get(command[1]) if command[0] != "shutdown" else None
            if command[0] == "register" and run is not None:
                self._register(run)
            elif command[0] == "kill" and run is not None:
                self._begin_stop(run, KILLED, command[2], now)
            elif command[0] == "shutdown":
                for each in list(self._runs.values()):
                    self._begin_stop(each, KILLED, command[1], now)
                    touched[each.run_id] = each
                continue
            if run is not None:
                touched[run.run_id] = run

    def _register(self, run: _Run) -> None:
        assert self._sel is not None
        if run.registered:
            return
        run.registered = True
        if run.pidfd is not None:
            self._sel.register(run.pidfd, selectors.EVENT_READ, ("exit", run))
        if run.out_fd is not None:
            self._sel.register(run.out_fd, selectors.EVENT_READ, ("out", run))

    def _unregister(self, fd: int, run: _Run) -> None:
        assert self._sel is not None
        if run.registered:
            try:
                self._sel.unregister(fd)
            except (KeyError, ValueError):
                pass
        os.close(fd)

    # --- exits and reaping ------------------------------------------------------

    def _on_exit(self, run: _Run, now: float) -> None:
        try:
            pid, status = os.waitpid(run.pid, os.WNOHANG)
        except ChildProcessError:
            # Someone else reaped it; its status is gone, its end is not.
            pid, status = run.pid, -1
            run.status_lost = True
        if pid == 0:
            return
        if status >= 0:
            if os.WIFSIGNALED(status):
                run.signal = os.WTERMSIG(status)
            elif os.WIFEXITED(status):
                run.exit_code = os.WEXITSTATUS(status)
        run.exited = True
        run.ended_mono = now
        run.drain_deadline = now + run.req.drain_timeout
        if run.pidfd is not None:
            self._unregister(run.pidfd, run)
            run.pidfd = None

    def _reap_orphans(self, now: float, touched: dict[str, _Run]) -> None:
        """Reap children reparented to us, never stealing a tracked run's status.

        waitid(WNOWAIT) only peeks; a tracked pid is handed to _on_exit, which
        records its status, and anything else is an orphan we may reap.
        """
        self._next_orphan_reap = now + (_ORPHAN_REAP_INTERVAL if self._runs else _IDLE_ORPHAN_REAP_INTERVAL)
        with self._reap_lock:
            with self._lock:
                tracked = {run.pid: run for run in self._runs.values() if not run.exited}
            while True:
                try:
                    info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
                except ChildProcessError:
                    return
                if info is None or info.si_pid == 0:
                    return
                run = tracked.pop(info.si_pid, None)
                if run is not None:
                    self._on_exit(run, now)
                    touched[run.run_id] = run
                    continue
                try:
                    os.waitpid(info.si_pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    # --- output -------------------------------------------------------------------

    def _read_output(self, run: _Run) -> None:
        assert run.out_fd is not None
        try:
            data = os.read(run.out_fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._record_output(run, data)
        else:
            self._close_pipe(run)

    def _close_pipe(self, run: _Run, *, final_read: bool = False) -> None:
        if run.out_fd is None:
            return
        for _ in range(_FINAL_READS if final_read else 0):
            try:
                data = os.read(run.out_fd, _READ_CHUNK)
            except OSError:
                break
            if not data:
                break
            self._record_output(run, data)
        self._unregister(run.out_fd, run)
        run.out_fd = None

    def _record_output(self, run: _Run, data: bytes) -> None:
        run.tail += data
        del run.tail[:-TAIL_BYTES]
        if run.log_fd is None or run.log_truncated:
            return
        room = run.req.log_cap - run.log_written
        try:
            if room > 0:
                os.write(run.log_fd, data[:room])
                run.log_written += min(room, len(data))
            if len(data) > room:
                run.log_truncated = True
                note = f"\n[cronctl] output truncated: the log is capped at {run.req.log_cap} bytes\n"
                os.write(run.log_fd, note.encode())
        except OSError as exc:
            # A full disk must not stop the run nor the supervisor; the tail
            # still reaches the result.
            print(f"cronctl: cannot write log {run.req.log_path}: {exc}", file=sys.stderr)
            os.close(run.log_fd)
            run.log_fd = None

    # --- stopping runs ------------------------------------------------------------

    def _begin_stop(self, run: _Run, status: str, reason: str, now: float) -> None:
        if run.finalized:
            return
        if run.exited:
            # How it ended is settled; only cut the drain short.
            if run.drain_deadline is not None:
                run.drain_deadline = min(run.drain_deadline, now)
            return
        if run.stop is not None:
            return
        with self._lock:
            if run.gate == "closed":
                self._close_gate(run, reason)
        run.stop = (status, reason)
        self._scans[run.run_id] = (run, "stop")

    def _run_scans(self, now: float) -> None:
        """Find the processes of every run that asked this round, in one /proc pass."""
        if not self._scans:
            self._scans_waiting_since = None
            return
        if all(purpose == "leftovers" for _, purpose in self._scans.values()):
            # Nothing waits on these but a result: gather a few more before the pass.
            if self._scans_waiting_since is None:
                self._scans_waiting_since = now
            if now - self._scans_waiting_since < _LEFTOVER_SCAN_COALESCE:
                return
        self._scans_waiting_since = None
        scans, self._scans = self._scans, {}
        found = snapshot_runs({run_id: run.identity for run_id, (run, _) in scans.items()})
        for run_id, (run, purpose) in scans.items():
            if run.finalized:
                continue
            processes = found.get(run_id, [])
            if purpose == "stop":
                run.term = Termination(processes, [run.pid])
                run.term.send_term()
                run.term_deadline = now + run.req.kill_grace
            elif purpose == "force" and run.term is not None:
                run.term.add(processes)
                run.term.send_kill()
                run.term_done = True
            elif purpose == "leftovers":
                run.leftovers_scanned = True
                if processes:
                    run.leftovers = Termination(processes, [run.pid])
                    run.leftovers.send_term()
                    run.leftovers_deadline = now + run.req.kill_grace
            run.next_poll = now + _SURVIVOR_POLL
            self._advance(run, now)

    # --- the state of one run -------------------------------------------------------

    def _advance(self, run: _Run, now: float) -> None:
        """Move the run on as far as it can go now, and schedule its next look."""
        if run.finalized:
            return
        wake: list[float] = []
        if not run.exited and run.stop is None and run.deadline is not None:
            if now >= run.deadline:
                self._begin_stop(run, TIMEOUT, TIMEOUT, now)
            else:
                wake.append(run.deadline)
        if run.exited and run.out_fd is not None and run.drain_deadline is not None:
            if now >= run.drain_deadline:
                self._close_pipe(run, final_read=True)
            else:
                wake.append(run.drain_deadline)
        if run.term is not None and not run.term_done and run.run_id not in self._scans:
            self._watch_termination(run, now, wake)
        settled = run.term is None or run.term_done
        # A scan requested this round decides what comes next.
        if settled and run.exited and run.out_fd is None and run.run_id not in self._scans:
            if not run.leftovers_scanned:
                self._scans[run.run_id] = (run, "leftovers")
            elif run.leftovers is None or not self._leftovers_alive(run, now, wake):
                self._finalize(run)
                return
        self._schedule(run, min(wake) if wake else None)

    def _watch_termination(self, run: _Run, now: float, wake: list[float]) -> None:
        assert run.term is not None
        if now >= run.term_deadline:
            # Look again before SIGKILL: a TERM-trapping job may have forked.
            self._scans[run.run_id] = (run, "force")
            return
        if now >= run.next_poll:
            run.next_poll = now + _SURVIVOR_POLL
            if not run.term.survivors():
                run.term_done = True
                return
        wake.append(min(run.term_deadline, run.next_poll))

    def _leftovers_alive(self, run: _Run, now: float, wake: list[float]) -> bool:
        assert run.leftovers is not None
        if now >= run.leftovers_deadline:
            run.leftovers.send_kill()
            return False
        if now >= run.next_poll:
            run.next_poll = now + _SURVIVOR_POLL
            if not run.leftovers.survivors():
                return False
        wake.append(min(run.leftovers_deadline, run.next_poll))
        return True

    def _schedule(self, run: _Run, when: float | None) -> None:
        if when is None or when == run.wake_at:
            return
        run.wake_at = when
        heapq.heappush(self._heap, (when, next(self._seq), run))

    # --- the end of a run --------------------------------------------------------------

    def _finalize(self, run: _Run) -> None:
        run.finalized = True
        _close_all([run.pidfd, run.out_fd, run.log_fd])
        run.pidfd = run.out_fd = run.log_fd = None
        with self._lock:
            if run.gate_fd is not None:
                os.close(run.gate_fd)
                run.gate_fd = None
        result = self._result_of(run)
        try:
            self._on_result(result)
        except Exception:  # noqa: BLE001 - whatever the callback does, supervision goes on
            print(f"cronctl: on_result failed for run {run.run_id} (continuing):", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
        # Removed only after delivery, so wait_idle() means "every result delivered".
        with self._idle:
            self._runs.pop(run.run_id, None)
            self._idle.notify_all()

    def _result_of(self, run: _Run) -> RunResult:
        ended = run.ended_mono if run.ended_mono is not None else self._mono()
        status, reason, exit_code, sig = self._verdict(run)
        started = run.started_mono if status != NOT_STARTED and run.started_mono is not None else ended
        return RunResult(
            run_id=run.run_id,
            status=status,
            exit_code=exit_code,
            signal=sig,
            reason=reason,
            started_mono=started,
            ended_mono=ended,
            duration=max(0.0, ended - started),
            output_tail=bytes(run.tail).decode(errors="replace"),
            log_truncated=run.log_truncated,
            leftovers_killed=run.leftovers.found if run.leftovers is not None else 0,
        )

    @staticmethod
    def _verdict(run: _Run) -> tuple[str, str | None, int | None, int | None]:
        if run.gate != "open":
            # The gate shell's own exit code says nothing about the command.
            if run.not_started_reason is not None:
                return NOT_STARTED, run.not_started_reason, None, None
            if run.exit_code == GATE_CWD_FAILED:
                return NOT_STARTED, "blocked_config", None, None
            return NOT_STARTED, "gate_failed", None, None
        if run.stop is not None:
            return run.stop[0], run.stop[1], run.exit_code, run.signal
        if run.status_lost:
            return ERROR, "exit_status_lost", None, None
        if run.signal is not None:
            return ERROR, "killed_by_signal", None, run.signal
        if run.exit_code == 0:
            return SUCCESS, None, 0, None
        return ERROR, "exit_code_nonzero", run.exit_code, None
