"""The loop's heartbeat: `scheduler.json` and the tick record, written by the loop, read by everyone else.

The read side (`loop_status`, `read_heartbeat`, `heartbeat_age`) says what the loop is
doing as another process sees it: ok, stopped, dead, wedged, or cannot_write.

Every tick the loop overwrites `heartbeat.tick`, a fixed-size record created when it
starts to lead, in place: one pwrite, no new inode, no new block (so it works on a full
disk too). `scheduler.json` is written whole (temp file and rename) when what it says
changes (generation, running runs, a clean stop), and at least every
`HEARTBEAT_FILE_EVERY` seconds (an idle loop's 5 s beat: each beat): a rename costs about
0.2 ms of CPU, and once a second that was most of an idle loop's cost. Readers take the tick from whichever of the two
is newer (`read_heartbeat`), so `status` sees every tick; a reader of the file alone
sees a `last_tick_at` at most that many seconds old.

A full disk (or a read-only remount) makes the `scheduler.json` write fail while the
loop goes on ticking; a reader must not take that silence for a hung loop. The tick
record then carries the error: "alive and ticking, but cannot write".
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
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
# scheduler.json is rewritten at least this often while only the tick changes: well inside
# HEARTBEAT_STALE_AFTER, so a reader of the file alone never takes a ticking loop for a hung one.
HEARTBEAT_FILE_EVERY = 5.0
# The in-place tick record: always exactly this many bytes, so an overwrite allocates nothing.
TICK_RECORD_SIZE = 1024
_TICK_ERROR_MAX = 300


_encode_record = json.JSONEncoder(sort_keys=True).encode  # built once: json.dumps builds one per call


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
    clock_jump: dict[str, Any] | None = None  # the last wall-clock step this loop saw: {at, step_s}

    @property
    def stale(self) -> bool:
        # cannot_write is stale too: the loop ticks, but what it does may not be recorded.
        return self.state in ("dead", "wedged", "cannot_write")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class HeartbeatWriter:
    """What stays the same in every beat of one loop process; `beat` and `write` add what changes."""

    paths: Paths
    clock: Clock
    identity: ProcIdentity | None
    boot: str | None
    started_at: datetime
    file: Path | None
    clock_jump: dict[str, Any] | None = None  # the last wall-clock step seen (loop/clockstep.py)
    # What scheduler.json said when last written whole, and when (monotonic); its last error.
    _said: tuple[Any, ...] | None = field(default=None, init=False)
    _said_at: float = field(default=float("-inf"), init=False)
    _problem: str | None = field(default=None, init=False)
    _tick_fd: int | None = field(default=None, init=False)  # kept open: a tick costs one pwrite
    # Seconds until the next beat, as the tick record declares it ("beat"): a second, or an idle
    # loop's longer beat; a standby allows it before it takes the silence for a hang.
    period: float = 1.0

    def prepare(self) -> None:
        """Create the tick record at its full size; raises OSError when the home is not writable."""
        path = tick_path(self.paths)
        try:
            # scheduler.json's temp file is written there (see `write`): made now, while a
            # failure still stops the start.
            self.paths.control_dir.mkdir(mode=0o700, exist_ok=True)
            write_json_atomic(path, {})  # a fresh inode of our own, then its full size
            if self._tick_fd is not None:
                os.close(self._tick_fd)
            self._tick_fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            self._overwrite_tick(None, ticks=0, active_runs=0)
        except OSError as exc:  # os.write names no file: say which one
            raise OSError(exc.errno, exc.strerror, str(path)) from exc

    def beat(self, *, generation: str | None, ticks: int, active_runs: int) -> str | None:
        """One tick: the tick record, and scheduler.json when what it says changed or it is
        due (or its last write failed). Returns what failed, if anything."""
        said = (generation, active_runs, self.clock_jump)
        due = self._file_due(self.clock.monotonic() - self._said_at)
        if self._problem is not None or said != self._said or due:
            return self.write(generation=generation, ticks=ticks, active_runs=active_runs, stopped_cleanly=False)
        return self._tick(ticks, active_runs)

    def _file_due(self, age: float) -> bool:
        """Whether scheduler.json, written `age` seconds ago, is rewritten at this beat: when
        HEARTBEAT_FILE_EVERY has passed, or when it would be more than a second past it at the
        next beat (`period` away): an idle loop's 5 s beat writes it each time, a loop that
        ticks every second every fifth tick."""
        return age >= HEARTBEAT_FILE_EVERY or age + self.period > HEARTBEAT_FILE_EVERY + 1.0

    def write(self, *, generation: str | None, ticks: int, active_runs: int, stopped_cleanly: bool) -> str | None:
        """Write scheduler.json whole, then the tick record; returns what failed, if anything."""
        now_mono = self.clock.monotonic()
        # The tick record first: its pwrite lets go of the GIL, and after the rename below it
        # would hand it to the store watch the rename wakes (loop/storewatch.py) and wait to get
        # it back, a second wake-up of this thread per beat. It says the file's last error; when
        # this write changes that, the record is written again below.
        before, told = self._problem, self._tick(ticks, active_runs)
        try:
            # The temp file in control/, renamed into the home: the store watch on the home
            # then wakes once for this rewrite, not also for the temp's close.
            write_json_atomic(self.paths.heartbeat, {
                "pid": os.getpid(), "start_time": self.identity.start_time if self.identity else None,
                "boot_id": self.boot, "generation": generation, "started_at": to_iso(self.started_at),
                "last_tick_at": to_iso(self.clock.now()), "last_tick_mono": now_mono,
                "stopped_cleanly": stopped_cleanly, "ticks": ticks, "active_runs": active_runs,
                "file": str(self.file) if self.file else None,
                **({"clock_jump": self.clock_jump} if self.clock_jump else {}),
            }, tmp_dir=self.paths.control_dir)
            self._problem = None
            self._said, self._said_at = (generation, active_runs, self.clock_jump), now_mono
        except OSError as exc:
            self._problem = f"{self.paths.heartbeat.name}: {exc.strerror or exc}"
        return told if self._problem == before else self._tick(ticks, active_runs)

    def _tick(self, ticks: int, active_runs: int) -> str | None:
        """The tick record, with scheduler.json's last error; returns what failed, if anything."""
        problem = self._problem
        try:
            self._overwrite_tick(problem, ticks, active_runs)
        except OSError as exc:
            failed = f"{tick_path(self.paths).name}: {exc.strerror or exc}"
            return f"{problem}; {failed}" if problem else failed
        return problem

    def _overwrite_tick(self, error: str | None, ticks: int, active_runs: int) -> None:
        record = _encode_record({
            "pid": os.getpid(), "start_time": self.identity.start_time if self.identity else None,
            "boot_id": self.boot, "mono": self.clock.monotonic(), "at": to_iso(self.clock.now()),
            "ticks": ticks, "active_runs": active_runs, "beat": self.period,
            "error": None if error is None else error[:_TICK_ERROR_MAX],
        }).encode()
        data = record.ljust(TICK_RECORD_SIZE - 1) + b"\n"
        if self._tick_fd is not None:
            os.pwrite(self._tick_fd, data, 0)
            return
        fd = os.open(tick_path(self.paths), os.O_WRONLY | os.O_CLOEXEC)  # never O_CREAT: no new inode
        try:
            os.pwrite(fd, data, 0)
        finally:
            os.close(fd)


