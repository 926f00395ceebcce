"""Starting a run: the request, the pre-flight checks, and the gated child itself.

The runner knows nothing of the store: it takes RunRequests and hands back a
Spawned (pid and start time, known before the command begins, because the
child waits on its gate: see proc.gate). What is wrong with the request itself
(a missing directory or program) is a BlockedConfig before anything starts;
what the platform refuses (no fds, no processes) is a SpawnError, and then
nothing is left running.
"""

from __future__ import annotations

import errno
import functools
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cronctl.errors import CronctlError
from cronctl.proc.childenv import inherited_env
from cronctl.proc.childsetup import ChildSetup, SetupBlocked, prepare
from cronctl.proc.fds import GATE_FD, close_all, open_log, pipe
from cronctl.proc.gate import GATE_NAME, GATE_SCRIPT, GATE_SHELL
from cronctl.proc.identity import identify

# Python ignores SIGPIPE and SIGXFSZ; ignored signals survive exec, and a job
# run with SIGPIPE ignored behaves differently (`yes | head` never ends).
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@dataclass(frozen=True)
class RunRequest:
    run_id: str
    job: str
    command: str | tuple[str, ...]  # str: /bin/sh -c; tuple: argv
    cwd: str | None
    env: Mapping[str, str]  # merged over os.environ less what opens the store (proc.childenv)
    timeout: float  # seconds from the gate opening, 0 = none
    kill_grace: float
    log_path: Path
    log_cap: int = 1_000_000
    drain_timeout: float = 2.0
    setup: ChildSetup | None = None  # user, env_file, limits (SPEC §13): proc/childsetup.py


@dataclass(frozen=True)
class Spawned:
    run_id: str
    pid: int
    start_time: float


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


def spawn_session(
    path: str, argv: Sequence[str], env: Mapping[str, str], file_actions: Sequence[tuple[Any, ...]]
) -> int:
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


