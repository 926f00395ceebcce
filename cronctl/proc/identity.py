"""Process identity and killing, shared by the runner and the healer.

A process is identified by its pid *and* its start time: pids are reused, so a
bare pid read from the store may name an unrelated process by the time we act
on it. Every signal sent from here goes through a pidfd opened *before* the
identity is re-checked, which makes "never signal a process that merely reuses
a run's pid" (SPEC §6) hold without a race for single processes.

Finding the processes of a run uses three independent clues, because each one
alone can be escaped:

- the descendants of the run's root process (lost as soon as the root dies and
  its children are reparented),
- the root's session and process group (left by `setsid`),
- ``CRONCTL_RUN_ID=<run_id>`` in the initial environment (survives both, lost
  only by a process that clears its environment *and* leaves the session).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

RUN_ID_VAR = "CRONCTL_RUN_ID"
START_TIME_TOLERANCE = 0.05
_PR_SET_CHILD_SUBREAPER = 36
# How often terminate_run() looks again at processes it is waiting for.
_POLL_INTERVAL = 0.05
# After SIGKILL a process needs the kernel only; this bounds the wait for it.
_KILL_SETTLE = 2.0


@dataclass(frozen=True)
class ProcIdentity:
    pid: int
    start_time: float  # psutil create_time(): seconds since the epoch


@dataclass(frozen=True)
class KillReport:
    terminated: int  # ended after SIGTERM, within the grace
    killed: int  # still there after the grace, sent SIGKILL
    elapsed: float


def identify(pid: int) -> ProcIdentity | None:
    """The pid and start time of a live (or zombie) process, None when there is none.

    Read from /proc/<pid>/stat with psutil's own formula (start ticks / CLK_TCK +
    boot time), so the value equals psutil's create_time(); psutil.Process() itself
    costs about 1.5 ms here (it reads /proc/stat whole), which made spawning 500
    gated children take a second longer.
    """
    found = _stat_start(pid)
    return None if found is None else ProcIdentity(pid, found[1])


def is_alive(ident: ProcIdentity) -> bool:
    """True only for the very process `ident` names, and only while it runs.

    A zombie has finished running; it merely waits for its parent to reap it.
    """
    found = _stat_start(ident.pid)
    if found is None or abs(found[1] - ident.start_time) > START_TIME_TOLERANCE:
        return False
    return found[0] != "Z"


_CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
# /proc/stat's btime moves when the wall clock is stepped; psutil reads it on every
# call. Re-read at most this often.
_BOOT_TIME_TTL = 1.0
_boot_time_cache: tuple[float, float] = (float("-inf"), 0.0)


def _boot_time() -> float:
    global _boot_time_cache
    now = time.monotonic()
    read_at, value = _boot_time_cache
    if now - read_at < _BOOT_TIME_TTL:
        return value
    with open("/proc/stat", "rb") as handle:
        for line in handle:
            if line.startswith(b"btime"):
                value = float(line.split()[1])
                break
    _boot_time_cache = (now, value)
    return value


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses; it ends at the last ")".
    return data[data.rindex(b")") + 2 :].split()


def _stat_start(pid: int) -> tuple[str, float] | None:
    """(state letter, start time) of a pid, or None if there is no such process."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return fields[0].decode(), float(fields[19]) / _CLK_TCK + _boot_time()


_boot_id: str | None = None


def boot_id() -> str:
    """This boot's id; read once, since it cannot change while this process lives."""
    global _boot_id
    if _boot_id is None:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            _boot_id = f.read().strip()
    return _boot_id


def set_child_subreaper() -> bool:
    """Make orphaned descendants reparent to this process instead of init.

    Then a job's escaped grandchildren stay our children: we see them die and
    must reap them (the runner does, in subreaper mode).
    """
    import ctypes  # here: only the loop needs it, and read commands start faster without

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


# --- finding the processes of a run -------------------------------------


@dataclass(frozen=True)
class _Stat:
    state: str
    ppid: int
    pgid: int
    sid: int


def _read_stat(pid: int) -> _Stat | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return _Stat(fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]))


def _read_environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:  # gone, or another user's process we may not read
        return b""


