"""The foreground loop: leadership, generations, watchdog, heartbeat, ticks.

Threads: the main thread handles signals and runs the watchdog; one tick
thread per generation claims and records; the runner's one supervisor thread
watches every child. A generation is a tick thread with its own stop event,
so a stop aimed at generation N can never end N+1.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from cronctl.context import Context
from cronctl.errors import CronctlError, SchedulerRunningError
from cronctl.loop import control
from cronctl.loop.engine import PRESPAWN_LEAD, Engine, EngineOptions
from cronctl.loop.heal import HealReport, Liveness, bump, heal_pass
from cronctl.loop.heal import _suspects as heal_suspects
from cronctl.models import AuditEvent
from cronctl.proc import identity as procs
from cronctl.proc.kill import kill_run_processes
from cronctl.proc.liveness import lease_checker, owner_alive
from cronctl.proc.supervisor import Supervisor
from cronctl.store.claims import Owner
from cronctl.store.locks import SchedulerLock, lock_holder
from cronctl.store.statefiles import read_json, write_json_atomic
from cronctl.timefmt import to_iso

WATCHDOG_PERIOD = 0.5
STANDBY_POLL = 0.1


@dataclass
class LoopOptions:
    file: Path | None = None
    once: bool = False
    standby: bool = False
    max_parallel: int | None = None
    takeover_after: float = 60.0
    lease: float = 60.0
    stall_after: float = 30.0  # a tick thread alive but silent this long is reported
    heal_every: float = 1.0
    quiet: bool = False
    metrics_file: Path | None = None


@dataclass
class FileApplied:
    """What re-applying the watched jobs file did, as the loop reports it."""

    changed: bool
    summary: str


@dataclass
class LoopHooks:
    """Work the loop does for the layers above it, without importing them.

    `apply_file(ctx, path)` applies the watched jobs file (raising CronctlError for a
    bad one); `after_tick(ctx)` runs on the tick thread after every tick (the metrics
    textfile). Both are passed in by ops.runs.run_loop.
    """

    apply_file: Callable[[Context, str], FileApplied] | None = None
    after_tick: Callable[[Context], None] | None = None


@dataclass
class Generation:
    id: str
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    last_beat: float = field(default_factory=time.monotonic)
    stall_reported: bool = False


def _sigkill_verified(ident: procs.ProcIdentity) -> None:
    """SIGKILL works on a stopped (SIGSTOP) process too; psutil re-checks the start time before signalling."""
    import psutil

    try:
        proc = psutil.Process(ident.pid)
        if abs(proc.create_time() - ident.start_time) <= procs.START_TIME_TOLERANCE:
            proc.kill()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


class Scheduler:
    def __init__(self, ctx: Context, options: LoopOptions, *, hooks: LoopHooks | None = None,
                 supervisor_factory: Callable[..., Supervisor] = Supervisor) -> None:
        self.ctx = ctx
        self.options = options
        self.lock = SchedulerLock(ctx.paths.scheduler_lock)
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.tick_lock = threading.Lock()
        self.identity = procs.identify(os.getpid())
        self.boot = procs.boot_id()
        self.generation: Generation | None = None
        self.started_at = ctx.clock.now()
        self.ticks = 0
        self._file_sig: tuple[int, int, int] | None = None
        self._last_heal = 0.0
        self._supervisor_factory = supervisor_factory
        self.supervisor: Supervisor | None = None
        self.engine: Engine | None = None
        self.takeover_reason: str | None = None
        self._heal_source: dict[str, Any] | None = None
        self._heal_doc: dict[str, Any] = {}
        self.hooks = hooks or LoopHooks()

    # --- life ----------------------------------------------------------------------

    def run(self) -> int:
        self._install_signals()
        previous = read_json(self.ctx.paths.heartbeat)
        if not self.lock.try_acquire():
            if not self.options.standby:
                holder = lock_holder(self.ctx.paths)
                raise SchedulerRunningError(
                    f"another 'cronctl run' (pid {holder if holder else 'unknown'}) already runs on "
                    f"{self.ctx.paths.home}; stop it first, or start this one with --standby to take over when it dies"
                )
            try:
                if not self._wait_for_leadership():
                    return 0
            finally:
                # A leader (or a stopped standby) is nobody's standby any more.
                self._clear_standby_beat()
            previous = read_json(self.ctx.paths.heartbeat)
        try:
            return self._lead(previous)
        finally:
            self.lock.release()

    def _lead(self, previous: dict[str, Any] | None) -> int:
        if self.options.file is not None:
            self._apply_file(initial=True)
        self.supervisor = self._supervisor_factory(on_result=self._on_result, subreaper=True)
        gen_id = self._new_generation_id()
        self.engine = Engine(self.ctx, self.supervisor, self._owner(gen_id),
                             EngineOptions(lease=self.options.lease, max_parallel=self.options.max_parallel,
                                           # --once fires what is due now, never a slot still ahead
                                           prespawn_lead=0.0 if self.options.once else PRESPAWN_LEAD),
                             wake=self.wake)
        self.supervisor.start()
        self.ctx.audit.append(AuditEvent.SCHEDULER_STARTED, pid=os.getpid(), generation=gen_id,
                              file=str(self.options.file) if self.options.file else None,
                              previous_pid=(previous or {}).get("pid"),
                              previous_stopped_cleanly=(previous or {}).get("stopped_cleanly"))
        if self.takeover_reason:
            self._record_takeover(previous)
        self._write_heartbeat(stopped_cleanly=False)  # alive before a possibly long first heal
        self._heal()
        self._start_generation(gen_id)
        self._say(f"cronctl: loop running (pid {os.getpid()}, home {self.ctx.paths.home}); Ctrl-C to stop")
        try:
            self._watch()
        finally:
            self._stop()
        return 0

    def _watch(self) -> None:
        while not self.stop_event.is_set():
            self.stop_event.wait(WATCHDOG_PERIOD)
            if self.stop_event.is_set():
                break
            self._watchdog()
            if self.options.file is not None:
                self._apply_file(initial=False)

    def _stop(self) -> None:
        gen = self.generation
        if gen is not None:
            gen.stop.set()
            self.wake.set()
            if gen.thread is not None:
                gen.thread.join(timeout=10)
        assert self.engine is not None
        with self.tick_lock:
            stopped = self.engine.shutdown()
        self._write_heartbeat(stopped_cleanly=True)
        self.ctx.audit.append(AuditEvent.SCHEDULER_STOPPED, pid=os.getpid(),
                              generation=gen.id if gen else None, runs_stopped=stopped, reason="signal")
        self._say(f"cronctl: loop stopped ({stopped} running run(s) ended and recorded)")

    def request_stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop())
        signal.signal(signal.SIGINT, lambda *_: self.request_stop())
        signal.signal(signal.SIGUSR1, lambda *_: self.wake.set())

    # --- generations ---------------------------------------------------------------------

    def _new_generation_id(self) -> str:
        return uuid.uuid4().hex[:12]

    def _owner(self, gen_id: str) -> Owner:
        start = self.identity.start_time if self.identity else 0.0
        return Owner(gen_id, os.getpid(), start, self.boot)

    def _start_generation(self, gen_id: str) -> Generation:
        """Bind a fresh stop event; a previous generation is stopped and joined (bounded) first."""
        old = self.generation
        if old is not None:
            old.stop.set()
            self.wake.set()
            if old.thread is not None and old.thread is not threading.current_thread():
                old.thread.join(timeout=5)
        gen = Generation(gen_id)
        gen.thread = threading.Thread(target=self._tick_loop, args=(gen,), name=f"cronctl-tick-{gen_id}",
                                      daemon=True)
        self.generation = gen
        gen.thread.start()
        return gen

    def _watchdog(self) -> None:
        gen = self.generation
        if gen is None or gen.thread is None:
            return
        if not gen.thread.is_alive() and not gen.stop.is_set():
            self._restart_generation(gen, "tick thread died")
        elif time.monotonic() - gen.last_beat > self.options.stall_after and not gen.stall_reported:
            # Alive but silent: report it, never start a second ticking thread beside it.
            gen.stall_reported = True
            self.ctx.audit.append("scheduler.tick_stalled", generation=gen.id, pid=os.getpid(),
                                  silent_s=round(time.monotonic() - gen.last_beat, 1))
            print(f"cronctl: warning: tick thread of generation {gen.id} is alive but has not ticked "
                  f"for {self.options.stall_after:.0f}s", file=sys.stderr)

    def _restart_generation(self, dead: Generation, why: str) -> None:
        assert self.engine is not None
        gen_id = self._new_generation_id()
        with self.tick_lock:
            adopted = self.engine.adopt(self._owner(gen_id))
            with self.ctx.store.transaction() as doc:
                bump(doc, "generation_restarted")
        self.ctx.audit.append(AuditEvent.SCHEDULER_GENERATION_RESTARTED, pid=os.getpid(), previous=dead.id,
                              generation=gen_id, reason=why, adopted_runs=adopted)
        print(f"cronctl: warning: {why}; restarted as generation {gen_id}", file=sys.stderr)
        self._start_generation(gen_id)

    def _tick_loop(self, gen: Generation) -> None:
        while not gen.stop.is_set():
            hint = 1.0
            with self.tick_lock:
                if gen.stop.is_set():
                    break
                try:
                    hint = self._tick()
                except Exception as exc:  # a tick error must never end the loop
                    self._report_tick_error(exc)
            gen.last_beat = time.monotonic()
            gen.stall_reported = False
            try:
                self._write_heartbeat(stopped_cleanly=False)
                if self.hooks.after_tick is not None:
                    self.hooks.after_tick(self.ctx)
            except Exception as exc:
                self._report_tick_error(exc)
            if self.options.once and self._once_done():
                self.request_stop()
                return
            self.wake.wait(hint)
            self.wake.clear()

    def _tick(self) -> float:
        assert self.engine is not None
        self.ticks += 1
        if time.monotonic() - self._last_heal >= self.options.heal_every:
            self._heal()
        self._serve_control()
        report = self.engine.tick()
        return report.sleep_hint

    def _once_done(self) -> bool:
        return self.engine is not None and self.ticks >= 1 and not self.engine.active

    def _report_tick_error(self, exc: BaseException) -> None:
        try:
            print(f"cronctl: error in tick (the loop goes on): {type(exc).__name__}: {exc}", file=sys.stderr)
            if os.environ.get("CRONCTL_DEBUG"):
                traceback.print_exc()
        except Exception:
            pass

    def _on_result(self, result: Any) -> None:
        if self.engine is not None:
            self.engine.on_result(result)

    # --- healing and control ----------------------------------------------------------------

    def _heal(self) -> HealReport:
        assert self.engine is not None
        self._last_heal = time.monotonic()
        live = Liveness(owner_alive=owner_alive, lease_expired=lease_checker(), monotonic=time.monotonic)
        report = heal_pass(self.ctx, self.ctx.clock.now(), live, kill_run_processes,
                           supervised=self.engine.active.keys(), doc=self._heal_view())
        for job, run_id in report.deadline_terminated:
            self.engine.active.pop(run_id, None)
        if report.anything:
            self.wake.set()
        return report

    def _heal_view(self) -> dict[str, Any]:
        """The engine's cached document cut down to the jobs heal_pass looks at.

        Rebuilt only when the store file changed: an idle tick then costs one stat and
        a look at the few suspect jobs, however many jobs there are.
        """
        assert self.engine is not None
        doc = self.engine.doc
        if doc is not self._heal_source:
            self._heal_source = doc
            self._heal_doc = {**doc, "jobs": dict(heal_suspects(doc))}
        return self._heal_doc

    def _serve_control(self) -> None:
        assert self.engine is not None
        for path, request in control.pending_requests(self.ctx.paths):
            try:
                answer = self._answer(request)
            except CronctlError as exc:
                answer = {"ok": False, "error": str(exc)}
            control.reply(self.ctx.paths, request, path, answer)

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.engine is not None and self.supervisor is not None
        job = str(request.get("job"))
        if request.get("action") == "force_run":
            batch = self.engine.force(job)
            if not batch.claims:
                return {"ok": False, "skipped": True, "error": f"job '{job}' is running and its overlap is skip"}
            return {"ok": True, "run_id": batch.claims[0].run_id, "pid": os.getpid()}
        if request.get("action") == "kill":
            mine = [r for r, a in self.engine.active.items() if a.job == job]
            for run_id in mine:
                self.supervisor.kill(run_id, "operator")
            return {"ok": True, "run_ids": mine}
        return {"ok": False, "error": f"unknown request {request.get('action')!r}"}

    # --- leadership ----------------------------------------------------------------------------

    def _wait_for_leadership(self) -> bool:
        holder = lock_holder(self.ctx.paths)
        self.ctx.audit.append(AuditEvent.SCHEDULER_STANDBY, pid=os.getpid(), leader_pid=holder)
        self._say(f"cronctl: standby (pid {os.getpid()}): waiting for the leader (pid {holder}) to go away")
        waited = time.monotonic()
        while not self.stop_event.is_set():
            self._write_standby_beat(holder, waited)
            if self.lock.try_acquire():
                hb = read_json(self.ctx.paths.heartbeat) or {}
                if self.takeover_reason is None:  # not set by killing a wedged leader
                    self.takeover_reason = "leader_stopped" if hb.get("stopped_cleanly") else "leader_dead"
                self._takeover_wait = time.monotonic() - waited
                return True
            if self._leader_wedged():
                self._kill_wedged_leader()
            self.stop_event.wait(STANDBY_POLL)
        return False

    def _write_standby_beat(self, leader: int | None, since: float) -> None:
        write_json_atomic(self.ctx.paths.home / "standby.json", {
            "pid": os.getpid(), "start_time": self.identity.start_time if self.identity else None,
            "boot_id": self.boot, "leader_pid": leader, "last_check_at": to_iso(self.ctx.clock.now()),
            "last_check_mono": time.monotonic(), "waiting_s": round(time.monotonic() - since, 1),
        })

    def _clear_standby_beat(self) -> None:
        path = self.ctx.paths.home / "standby.json"
        beat = read_json(path)
        if beat is not None and beat.get("pid") == os.getpid():
            path.unlink(missing_ok=True)

    def _leader_wedged(self) -> bool:
        hb = read_json(self.ctx.paths.heartbeat)
        if not hb or hb.get("boot_id") != self.boot or hb.get("stopped_cleanly"):
            return False
        silent = time.monotonic() - float(hb.get("last_tick_mono") or 0.0)
        return silent > self.options.takeover_after

    def _kill_wedged_leader(self) -> None:
        hb = read_json(self.ctx.paths.heartbeat) or {}
        ident = procs.ProcIdentity(int(hb.get("pid") or 0), float(hb.get("start_time") or 0.0))
        # Only the verified leader: same pid AND start time, and it really holds the lock.
        if not ident.pid or lock_holder(self.ctx.paths) != ident.pid or not procs.is_alive(ident):
            return
        _sigkill_verified(ident)
        self.takeover_reason = "leader_wedged"
        self.ctx.audit.append("scheduler.leader_killed", pid=os.getpid(), leader_pid=ident.pid,
                              reason="leader_wedged", takeover_after_s=self.options.takeover_after)

    def _record_takeover(self, previous: dict[str, Any] | None) -> None:
        with self.ctx.store.transaction() as doc:
            bump(doc, "takeover")
        self.ctx.audit.append(AuditEvent.SCHEDULER_TAKEOVER, pid=os.getpid(), reason=self.takeover_reason,
                              previous_pid=(previous or {}).get("pid"),
                              waited_s=round(getattr(self, "_takeover_wait", 0.0), 3))

    # --- heartbeat and file ----------------------------------------------------------------------

    def _write_heartbeat(self, stopped_cleanly: bool) -> None:
        gen = self.generation
        write_json_atomic(self.ctx.paths.heartbeat, {
            "pid": os.getpid(), "start_time": self.identity.start_time if self.identity else None,
            "boot_id": self.boot, "generation": gen.id if gen else None, "started_at": to_iso(self.started_at),
            "last_tick_at": to_iso(self.ctx.clock.now()), "last_tick_mono": time.monotonic(),
            "stopped_cleanly": stopped_cleanly, "ticks": self.ticks,
            "active_runs": len(self.engine.active) if self.engine else 0,
            "file": str(self.options.file) if self.options.file else None,
        })

    def _apply_file(self, initial: bool) -> None:
        assert self.options.file is not None
        try:
            st = os.stat(self.options.file)
            sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            sig = None
        if not initial and sig == self._file_sig:
            return
        self._file_sig = sig
        if self.hooks.apply_file is None:
            return
        try:
            applied = self.hooks.apply_file(self.ctx, str(self.options.file))
        except CronctlError as exc:
            if initial:
                raise
            print(f"cronctl: {self.options.file} changed but was not applied (the jobs stay as they were):\n"
                  f"{exc}", file=sys.stderr)
            return
        if applied.changed or initial:
            self._say(f"cronctl: applied {self.options.file}: {applied.summary}")
            self.wake.set()

    def _say(self, message: str) -> None:
        if not self.options.quiet:
            print(message, file=sys.stderr, flush=True)