def preflight(req: RunRequest, inherited: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The child's environment and gated argv, once the request is known to be startable.
    `inherited`: `inherited_env(os.environ)`, when the caller made it once for a batch."""
    argv = _command_argv(req.command)
    cwd = _check_cwd(req.cwd)
    base = inherited_env(os.environ) if inherited is None else inherited
    try:
        # The job's user, env_file and limits: the environment, and the helper that sets
        # them up in the child before its gate (proc/become.py).
        prepared = prepare(req.setup, base, req.env, _gate_argv(req.command, cwd))
    except SetupBlocked as exc:
        raise BlockedConfig(exc.field, exc.message) from None
    env, gated = prepared.env, prepared.argv
    if not isinstance(req.command, str):
        _check_executable(argv[0], env, cwd)
    too_big = argument_problem(gated, env)
    if too_big is not None:
        # exec would fail with E2BIG: say why before forking anything.
        raise SpawnError(errno.E2BIG, f"cannot start run {req.run_id} of {req.job}: {too_big}")
    return env, gated


# --- the kernel's argument limits (E2BIG) ---------------------------------------------

# Linux refuses any one argument or environment string longer than 32 pages (MAX_ARG_STRLEN).
MAX_ARG_STRLEN = 32 * 4096
# What the gate adds around a command (its script, shell, name and directory), rounded up.
GATE_OVERHEAD = 4096


def argument_problem(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why exec would refuse this argv and environment with E2BIG, or None.

    One string may hold at most MAX_ARG_STRLEN bytes; all of them together, with a
    pointer each, at most the kernel's ARG_MAX (sysconf SC_ARG_MAX).
    """
    costs = [_cost(text) for text in [*argv, *(f"{key}={value}" for key, value in env.items())]]
    return _size_problem(max(costs, default=0), sum(costs))


def command_problem(command: str | tuple[str, ...], env: Mapping[str, str]) -> str | None:
    """At definition time: whether `command` (with the job's `env`) could ever be exec'd.

    Checked against the environment of this process as the run's base (the loop's is
    the same in practice) and the gate's own arguments. The base is measured once per
    process: `apply` checks every job of a file, 10,000 of them at times.
    """
    argv = ["-c", command] if isinstance(command, str) else list(command)
    base, base_total, base_longest = _environ_costs()
    own = [_cost(text) for text in [*argv, "x" * GATE_OVERHEAD, *(f"{k}={v}" for k, v in env.items())]]
    total = base_total - sum(base.get(key, 0) for key in env) + sum(own)
    return _size_problem(max([base_longest, *own]), total)


def _cost(text: str) -> int:
    """What one string takes in exec's argument area: its bytes, its NUL and a pointer."""
    return len(text.encode("utf-8", "surrogateescape")) + 1 + 8


@functools.cache
def _environ_costs() -> tuple[dict[str, int], int, int]:
    costs = {key: _cost(f"{key}={value}") for key, value in os.environ.items()}
    return costs, sum(costs.values()), max(costs.values(), default=0)


def _size_problem(longest_cost: int, total: int) -> str | None:
    longest = longest_cost - 1 - 8  # back to the string's own bytes
    if longest + 1 > MAX_ARG_STRLEN:
        return (f"one argument is {longest} bytes, over the kernel's limit of {MAX_ARG_STRLEN - 1} bytes "
                "for a single argument (E2BIG); put the command in a script")
    limit = os.sysconf("SC_ARG_MAX")
    if total > limit:
        return (f"the command and its environment take {total} bytes, over the kernel's limit of {limit} "
                "(E2BIG); put the command in a script or pass less environment")
    return None


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
    import shutil  # here: it imports bz2 and lzma, a few ms of every start that spawns nothing

    if shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise BlockedConfig("command", f"executable {program!r} not found in PATH; install it or use a full path")


def open_run_log(req: RunRequest) -> int:
    try:
        return open_log(req.log_path)
    except OSError as exc:
        raise SpawnError(exc.errno or errno.EIO, f"cannot open log {req.log_path}: {exc.strerror}") from exc


# --- the gated child ----------------------------------------------------------


@dataclass(frozen=True)
class GatedChild:
    """A child blocked on its gate, and the parent's fds for it."""

    pid: int
    start_time: float
    pidfd: int
    out_fd: int  # non-blocking read end of its stdout and stderr
    gate_fd: int
    log_fd: int
    spawned_mono: float

    def discard(self) -> None:
        """Kill and reap the child and close our fds: nothing of its command has run."""
        discard_child(self.pid)
        close_all([self.pidfd, self.gate_fd, self.out_fd, self.log_fd])


def start_gated(
    req: RunRequest, env: Mapping[str, str], argv: Sequence[str], log_fd: int, spawn: SpawnFn, now: Callable[[], float]
) -> GatedChild:
    """Spawn the gated child and open its pidfd; on any failure nothing is left open or running.

    `log_fd` is taken over: closed here on failure.
    """
    gate_r = gate_w = out_r = out_w = None
    try:
        gate_r, gate_w = pipe()
        out_r, out_w = pipe()
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, out_w, 2),
            (os.POSIX_SPAWN_DUP2, gate_r, GATE_FD),
        ]
        pid = spawn(argv[0], argv, env, actions)  # the gate shell, or the setup helper that execs it
    except OSError as exc:
        close_all([gate_r, gate_w, out_r, out_w, log_fd])
        raise SpawnError(exc.errno or errno.EIO, f"cannot start run {req.run_id} of {req.job}: {exc}") from exc
    except BaseException:
        close_all([gate_r, gate_w, out_r, out_w, log_fd])
        raise
    close_all([gate_r, out_w])
    spawned_mono = now()
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
        ident = identify(pid)
        if ident is None:
            raise OSError(errno.ESRCH, "the child vanished before it was identified")
    except OSError as exc:
        # The child is blocked on its gate and still unreaped: killing it
        # by bare pid is safe, and nothing of the command has run.
        discard_child(pid)
        close_all([pidfd, gate_w, out_r, log_fd])
        raise SpawnError(exc.errno or errno.EIO, f"cannot watch run {req.run_id} of {req.job}: {exc}") from exc
    os.set_blocking(out_r, False)
    return GatedChild(pid, ident.start_time, pidfd, out_r, gate_w, log_fd, spawned_mono)


def discard_child(pid: int) -> None:
    """SIGKILL and reap a child by bare pid: safe only while it is ours and unreaped."""
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass
