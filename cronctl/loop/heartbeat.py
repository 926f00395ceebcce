"""The loop's heartbeat file: written by the loop every tick, read by everyone else.

The read side (`loop_status`, `heartbeat_age`) says what the loop is doing as another
process sees it: ok, stopped, dead, wedged, or cannot_write.

A full disk (or a read-only remount) makes the heartbeat write fail while the loop goes
on ticking; a reader must not take that silence for a hung loop. So the leader also owns
`heartbeat.tick`, a fixed-size record written once when it starts to lead, and overwritten
in place (no new blocks, no new inode: it still works on a full disk) on every tick whose
heartbeat write failed. A stale heartbeat beside a fresh tick record of the same process
means "alive and ticking, but cannot write", with the error it got.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cronctl.paths import Paths
from cronctl.store.locks import lock_holder
from cronctl.store.statefiles import read_json, write_json_atomic
from cronctl.timefmt import from_iso, to_iso

if TYPE_CHECKING:
    from cronctl.clock import Clock
    from cronctl.proc.identity import ProcIdentity

# A loop ticks at least once a second; this much silence means it is hung (or stopped by SIGSTOP).
HEARTBEAT_STALE_AFTER = 10.0
# The in-place tick record: always exactly this many bytes, so an overwrite allocates nothing.
TICK_RECORD_SIZE = 512
_TICK_ERROR_MAX = 300


def tick_path(paths: Paths) -> Path:
    return paths.home / "heartbeat.tick"


@dataclass(frozen=True)
class LoopStatus:
    state: str  # ok | stopped | dead | wedged | cannot_write
    reason: str
    pid: int | None = None
    generation: str | None = None
    heartbeat_age: float | None = None
    uptime: float | None = None
    started_at: str | None = None
    last_tick_at: str | None = None
    standby_pid: int | None = None
    active_runs: int | None = None

    @property
    def stale(self) -> bool:
        # cannot_write is stale too: the loop ticks, but what it does may not be recorded.
        return self.state in ("dead", "wedged", "cannot_write")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HeartbeatWriter:
    """What stays the same in every beat of one loop process; `write` adds what changes."""

    paths: Paths
    clock: Clock
    identity: ProcIdentity | None
    boot: str | None
    started_at: datetime
    file: Path | None

    def prepare(self) -> None:
        """Create the tick record at its full size; raises OSError when the home is not writable."""
        path = tick_path(self.paths)
        try:
            write_json_atomic(path, {})  # a fresh inode of our own, then its full size
            self._overwrite_tick(None)
        except OSError as exc:  # os.write names no file: say which one
            raise OSError(exc.errno, exc.strerror, str(path)) from exc

    def write(self, *, generation: str | None, ticks: int, active_runs: int, stopped_cleanly: bool) -> str | None:
        """Write the heartbeat; on failure, beat in the tick record instead and return what failed."""
        try:
            write_json_atomic(self.paths.heartbeat, {
                "pid": os.getpid(), "start_time": self.identity.start_time if self.identity else None,
                "boot_id": self.boot, "generation": generation, "started_at": to_iso(self.started_at),
                "last_tick_at": to_iso(self.clock.now()), "last_tick_mono": self.clock.monotonic(),
                "stopped_cleanly": stopped_cleanly, "ticks": ticks, "active_runs": active_runs,
                "file": str(self.file) if self.file else None,
            })
            return None
        except OSError as exc:
            problem = f"{self.paths.heartbeat.name}: {exc.strerror or exc}"
        try:
            self._overwrite_tick(problem)
        except OSError as exc:
            problem += f"; {tick_path(self.paths).name}: {exc.strerror or exc}"
        return problem

    def _overwrite_tick(self, error: str | None) -> None:
        record = json.dumps({
            "pid": os.getpid(), "start_time": self.identity.start_time if self.identity else None,
            "boot_id": self.boot, "mono": self.clock.monotonic(), "at": to_iso(self.clock.now()),
            "error": None if error is None else error[:_TICK_ERROR_MAX],
        }, sort_keys=True).encode()
        fd = os.open(tick_path(self.paths), os.O_WRONLY | os.O_CLOEXEC)  # never O_CREAT: no new inode
        try:
            os.pwrite(fd, record.ljust(TICK_RECORD_SIZE - 1) + b"\n", 0)
        finally:
            os.close(fd)


def fresh_tick(paths: Paths, ident: ProcIdentity, boot: str | None, within: float,
               monotonic: float) -> dict[str, Any] | None:
    """The tick record of this very process (pid, start time, boot) if it beat within `within` s.

    A record read while it is being overwritten does not parse: it counts as absent."""
    tick = read_json(tick_path(paths))
    if not tick or tick.get("pid") != ident.pid or tick.get("boot_id") != boot:
        return None
    if float(tick.get("start_time") or 0.0) != ident.start_time:  # both copied from the loop's identity
        return None
    return tick if monotonic - float(tick.get("mono") or 0.0) <= within else None


def heartbeat_age(hb: dict[str, Any], now: datetime, boot: str) -> float | None:
    """Seconds since the last tick: monotonic within one boot (immune to clock steps), else wall."""
    if hb.get("boot_id") == boot and hb.get("last_tick_mono") is not None:
        return max(0.0, time.monotonic() - float(hb["last_tick_mono"]))
    last = from_iso(hb.get("last_tick_at"))
    return None if last is None else max(0.0, (now - last).total_seconds())


def loop_status(paths: Paths, now: datetime) -> LoopStatus:
    from cronctl.proc.identity import ProcIdentity, boot_id, is_alive

    hb = read_json(paths.heartbeat)
    holder = lock_holder(paths) if paths.scheduler_lock.exists() else None
    standby = _live_standby(paths)
    if hb is None:
        if holder is not None:
            return LoopStatus("ok", "starting", pid=holder, standby_pid=standby)
        return LoopStatus("stopped", "no loop has run on this home yet ('cronctl run' starts one)",
                          standby_pid=standby)
    boot = boot_id()
    age = heartbeat_age(hb, now, boot)
    started = from_iso(hb.get("started_at"))
    common: dict[str, Any] = dict(pid=hb.get("pid"), generation=hb.get("generation"),
                  heartbeat_age=None if age is None else round(age, 3), started_at=hb.get("started_at"),
                  last_tick_at=hb.get("last_tick_at"), standby_pid=standby, active_runs=hb.get("active_runs"),
                  uptime=None if started is None else round((now - started).total_seconds(), 1))
    ident = ProcIdentity(int(hb.get("pid") or 0), float(hb.get("start_time") or 0.0))
    alive = hb.get("boot_id") == boot and bool(ident.pid) and is_alive(ident)
    if hb.get("stopped_cleanly") and not alive:
        return LoopStatus("stopped", "the loop was stopped cleanly ('cronctl run' starts it again)", **common)
    if not alive or holder != ident.pid:
        if holder is not None and holder != ident.pid:
            return LoopStatus("ok", "a new loop is starting", **{**common, "pid": holder})
        return LoopStatus("dead", "the loop died without stopping cleanly (killed or crashed); "
                          "start 'cronctl run' again — it reclaims what the old one left", **common)
    if age is not None and age > HEARTBEAT_STALE_AFTER:
        tick = fresh_tick(paths, ident, boot, HEARTBEAT_STALE_AFTER, time.monotonic())
        if tick is not None and tick.get("error"):
            return LoopStatus("cannot_write", f"the loop (pid {ident.pid}) is alive and ticking but cannot write "
                              f"its heartbeat ({tick['error']}); free space on the home's filesystem "
                              "('cronctl doctor' shows it): the loop needs no restart", **common)
        return LoopStatus("wedged", f"the loop (pid {ident.pid}) is alive but has not ticked for {age:.0f}s; "
                          "a --standby takes over, or kill it and start 'cronctl run' again", **common)
    return LoopStatus("ok", "ticking", **common)


def _live_standby(paths: Paths) -> int | None:
    from cronctl.proc.identity import ProcIdentity, is_alive

    sb = read_json(paths.home / "standby.json")
    if not sb or not sb.get("pid"):
        return None
    ident = ProcIdentity(int(sb["pid"]), float(sb.get("start_time") or 0.0))
    return ident.pid if is_alive(ident) else None


def loop_alive(paths: Paths, now: datetime) -> LoopStatus | None:
    """The loop's status if one is ticking (ok), else None."""
    status = loop_status(paths, now)
    return status if status.state == "ok" and status.pid else None
