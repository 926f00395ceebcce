"""Waiting beside a leader: the standby beat, spotting a wedged leader, killing it, taking over.

A standby polls the scheduler lock; when it gets it, the old leader stopped or died
(`leader_stopped`/`leader_dead`). A leader whose heartbeat stays silent longer than
`takeover_after` (same boot) is killed first, verified by pid AND start time, and the
takeover is recorded as `leader_wedged`, unless its tick record (heartbeat.py) shows it
still ticking: a leader that only cannot write (a full disk) is healthy, never killed.
"""

from __future__ import annotations

import os
import threading
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Callable

from cronctl.context import Context
from cronctl.loop.heartbeat import read_heartbeat
from cronctl.models import AuditEvent
from cronctl.proc import identity as procs
from cronctl.store.locks import SchedulerLock, lock_holder
from cronctl.store.schema import bump_counter
from cronctl.store.statefiles import read_json, write_json_atomic
from cronctl.timefmt import to_iso

STANDBY_POLL = 0.1


@dataclass(frozen=True)
class Takeover:
    """How a standby came to lead: why the old leader went, and how long it waited."""

    reason: str
    waited_s: float


def _sigkill_verified(ident: procs.ProcIdentity) -> None:
    """SIGKILL works on a stopped (SIGSTOP) process too; psutil re-checks the start time before signalling."""
    import psutil

    try:
        proc = psutil.Process(ident.pid)
        if abs(proc.create_time() - ident.start_time) <= procs.START_TIME_TOLERANCE:
            proc.kill()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


class Leadership:
    def __init__(self, ctx: Context, lock: SchedulerLock, takeover_after: float, stop: threading.Event,
                 identity: procs.ProcIdentity | None, boot: str | None,
                 say: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.lock = lock
        self.takeover_after = takeover_after
        self.stop = stop
        self.identity = identity
        self.boot = boot
        self.say = say
        self._killed_wedged = False

    @property
    def standby_path(self) -> Any:
        return self.ctx.paths.home / "standby.json"

    def wait(self) -> Takeover | None:
        """Block until this process holds the lock (a Takeover) or is asked to stop (None)."""
        try:
            return self._wait()
        finally:
            # A leader (or a stopped standby) is nobody's standby any more.
            self._clear_standby_beat()

    def _wait(self) -> Takeover | None:
        holder = lock_holder(self.ctx.paths)
        self.ctx.audit.append(AuditEvent.SCHEDULER_STANDBY, pid=os.getpid(), leader_pid=holder)
        self.say(f"cronctl: standby (pid {os.getpid()}): waiting for the leader (pid {holder}) to go away")
        waited = self.ctx.clock.monotonic()
        while not self.stop.is_set():
            self._write_standby_beat(holder, waited)
            if self.lock.try_acquire():
                return Takeover(self._reason(), self.ctx.clock.monotonic() - waited)
            if self._leader_wedged():
                self._kill_wedged_leader()
            self.stop.wait(STANDBY_POLL)
        return None

    def _reason(self) -> str:
        if self._killed_wedged:
            return "leader_wedged"
        hb = read_json(self.ctx.paths.heartbeat) or {}
        return "leader_stopped" if hb.get("stopped_cleanly") else "leader_dead"

    def _write_standby_beat(self, leader: int | None, since: float) -> None:
        mono = self.ctx.clock.monotonic()
        with suppress(OSError):  # only `status` reads it: a full disk must not end the standby
            write_json_atomic(self.standby_path, {
                "pid": os.getpid(), "start_time": self.identity.start_time if self.identity else None,
                "boot_id": self.boot, "leader_pid": leader, "last_check_at": to_iso(self.ctx.clock.now()),
                "last_check_mono": mono, "waiting_s": round(mono - since, 1),
            })

    def _clear_standby_beat(self) -> None:
        beat = read_json(self.standby_path)
        if beat is not None and beat.get("pid") == os.getpid():
            self.standby_path.unlink(missing_ok=True)

    def _leader_wedged(self) -> bool:
        # With the tick record's tick: a leader that ticks but cannot write scheduler.json
        # (a full disk) still beats there, and is not wedged.
        hb = read_heartbeat(self.ctx.paths)
        if not hb or hb.get("boot_id") != self.boot or hb.get("stopped_cleanly"):
            return False
        # Silent for takeover_after past the beat the leader declared (an idle leader beats every
        # few seconds: loop/scheduler.py IDLE_BEAT), not merely since its last beat.
        beat = hb.get("beat")
        late = float(beat) if isinstance(beat, (int, float)) and 0 <= beat <= 60 else 0.0
        return self.ctx.clock.monotonic() - float(hb.get("last_tick_mono") or 0.0) > self.takeover_after + late

    def _kill_wedged_leader(self) -> None:
        hb = read_json(self.ctx.paths.heartbeat) or {}
        ident = procs.ProcIdentity(int(hb.get("pid") or 0), float(hb.get("start_time") or 0.0))
        # Only the verified leader: same pid AND start time, and it really holds the lock.
        if not ident.pid or lock_holder(self.ctx.paths) != ident.pid or not procs.is_alive(ident):
            return
        _sigkill_verified(ident)
        self._killed_wedged = True
        self.ctx.audit.append("scheduler.leader_killed", pid=os.getpid(), leader_pid=ident.pid,
                              reason="leader_wedged", takeover_after_s=self.takeover_after)


def record_takeover(ctx: Context, takeover: Takeover, previous: dict[str, Any] | None) -> None:
    with ctx.store.transaction() as doc:
        bump_counter(doc, "takeover")
    ctx.audit.append(AuditEvent.SCHEDULER_TAKEOVER, pid=os.getpid(), reason=takeover.reason,
                     previous_pid=(previous or {}).get("pid"), waited_s=round(takeover.waited_s, 3))