def own_tick(paths: Paths, hb: dict[str, Any]) -> dict[str, Any] | None:
    """The tick record, if the process that wrote the scheduler.json `hb` wrote it too.

    A record read while it is being overwritten does not parse: it counts as absent (the
    file then speaks for the loop, at most HEARTBEAT_FILE_EVERY seconds behind)."""
    tick = read_json(tick_path(paths))
    if not tick or tick.get("pid") != hb.get("pid") or tick.get("boot_id") != hb.get("boot_id"):
        return None
    if float(tick.get("start_time") or 0.0) != float(hb.get("start_time") or 0.0):
        return None
    return tick


def with_tick(hb: dict[str, Any], tick: dict[str, Any] | None) -> dict[str, Any]:
    """scheduler.json `hb` brought up to its loop's last tick, when the tick record is newer."""
    if tick is None or float(tick.get("mono") or 0.0) <= float(hb.get("last_tick_mono") or 0.0):
        return hb
    return {**hb, "last_tick_at": tick.get("at"), "last_tick_mono": tick.get("mono"), "beat": tick.get("beat"),
            "ticks": tick.get("ticks", hb.get("ticks")), "active_runs": tick.get("active_runs", hb.get("active_runs"))}


def read_heartbeat(paths: Paths) -> dict[str, Any] | None:
    """What the loop last said of itself: scheduler.json, with the tick of the tick record
    when that is newer (the loop rewrites the file only every few seconds when idle)."""
    hb = read_json(paths.heartbeat)
    return None if hb is None else with_tick(hb, own_tick(paths, hb))


def heartbeat_age(hb: dict[str, Any], now: datetime, boot: str) -> float | None:
    """Seconds since the last tick: monotonic within one boot (immune to clock steps), else wall."""
    if hb.get("boot_id") == boot and hb.get("last_tick_mono") is not None:
        return max(0.0, time.monotonic() - float(hb["last_tick_mono"]))
    last = from_iso(hb.get("last_tick_at"))
    return None if last is None else max(0.0, (now - last).total_seconds())


def loop_status(paths: Paths, now: datetime) -> LoopStatus:
    from cronctl.proc.identity import ProcIdentity, boot_id, is_alive

    written = read_json(paths.heartbeat)
    tick = None if written is None else own_tick(paths, written)
    hb = None if written is None else with_tick(written, tick)
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
                  uptime=None if started is None else round((now - started).total_seconds(), 1),
                  clock_jump=hb.get("clock_jump"))
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
        return LoopStatus("wedged", f"the loop (pid {ident.pid}) is alive but has not ticked for {age:.0f}s; "
                          "a --standby takes over, or kill it and start 'cronctl run' again", **common)
    if tick is not None and tick.get("error"):  # fresh, or the age above would be stale
        return LoopStatus("cannot_write", f"the loop (pid {ident.pid}) is alive and ticking but cannot write "
                          f"its heartbeat ({tick['error']}); free space on the home's filesystem "
                          "('cronctl doctor' shows it): the loop needs no restart", **common)
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