def _env_run_id(environ: bytes) -> str | None:
    marker = RUN_ID_VAR.encode() + b"="
    if marker not in environ:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(marker):
            return entry[len(marker) :].decode(errors="replace")
    return None


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _root_still_owns_its_ids(root: ProcIdentity) -> bool:
    """Whether processes with sid/pgid == root.pid belong to root's session.

    The kernel keeps a pid number allocated while a session or group of that
    id has members, so the number can only name a newer session once root's
    own session is empty; that shows as another process holding the pid.
    """
    current = identify(root.pid)
    return current is None or abs(current.start_time - root.start_time) <= START_TIME_TOLERANCE


def _verified(pid: int, still_matches: Callable[[], bool]) -> psutil.Process | None:
    """A Process for `pid` whose identity is fixed *before* the clue is re-read.

    Reading the clue again after capturing the start time, then checking the
    start time once more, proves the clue belonged to that very process.
    """
    import psutil  # here, not at the top: `status` and the idle loop never need it

    try:
        proc = psutil.Process(pid)
        if not still_matches() or not proc.is_running():
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def snapshot_runs(roots: Mapping[str, ProcIdentity | None]) -> dict[str, list[psutil.Process]]:
    """The live processes of several runs, from one pass over /proc.

    One pass for many runs keeps the cost flat when hundreds of runs end or
    are killed at the same moment.
    """
    me = os.getpid()
    stats: dict[int, _Stat] = {}
    env_hits: dict[int, str] = {}
    for pid in _all_pids():
        if pid == me:
            continue
        st = _read_stat(pid)
        if st is None or st.state == "Z":
            continue
        stats[pid] = st
        carried = _env_run_id(_read_environ(pid))
        if carried is not None and carried in roots:
            env_hits[pid] = carried

    children: dict[int, list[int]] = {}
    for pid, st in stats.items():
        children.setdefault(st.ppid, []).append(pid)

    found: dict[str, dict[int, psutil.Process]] = {run_id: {} for run_id in roots}
    for pid, run_id in env_hits.items():
        proc = _verified(pid, partial(_carries, pid, run_id))
        if proc is not None:
            found[run_id][pid] = proc
    for run_id, root in roots.items():
        if root is not None:
            found[run_id].update(_root_family(root, stats, children, found[run_id]))
    return {run_id: list(procs.values()) for run_id, procs in found.items()}


def _root_family(
    root: ProcIdentity,
    stats: Mapping[int, _Stat],
    children: Mapping[int, list[int]],
    known: Mapping[int, psutil.Process],
) -> dict[int, psutil.Process]:
    family: dict[int, psutil.Process] = {}
    if is_alive(root):
        proc = _verified(root.pid, lambda: True)
        if proc is not None and abs(proc.create_time() - root.start_time) <= START_TIME_TOLERANCE:
            family[root.pid] = proc
            family.update(_descendants(root, children, known))
    if _root_still_owns_its_ids(root):
        for pid, st in stats.items():
            if pid in known or pid in family or root.pid not in (st.sid, st.pgid):
                continue
            proc = _verified(pid, partial(_in_root_ids, pid, root.pid))
            if proc is not None:
                family[pid] = proc
    return family


def _in_root_ids(pid: int, root_pid: int) -> bool:
    st = _read_stat(pid)
    return st is not None and root_pid in (st.sid, st.pgid)


def _descendants(
    root: ProcIdentity, children: Mapping[int, list[int]], known: Mapping[int, psutil.Process]
) -> dict[int, psutil.Process]:
    found: dict[int, psutil.Process] = {}
    stack = [(root.pid, child) for child in children.get(root.pid, [])]
    while stack:
        parent, pid = stack.pop()
        if pid in known or pid in found:
            continue
        proc = _verified(pid, partial(_has_parent, pid, parent))
        # A descendant can never be older than the root it descends from.
        if proc is None or proc.create_time() < root.start_time - START_TIME_TOLERANCE:
            continue
        found[pid] = proc
        stack.extend((pid, child) for child in children.get(pid, []))
    return found


def _has_parent(pid: int, parent: int) -> bool:
    st = _read_stat(pid)
    return st is not None and st.ppid == parent


def _carries(pid: int, run_id: str) -> bool:
    return _env_run_id(_read_environ(pid)) == run_id


def find_run_processes(run_id: str, root: ProcIdentity | None = None) -> list[psutil.Process]:
    """The root if alive, its descendants, its session, and every process
    whose environment carries CRONCTL_RUN_ID=run_id; each verified, deduped."""
    return snapshot_runs({run_id: root})[run_id]


# --- signalling ----------------------------------------------------------


