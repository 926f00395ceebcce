"""The gate every child starts blocked on, and the parent's end of it.

Every child starts as a small shell blocked on a *gate*: it reads one line
from fd 3 and execs the command only if that line is ``go``. So the pid and
start time can be persisted before anything of the job runs, a batch of runs
is released at the slot by one write each, and a gated run can be cancelled
with the certainty that nothing of it ran (SPEC §5.2). exec keeps the pid and
the start time, so the identity persisted for the gate is the command's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from cronctl.proc.fds import GATE_FD

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
    f"IFS= read -r line <&{GATE_FD}\n"
    f"exec {GATE_FD}<&-\n"
    '[ "$line" = go ] || exit 125\n'
    'if [ "$1" = -c ]; then line=$2; shift 2; eval "unset line; $line"; exit; fi\n'
    'exec "$@"\n'
)
GATE_NAME = "cronctl-gate"
GATE_CWD_FAILED = 121

GateState = Literal["closed", "open", "cancelled", "broken"]


@dataclass(eq=False)
class Gate:
    """The write end of one child's gate and what became of it.

    Read and changed by the callers' threads and the supervisor thread alike:
    only under the supervisor's lock.
    """

    fd: int | None
    state: GateState = "closed"
    opened_mono: float | None = None  # when "go" was written, or found unwritable
    not_started_reason: str | None = None  # why a closed gate was cancelled
    # Written just before "go": an adopted warm child's environment and command (proc/warm.py).
    preface: bytes = b""

    @property
    def can_open(self) -> bool:
        return self.state == "closed" and self.fd is not None

    def write_go(self, now: float) -> None:
        """Let the command begin. Only the write: closing the fd waits until a whole batch is written."""
        assert self.fd is not None
        try:
            os.write(self.fd, self.preface + b"go\n")
            self.state = "open"
        except OSError:
            # The gate's reader is gone: the child died before the
            # command could begin, so nothing of it ran.
            self.state = "broken"
        self.opened_mono = now

    def cancel(self, reason: str) -> None:
        """Close a still-closed gate: the child exits 125 without running the command."""
        self.state = "cancelled"
        self.not_started_reason = reason
        self.release()

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
