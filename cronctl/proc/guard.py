"""A run's guard: its process group ends when the process that supervises it dies (SPEC §9).

A loop killed by kill -9 or the OOM killer leaves its children running; on one host a
restarted loop or a standby reclaims them (owner_dead) and kills them, but when nothing
restarts, another host reclaims the run at lease + 5 s and starts the job again while
the old copy still runs. So every run gets a guard: a small shell (a few hundred KiB,
about 1 ms to start) in a session of its own, blocked reading the loop's *lifeline*, a
pipe whose only writer is the loop process. It never reads anything: the read returns
when the loop is gone, however it went (the kernel closes a dead process's fds). Then
the guard sends SIGTERM to the run's process group, waits up to the run's kill_grace,
and sends SIGKILL: the run is over within kill_grace (+ a fraction of a second).

The guard holds no pipe of the run and carries no CRONCTL_RUN_ID, so the run's own
end (its output drain, its leftovers scan) never waits for it or kills it; the
supervisor ends it (SIGKILL through a pidfd, reaped through the same pidfd) once the
run's result is known. A gated child whose loop died reads EOF at its gate and exits
without running anything; its guard then finds nothing to end.

Before signalling, the guard checks that the group's number still names the run: if a
process with the leader's pid exists, its start time (clock ticks, /proc/PID/stat field
22) must be the leader's; if none does, the number cannot have been reused while any
member of the group lives, and `kill -0 -PGID` finds no one otherwise.

Adoption: a loop's new generation (the watchdog's restart of its tick thread) is the
same process and keeps the lifeline, so its runs and their guards carry on. A new loop
process never adopts a dead one's children: it reclaims their runs as lost (owner_dead)
and kills what is left of them, which the guard has usually done already.
"""

from __future__ import annotations

import errno
import math
import os
import signal
import threading
from dataclasses import dataclass

from cronctl.proc.fds import GATE_FD, close_all, pipe
from cronctl.proc.identity import stat_fields

GUARD_SHELL = "/bin/sh"
GUARD_NAME = "cronctl-guard"
# $1: the process group (the run's leader pid); $2: the leader's start time in clock ticks;
# $3: kill_grace in tenths of a second. fd 3: the lifeline.
GUARD_SCRIPT = (
    "trap '' TERM INT HUP QUIT\n"
    f"IFS= read -r line <&{GATE_FD}\n"
    "pg=$1 ticks=$2 grace=$3\n"
    'if [ -r "/proc/$pg/stat" ]; then\n'
    '  IFS= read -r st < "/proc/$pg/stat" || st=\n'
    '  st=${st##*) }\n'
    "  set -- $st\n"
    '  [ "${20}" = "$ticks" ] || exit 0\n'
    "fi\n"
    'kill -TERM -"$pg" 2>/dev/null || exit 0\n'
    "waited=0\n"
    'while kill -0 -"$pg" 2>/dev/null; do\n'
    '  if [ "$waited" -ge "$grace" ]; then kill -KILL -"$pg" 2>/dev/null; exit 0; fi\n'
    # Tenths for the first second (most jobs end at once), then whole seconds: few forks.
    '  if [ "$waited" -lt 10 ] || [ $((grace - waited)) -lt 10 ]; then sleep 0.1; waited=$((waited + 1));\n'
    "  else sleep 1; waited=$((waited + 10)); fi\n"
    "done\n"
)
_GUARD_ENV = {"PATH": "/usr/bin:/bin"}

_lifeline_lock = threading.Lock()
_lifeline: tuple[int, int] | None = None  # (read end, write end), both close-on-exec, kept for life


def lifeline_reader() -> int:
    """The read end of this process's lifeline; its write end stays open until the process dies."""
    global _lifeline
    with _lifeline_lock:
        if _lifeline is None:
            _lifeline = pipe()
        return _lifeline[0]


@dataclass(eq=False)
class Guard:
    """One run's guard process, ended by the supervisor once the run has ended."""

    pid: int
    pidfd: int | None

    def end(self) -> None:
        """SIGKILL and reap the guard through its pidfd (never a pid that may be reused).

        Never raises: it runs where a run's result is delivered, which nothing may stop."""
        pidfd, self.pidfd = self.pidfd, None
        if pidfd is None:
            return
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
        except OSError:
            pass  # already reaped (a subreaper's sweep of orphans) or gone
        finally:
            close_all([pidfd])


def start_guard(leader_pid: int, kill_grace: float) -> Guard:
    """A guard for the process group led by `leader_pid` (alive, or at least unreaped).

    OSError when it cannot be started (no processes or fds left): the caller gives the
    run up rather than run it unguarded.
    """
    fields = stat_fields(leader_pid)
    if fields is None or len(fields) < 20:
        raise OSError(errno.ESRCH, f"process {leader_pid} vanished before its guard started")
    tenths = max(1, math.ceil(kill_grace * 10))
    argv = [GUARD_SHELL, "-c", GUARD_SCRIPT, GUARD_NAME, str(leader_pid), fields[19].decode(), str(tenths)]
    actions = [
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
        (os.POSIX_SPAWN_DUP2, 1, 2),
        (os.POSIX_SPAWN_DUP2, lifeline_reader(), GATE_FD),
    ]
    pid = os.posix_spawn(GUARD_SHELL, argv, _GUARD_ENV, file_actions=actions, setsid=True,
                         setsigdef=(signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE))
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        os.kill(pid, signal.SIGKILL)  # our unreaped child: its pid cannot have been reused
        os.waitpid(pid, 0)
        raise
    return Guard(pid, pidfd)
