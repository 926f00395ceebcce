"""Warm children: gated shells spawned before the run they will be, for chain hops.

Spawning a gated child and its guard costs the loop about a millisecond each (posix_spawn,
the /proc read that identifies it, the guard's own spawn), one after another: a 20-wide
fan-out paid 20 of them between its upstream's end and its dependants' start. A warm child
is spawned earlier, while the upstream still runs, with no run yet: a gate shell in a
session of its own, its guard beside it, blocked on its gate like any child. When a hop
claims a run, the child is *adopted*: the lines below are written to its gate, and the
run is tracked as if it had just been spawned; the gate then opens with the usual "go".

    E NAME=VALUE   export (the run's environment beyond the loop's: CRONCTL_RUN_ID, ...)
    U NAME         unset (a variable of the loop's the run must not see)
    D DIR          cd, before the gate opens: a vanished directory is a run never started
    C LINE         one line of a shell command (joined with newlines and evaluated, as the
                   gate evaluates `-c CMD`)
    A ARG          one argument of an argv command (exec'd, as the gate execs "$@")
    go             the gate opens

The directory line is written at adoption, so a vanished directory ends the child before
its gate opens (a run never started, as with any gate); the other lines go in the same
write as "go". A request the lines cannot
carry (a job with a user, env_file or limits, which need the setup helper before the
gate; a value with a newline; more than fits in the pipe at once) is spawned as usual.
Until adopted the child has run nothing: closing its gate ends it (exit 125), and so
does the loop's death (EOF), as for any gated child.
"""

from __future__ import annotations

import os
import re
import select
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cronctl.proc.fds import close_all
from cronctl.proc.gate import GATE_NAME, GATE_SCRIPT, GATE_SHELL
from cronctl.proc.guard import Guard
from cronctl.proc.spawn import GatedChild

# Its own names start with "_cronctl_": a job's environment cannot clash with them by accident.
WARM_SCRIPT = (
    "_cronctl_c= _cronctl_m=\n"
    "set --\n"
    "while IFS= read -r _cronctl_l <&3; do\n"
    "  case $_cronctl_l in\n"
    "    go) break ;;\n"
    '    "E "*) export "${_cronctl_l#E }" ;;\n'
    '    "U "*) unset "${_cronctl_l#U }" ;;\n'
    '    "D "*) cd -- "${_cronctl_l#D }" || exit 121 ;;\n'
    '    "C "*) _cronctl_m=c; _cronctl_c="$_cronctl_c${_cronctl_l#C }\n" ;;\n'
    '    "A "*) _cronctl_m=a; set -- "$@" "${_cronctl_l#A }" ;;\n'
    "    *) exit 125 ;;\n"
    "  esac\n"
    "done\n"
    "exec 3<&-\n"
    '[ "$_cronctl_l" = go ] || exit 125\n'
    'if [ "$_cronctl_m" = c ]; then eval "unset _cronctl_l _cronctl_c _cronctl_m; $_cronctl_c"; exit; fi\n'
    "unset _cronctl_l _cronctl_c _cronctl_m\n"
    'exec "$@"\n'
)
WARM_ARGV = (GATE_SHELL, "-c", WARM_SCRIPT, GATE_NAME)
# What one write to an empty pipe takes without blocking (Linux: 16 pages), with room to spare.
MAX_PREFACE = 60_000
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(eq=False)
class WarmChild:
    """A gated warm shell and its guard (made for `kill_grace`), not yet any run's."""

    child: GatedChild  # its log_fd is a placeholder (/dev/null) until adoption
    guard: Guard
    kill_grace: float
    base_env: Mapping[str, str]  # the environment it was spawned with

    def exited(self) -> bool:
        """Whether it has died (a pidfd reads as ready once its process has exited)."""
        poller = select.poll()
        poller.register(self.child.pidfd, select.POLLIN)
        return bool(poller.poll(0))

    def adopt(self, log_fd: int, lines: Preface, now: float) -> GatedChild:
        """Hand it the run's directory now; the caller tracks the child returned, with its real
        log, and has its gate write the rest of the lines just before "go"."""
        if lines.now:
            os.write(self.child.gate_fd, lines.now)
        close_all([self.child.log_fd])
        return replace(self.child, log_fd=log_fd, spawned_mono=now)

    def discard(self) -> None:
        """End it and its guard: nothing of any run has begun in it. Through its pidfd, never
        its bare pid: a subreaper's sweep may have reaped it already, and the pid been reused."""
        child = self.child
        close_all([child.gate_fd])  # EOF at the gate: it exits 125 by itself
        try:
            signal.pidfd_send_signal(child.pidfd, signal.SIGKILL)
            os.waitid(os.P_PIDFD, child.pidfd, os.WEXITED)
        except OSError:
            pass  # already gone, or reaped by the orphan sweep
        close_all([child.pidfd, child.out_fd, child.log_fd])
        self.guard.end()


@dataclass(frozen=True)
class Preface:
    """The lines for a warm child: `now` at adoption (its directory: a vanished one is a run
    never started), `at_open` in the same write as "go" (20 children woken at adoption would
    read their lines, a syscall a byte, while the loop writes their dispatch to the store)."""

    now: bytes
    at_open: bytes


def preface(env: Mapping[str, str], base_env: Mapping[str, str], gated: Sequence[str]) -> Preface | None:
    """The lines that make a warm child spawned with `base_env` into the gated child `gated`
    (the argv preflight gave, GATE_SCRIPT's) with `env`; None if they cannot say it."""
    if len(gated) < 6 or tuple(gated[:4]) != (GATE_SHELL, "-c", GATE_SCRIPT, GATE_NAME):
        return None  # a setup helper runs before the gate: not for a warm child
    unset = [key for key in base_env if key not in env]
    changed = [key for key, value in env.items() if base_env.get(key) != value]
    if not all(_sayable(key) for key in [*unset, *changed]):
        return None
    cwd, tail = gated[4], list(gated[5:])
    lines = [f"D {cwd}"] if cwd else []
    lines += [f"U {key}" for key in unset] + [f"E {key}={env[key]}" for key in changed]
    if tail[0] == "-c" and len(tail) == 2:
        if tail[1].endswith("\\"):
            return None  # the newline each C line adds would continue it
        lines += [f"C {line}" for line in tail[1].split("\n")]
    else:
        lines += [f"A {arg}" for arg in tail]
    lines.append("")
    if any("\n" in line or "\0" in line for line in lines):
        return None
    data = "\n".join(lines).encode("utf-8", "surrogateescape")
    if len(data) > MAX_PREFACE:
        return None
    split = data.index(b"\n") + 1 if cwd else 0
    return Preface(data[:split], data[split:])


def _sayable(key: str) -> bool:
    return bool(_NAME.match(key)) and not key.startswith("_cronctl_")


def warm_log_placeholder() -> int:
    """What a warm child's log fd is until a run adopts it."""
    return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
