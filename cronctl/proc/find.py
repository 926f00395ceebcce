"""Finding the processes of a run, from one pass over /proc.

Finding the processes of a run uses three independent clues, because each one
alone can be escaped:

- the descendants of the run's root process (lost as soon as the root dies and
  its children are reparented),
- the root's session and process group (left by `setsid`),
- ``CRONCTL_RUN_ID=<run_id>`` in the initial environment (survives both, lost
  only by a process that clears its environment *and* leaves the session), read
  only of processes started since the run's root (all the run can have forked).

Each process found is verified: its identity is fixed before its clue is read
again, so a pid reused meanwhile is never taken for a member of the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from cronctl.proc.identity import (
    START_TIME_TOLERANCE,
    ProcIdentity,
    identify,
    is_alive,
    read_proc,
    stat_fields,
    ticks_since_boot,
)

if TYPE_CHECKING:
    import psutil

RUN_ID_VAR = "CRONCTL_RUN_ID"


@dataclass(frozen=True)
class _Stat:
    state: str
    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks since boot


def _read_stat(pid: int) -> _Stat | None:
    fields = stat_fields(pid)
    if fields is None:
        return None
    return _Stat(fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))


def _read_environ(pid: int) -> bytes:
    return read_proc(f"/proc/{pid}/environ")  # b"": gone, or another user's process we may not read


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


def snapshot_runs(roots: Mapping[str, ProcIdentity | None],
                  own_roots: bool = False) -> dict[str, list[psutil.Process]]:
    """The live processes of several runs, from one pass over /proc.

    One pass for many runs keeps the cost flat when hundreds of runs end or
    are killed at the same moment. `own_roots`: every root was identified by this
    process (the supervisor's runs), so the environments read can be fewer (_born_since).
    """
    me = os.getpid()
    stats: dict[int, _Stat] = {}
    env_hits: dict[int, str] = {}
    born = _born_since(roots) if own_roots else None
    for pid in _all_pids():
        if pid == me:
            continue
        st = _read_stat(pid)
        if st is None or st.state == "Z":
            continue
        stats[pid] = st
        if born is not None and st.start < born:
            continue  # older than every root: not forked by any of these runs, whatever it carries
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


def _born_since(roots: Mapping[str, ProcIdentity | None]) -> float | None:
    """The clock tick before which no process of these runs can have started (the oldest
    root's start, less a second); None: read every process's environment.

    The environment clue finds what a run forked and then lost track of (a daemon that left
    the session); every such process was forked after its run's root began, so only those
    need reading for it: a pass then no longer reads the environment of every process on the
    machine (1,159 of them: 15 ms a pass, and each chain hop waits for one; issue 22). Only
    for roots this process identified itself (`own_roots`): a start time read by another
    process may have been taken before a step of the wall clock, on another scale."""
    if not roots or any(root is None for root in roots.values()):
        return None
    oldest = min(root.start_time for root in roots.values() if root is not None)
    return ticks_since_boot(oldest - 1.0)


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
