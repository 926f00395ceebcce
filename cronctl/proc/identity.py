"""Process identity: a pid together with its start time, safe against pid reuse.

A process is identified by its pid *and* its start time: pids are reused, so a
bare pid read from the store may name an unrelated process by the time we act
on it. Every signal sent by proc.kill goes through a pidfd opened *before* the
identity is re-checked, which makes "never signal a process that merely reuses
a run's pid" (SPEC §6) hold without a race for single processes.

Also here, because they too answer "which process is this, on which boot":
this boot's id, and becoming a child subreaper.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

START_TIME_TOLERANCE = 0.05
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


@dataclass(frozen=True)
class ProcIdentity:
    pid: int
    start_time: float  # psutil create_time(): seconds since the epoch


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
_first_boot_time: float | None = None  # the first btime this process read (ticks_since_boot)


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
    global _first_boot_time
    if _first_boot_time is None:
        _first_boot_time = value
    return value


def ticks_since_boot(start_time: float) -> float | None:
    """A start time this process took with `identify`, in clock ticks since boot (/proc/<pid>/stat's
    field 22), give or take a second; None if the wall clock was stepped since this process first
    read the boot time (btime moves with it: the start time was then taken on another scale)."""
    boot = _boot_time()
    if _first_boot_time is None or abs(boot - _first_boot_time) > 1.0:
        return None
    return (start_time - boot) * _CLK_TCK


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/<pid>/stat after the command name (state first), or None."""
    if pid <= 0:
        return None
    data = read_proc(f"/proc/{pid}/stat", whole=False)
    if not data:
        return None
    # The command name may contain spaces and parentheses; it ends at the last ")".
    return data[data.rindex(b")") + 2 :].split()


def read_proc(path: str, whole: bool = True) -> bytes:
    """A /proc file's bytes (b"" when it cannot be read: gone, or another user's), with bare os
    calls: a leftovers pass reads a file or two per process on the machine, and Python's
    buffered open() cost most of a chain hop's pass (2.4 ms for 140 processes; issue 22).
    `whole=False`: one read (a stat line, made whole by its first read), not a second one to
    see its end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        if not whole:
            return os.read(fd, 4096)
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


def _stat_start(pid: int) -> tuple[str, float] | None:
    """(state letter, start time) of a pid, or None if there is no such process."""
    fields = stat_fields(pid)
    if fields is None:
        return None
    return fields[0].decode(), float(fields[19]) / _CLK_TCK + _boot_time()


_boot_id: str | None = None


def boot_id() -> str:
    """This boot's id; read once, since it cannot change while this process lives.

    $CRONCTL_BOOT_ID overrides it (SPEC §9: containers, tests that play several hosts on
    one machine), so every owner check of this process agrees with what it records.
    """
    global _boot_id
    if _boot_id is None:
        override = os.environ.get("CRONCTL_BOOT_ID", "").strip()
        if override:
            _boot_id = override
        else:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
                _boot_id = f.read().strip()
    return _boot_id


def set_child_subreaper(on: bool = True) -> bool:
    """Make orphaned descendants reparent to this process instead of init (or stop it).

    Then a job's escaped grandchildren stay our children: we see them die and
    must reap them (the runner does, in subreaper mode).
    """
    import ctypes  # here: only the loop needs it, and read commands start faster without

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def is_child_subreaper() -> bool:
    """Whether this process is a child subreaper now (False when it cannot be told)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        ok = libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
        return ok and flag.value != 0
    except (OSError, AttributeError):
        return False
