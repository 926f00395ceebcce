"""Processes left running, for bench/pg_chaos.py: a run's process that outlives its run.

Every process of a chaos run carries the bench's LEDGER (the jobs' env) and its run's
CRONCTL_RUN_ID; the loops pass CHAOS_HOST on to them, so each names the host that spawned
it. A process is *suspect* when its run is not live in the store (not `claimed` nor
`running`: it ended, or another host reclaimed it), or when its host's loop has been dead
(kill -9, not restarted) for longer than the jobs' kill_grace plus a second: the run's
guard must have ended it by then. A child still blocked at its gate (cronctl/proc/gate.py:
fd 3 open) has run nothing of its job and its run has no row yet while its claim is held
ahead of the slot: it is judged by the second rule alone (its gate reads EOF when its loop
dies), and by the final check. A suspect still there, the same process (pid and start
time), at a scan SETTLE_S or more after the first that saw it is *left running*: a process
in the middle of its exit when the store recorded the end is not.

Scans are cheap (one pass over /proc, one query when any process matches), so the bench
runs one after every action; `final` waits for every process to end once the loops are
stopped, and `kill_all` cleans up whatever is left.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from cronctl.proc.fds import GATE_FD
from cronctl.proc.gate import GATE_SCRIPT

SETTLE_S = 3.0
LIVE_STATES = ("claimed", "running")


@dataclass(frozen=True)
class Proc:
    pid: int
    ticks: str  # start time (/proc/PID/stat field 22): the same pid, the same process
    run_id: str
    job: str
    host: str
    command: str
    at_gate: bool  # blocked on its gate: nothing of the job ran


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {key.decode(errors="replace"): value.decode(errors="replace") for key, value in pairs}


def _stat(pid: int) -> tuple[str, str]:
    """(state letter, start ticks) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], fields[19]


def processes(ledger: str) -> Iterator[Proc]:
    """Every living (not zombie) process of this bench's runs."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            env = _environ(pid)
            if env.get("LEDGER") != ledger or "CRONCTL_RUN_ID" not in env:
                continue
            state, ticks = _stat(pid)
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            at_gate = GATE_SCRIPT in argv and os.path.lexists(f"/proc/{pid}/fd/{GATE_FD}")
        except (OSError, IndexError):
            continue  # gone, or not ours to read
        if state not in ("Z", "X"):
            shown = " ".join(arg for arg in argv if arg != GATE_SCRIPT).strip()[:160]
            yield Proc(pid, ticks, env["CRONCTL_RUN_ID"], env.get("CRONCTL_JOB", "?"), env.get("CHAOS_HOST", "?"),
                       shown, at_gate)


@dataclass
class Leftovers:
    url: str  # the database itself, not a loop's proxy
    ledger: str
    dead_since: Callable[[str], float | None]  # host name -> when its loop was killed, if it is down
    grace_s: float
    first_seen: dict[Proc, float] = field(default_factory=dict)
    found: dict[Proc, str] = field(default_factory=dict)  # left running -> why
    scans: int = 0

    def scan(self) -> None:
        now = time.monotonic()
        procs = list(processes(self.ledger))
        self.scans += 1
        states = self._states({proc.run_id for proc in procs}) if procs else {}
        if states is None:
            return  # the database is restarting: the next scan judges
        suspects = {}
        for proc in procs:
            why = self._why(proc, states.get(proc.run_id), now)
            if why:
                suspects[proc] = why
        self.first_seen = {proc: self.first_seen.get(proc, now) for proc in suspects}
        for proc, why in suspects.items():
            if now - self.first_seen[proc] >= SETTLE_S and proc not in self.found:
                self.found[proc] = why

    def _why(self, proc: Proc, state: str | None, now: float) -> str:
        if state not in LIVE_STATES and not proc.at_gate:
            return f"run {state or 'unknown'} in the store"
        since = self.dead_since(proc.host)
        if since is not None and now - since > self.grace_s + 1.0:
            return f"loop {proc.host} dead for {now - since:.1f} s"
        return ""

    def _states(self, run_ids: set[str]) -> dict[str, str] | None:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute("SELECT run_id, state FROM cronctl_runs WHERE run_id = ANY(%s)",
                                    (sorted(run_ids),)).fetchall()
        except psycopg.Error:
            return None
        return {str(run_id): str(state) for run_id, state in rows}

    def final(self, wait_s: float = 10.0) -> None:
        """Once every loop is stopped no process of a run may remain: wait_s for stragglers."""
        deadline = time.monotonic() + wait_s
        while (left := list(processes(self.ledger))) and time.monotonic() < deadline:
            time.sleep(0.2)
        for proc in left:
            self.found.setdefault(proc, "alive after every loop stopped")

    def report(self) -> list[str]:
        return [f"pid {proc.pid} {proc.job} run {proc.run_id} host {proc.host}{' at its gate' * proc.at_gate}"
                f" ({why}): {proc.command}"
                for proc, why in self.found.items()]

    def kill_all(self) -> None:
        for proc in processes(self.ledger):
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
