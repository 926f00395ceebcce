"""One supervised run as the supervisor tracks it, and the result it ends with.

The record is grouped by who changes what: the gate (every thread, under the
supervisor's lock), the output, the exit status and the stop (the supervisor
thread only). The verdict reads them all once, at the end.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from cronctl.models import RunStatus
from cronctl.proc.become import MARKER as SETUP_MARKER
from cronctl.proc.become import SETUP_FAILED
from cronctl.proc.echo import EchoSink
from cronctl.proc.fds import close_all
from cronctl.proc.gate import GATE_CWD_FAILED, Gate
from cronctl.proc.guard import Guard
from cronctl.proc.identity import ProcIdentity
from cronctl.proc.limits import limit_reason
from cronctl.proc.output import OutputCapture
from cronctl.proc.spawn import GatedChild, RunRequest
from cronctl.proc.termination import StopState


@dataclass(frozen=True)
class RunResult:
    run_id: str
    status: RunStatus
    exit_code: int | None
    signal: int | None
    reason: str | None
    started_mono: float
    ended_mono: float
    duration: float
    output_tail: str
    log_truncated: bool
    leftovers_killed: int


@dataclass(eq=False)
class ExitStatus:
    """How the run's root process ended, once it has."""

    exited: bool = False
    exit_code: int | None = None
    signal: int | None = None
    status_lost: bool = False  # someone else reaped it: that it ended is all we know
    ended_mono: float | None = None

    def record(self, wait_status: int | None, now: float) -> None:
        """The root ended with `wait_status` from waitpid (None: reaped by someone else)."""
        if wait_status is None:
            self.status_lost = True
        elif os.WIFSIGNALED(wait_status):
            self.signal = os.WTERMSIG(wait_status)
        elif os.WIFEXITED(wait_status):
            self.exit_code = os.WEXITSTATUS(wait_status)
        self.exited = True
        self.ended_mono = now


@dataclass(eq=False)
class TrackedRun:
    req: RunRequest
    pid: int
    start_time: float
    pidfd: int | None
    gate: Gate
    output: OutputCapture
    spawned_mono: float
    deadline: float | None = None  # the timeout's instant, set when the gate opens (under the lock)
    exit: ExitStatus = field(default_factory=ExitStatus)
    stopping: StopState = field(default_factory=StopState)
    # The supervisor thread's bookkeeping.
    registered: bool = False  # its fds are in the selector
    wake_at: float | None = None  # the instant it is next looked at, if any
    finalized: bool = False
    echo_end: Callable[[], None] | None = None  # `run --echo-output`: the run's output is over
    guard: Guard | None = None  # ends the run's group if this process dies (proc.guard)

    @classmethod
    def of(cls, req: RunRequest, child: GatedChild, echo: EchoSink | None = None,
           guard: Guard | None = None) -> TrackedRun:
        output = OutputCapture(child.out_fd, child.log_fd, req.log_path, req.log_cap)
        if echo is not None:
            output.echo = functools.partial(echo.feed, req.job, req.run_id)
        run = cls(req, child.pid, child.start_time, child.pidfd, Gate(child.gate_fd), output, child.spawned_mono,
                  guard=guard)
        if echo is not None:
            run.echo_end = functools.partial(echo.end, req.run_id)
        return run

    @property
    def run_id(self) -> str:
        return self.req.run_id

    @property
    def identity(self) -> ProcIdentity:
        return ProcIdentity(self.pid, self.start_time)

    def close_fds(self) -> None:
        """Every fd but the gate's (closed under the lock): at the end, nothing registered remains.
        The guard goes too: the run has ended, there is nothing left for it to end."""
        close_all([self.pidfd, self.output.take_pipe(), self.output.log_fd])
        self.pidfd = self.output.log_fd = None
        if self.echo_end is not None:
            self.echo_end()
            self.echo_end = None
        if self.guard is not None:
            self.guard.end()

    def result(self, now: float) -> RunResult:
        ended = self.exit.ended_mono if self.exit.ended_mono is not None else now
        status, reason, exit_code, sig = self.verdict()
        opened = self.gate.opened_mono
        started = opened if status != RunStatus.NOT_STARTED and opened is not None else ended
        return RunResult(
            run_id=self.run_id,
            status=status,
            exit_code=exit_code,
            signal=sig,
            reason=reason,
            started_mono=started,
            ended_mono=ended,
            duration=max(0.0, ended - started),
            output_tail=self.output.tail_text(),
            log_truncated=self.output.log_truncated,
            leftovers_killed=self.stopping.leftovers_killed,
        )

    def verdict(self) -> tuple[RunStatus, str | None, int | None, int | None]:
        """(status, reason, exit code, signal) of the run as a whole."""
        ended = self.exit
        if ended.exit_code == SETUP_FAILED and SETUP_MARKER in self.output.tail_text():
            return RunStatus.NOT_STARTED, "blocked_config", None, None  # proc/become.py: nothing of it ran
        status, reason, code, sig = self._plain_verdict()
        if status is RunStatus.ERROR and self.req.setup is not None and self.req.setup.limits:
            reason = limit_reason(self.req.setup.limits, sig, code, self.output.tail_text()) or reason
        return status, reason, code, sig

    def _plain_verdict(self) -> tuple[RunStatus, str | None, int | None, int | None]:
        ended = self.exit
        if self.gate.state != "open":
            # The gate shell's own exit code says nothing about the command.
            if self.gate.not_started_reason is not None:
                return RunStatus.NOT_STARTED, self.gate.not_started_reason, None, None
            if ended.exit_code == GATE_CWD_FAILED:
                return RunStatus.NOT_STARTED, "blocked_config", None, None
            return RunStatus.NOT_STARTED, "gate_failed", None, None
        if self.stopping.stop is not None:
            return self.stopping.stop[0], self.stopping.stop[1], ended.exit_code, ended.signal
        if ended.status_lost:
            return RunStatus.ERROR, "exit_status_lost", None, None
        if ended.signal is not None:
            return RunStatus.ERROR, "killed_by_signal", None, ended.signal
        if ended.exit_code == 0:
            return RunStatus.SUCCESS, None, 0, None
        return RunStatus.ERROR, "exit_code_nonzero", ended.exit_code, None