def _signal_verified(proc: psutil.Process, sig: int) -> bool:
    """Signal `proc` only if the pid still names it, without a reuse race.

    The pidfd is opened first and the identity checked after: if the check
    passes, the pidfd refers to that process and cannot be redirected.
    """
    import psutil

    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return False
    except OSError:
        # Out of fds: psutil checks the identity just before kill(2), which
        # leaves a window of microseconds; better than not signalling at all.
        try:
            proc.send_signal(sig)
            return True
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
    try:
        if not proc.is_running():
            return False
        signal.pidfd_send_signal(pidfd, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        os.close(pidfd)


def _verified_pgid(proc: psutil.Process) -> int | None:
    try:
        pgid = os.getpgid(proc.pid)
    except OSError:
        return None
    return pgid if proc.is_running() else None


def _is_live(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


class Termination:
    """The SIGTERM → grace → SIGKILL of one run, in steps.

    terminate_run() drives it with sleeps; the runner's single thread drives
    many at once from its event loop with deadlines, so no kill blocks it.
    """

    def __init__(self, processes: Iterable[psutil.Process], group_leaders: Iterable[int] = ()) -> None:
        self._procs: dict[int, psutil.Process] = {}
        self._leaders = {pid for pid in group_leaders if pid > 1}
        self._sig: int | None = None
        self.killed = 0
        self.add(processes)

    @property
    def found(self) -> int:
        return len(self._procs)

    def add(self, processes: Iterable[psutil.Process]) -> int:
        """Track more processes; they get the signal already sent. Returns how many were new."""
        new = [p for p in processes if p.pid not in self._procs or self._procs[p.pid] != p]
        for proc in new:
            self._procs[proc.pid] = proc
            # A group led by a process of the run is the run's own group.
            self._leaders.add(proc.pid)
        if new and self._sig is not None:
            self._send(self._sig, new)
            if self._sig == signal.SIGKILL:
                self.killed += len(new)
        return len(new)

    def send_term(self) -> None:
        self._sig = signal.SIGTERM
        self._send(signal.SIGTERM, list(self._procs.values()))

    def survivors(self) -> list[psutil.Process]:
        return [p for p in self._procs.values() if _is_live(p)]

    def send_kill(self) -> int:
        """SIGKILL every survivor; returns how many there were."""
        survivors = self.survivors()
        self._sig = signal.SIGKILL
        self._send(signal.SIGKILL, survivors)
        self.killed += len(survivors)
        return len(survivors)

    def _send(self, sig: int, targets: list[psutil.Process]) -> None:
        # The group first: it also reaches members forked after our snapshot.
        own_group = os.getpgrp()
        signalled: set[int] = set()
        for proc in targets:
            pgid = _verified_pgid(proc)
            if pgid is None or pgid in signalled or pgid == own_group or pgid not in self._leaders:
                continue
            signalled.add(pgid)
            try:
                os.killpg(pgid, sig)
            except OSError:
                pass
        for proc in targets:
            _signal_verified(proc, sig)


def terminate_run(
    run_id: str,
    root: ProcIdentity | None,
    grace: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> KillReport:
    """SIGTERM every process of the run, wait up to `grace`, SIGKILL the rest.

    The snapshot is taken before any signal, while the tree is still intact:
    once the root dies its children are reparented and only the session and
    environment clues remain.
    """
    began = time.monotonic()
    leaders = [root.pid] if root is not None else []
    term = Termination(find_run_processes(run_id, root), leaders)
    term.send_term()
    _wait_for_exit(term, run_id, root, grace, sleep, began)
    if term.survivors():
        term.add(find_run_processes(run_id, root))
        term.send_kill()
        _wait_for_exit(term, run_id, root, _KILL_SETTLE, sleep, time.monotonic())
    return KillReport(term.found - term.killed, term.killed, time.monotonic() - began)


def _wait_for_exit(
    term: Termination,
    run_id: str,
    root: ProcIdentity | None,
    limit: float,
    sleep: Callable[[float], None],
    began: float,
) -> None:
    # Slept time is counted as well as real time, so an injected sleep that
    # does not advance the clock still ends the wait.
    slept = 0.0
    while max(slept, time.monotonic() - began) < limit:
        if not term.survivors():
            # Something may have been forked during the grace: look once more.
            if not term.add(find_run_processes(run_id, root)):
                return
            continue
        step = min(_POLL_INTERVAL, max(0.0, limit - slept))
        sleep(step)
        slept += step
