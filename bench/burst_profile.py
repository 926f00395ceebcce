"""Where the CPU goes while a burst of children starts (bench/pg_cluster.py --profile).

From an instant until its p99 child has started, are the cores busy with the children,
or with the loops and the server around them? At a few fixed moments after each instant
(OFFSETS; a handful of /proc reads each, so the profile barely adds to what it measures)
a thread reads cumulative counters: the CPU of every thread of every loop process and of
every PostgreSQL server process (nanoseconds, /proc/PID/task/TID/schedstat), and the
machine's busy time (/proc/stat). The row of an instant compares the snapshot taken at
the instant with the last one taken at or before its p99 start:

    busy    CPU the machine spent (all cores) over that span
    loops   of it, the cronctl loops' (every thread)
    server  of it, PostgreSQL's
    rest    busy - loops - server: the children starting, and anything else on the machine

The snapshots are taken late when the cores are busy (the sampling thread waits its turn
like any other), which is why each row says over which span it was measured.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OFFSETS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.8)
_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Snapshot:
    at: float  # time.time() when read
    loops_ns: int
    server_ns: int
    busy_ns: int


def process_ns(pid: int) -> int:
    """CPU nanoseconds of every live thread of a process (0 once it is gone)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
                total += int(handle.read().split()[0])
        except (OSError, IndexError, ValueError):
            pass
    return total


def machine_busy_ns() -> int:
    """Time every core has spent neither idle nor waiting for I/O, from /proc/stat."""
    with open("/proc/stat", "rb") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) * _TICK_NS


def server_pids(data_dir: Path) -> list[int]:
    """The postmaster of a server (its postmaster.pid) and its children: backends and workers."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _parent(int(entry)) == postmaster:
            pids.append(int(entry))
    return pids


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return int(data[data.rindex(b")") + 2:].split()[1])


def snapshot(loops: Sequence[int], server: Sequence[int]) -> Snapshot:
    return Snapshot(time.time(), sum(process_ns(pid) for pid in loops), sum(process_ns(pid) for pid in server),
                    machine_busy_ns())


class BurstProfiler:
    """Snapshots at OFFSETS after each instant, from a thread of its own."""

    def __init__(self, loops: Sequence[int], server: Sequence[int]) -> None:
        self._loops, self._server = list(loops), list(server)
        self.snapshots: dict[float, list[Snapshot]] = {}
        self._thread: threading.Thread | None = None

    def watch(self, instants: Sequence[float]) -> None:
        self._thread = threading.Thread(target=self._run, args=(list(instants),), daemon=True)
        self._thread.start()

    def _run(self, instants: list[float]) -> None:
        for instant in instants:
            taken = self.snapshots.setdefault(instant, [])
            for offset in OFFSETS:
                time.sleep(max(0.0, instant + offset - time.time()))
                taken.append(snapshot(self._loops, self._server))

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def rows(self, starts: Sequence[float]) -> list[dict[str, Any]]:
        """One row per instant (see the module's docstring); `starts`: every child's start time."""
        out = []
        for instant, taken in self.snapshots.items():
            late = sorted(t - instant for t in starts if instant <= t < instant + 5.0)
            if not late or len(taken) < 2:
                continue
            p99 = late[max(0, min(len(late), int(round(0.99 * len(late) + 0.5))) - 1)]
            first = taken[0]
            last = max((s for s in taken[1:] if s.at <= instant + p99), key=lambda s: s.at, default=taken[1])
            busy, loops, server = (last.busy_ns - first.busy_ns, last.loops_ns - first.loops_ns,
                                   last.server_ns - first.server_ns)
            out.append({"p99_ms": p99 * 1000, "from_ms": (first.at - instant) * 1000,
                        "to_ms": (last.at - instant) * 1000, "busy_ms": busy / 1e6, "loops_ms": loops / 1e6,
                        "server_ms": server / 1e6, "rest_ms": (busy - loops - server) / 1e6})
        return out
