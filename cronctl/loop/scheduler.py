"""The foreground loop: life, generations, watchdog, ticks.

Threads: the main thread handles signals and runs the watchdog; one tick
thread per generation claims and records; the runner's one supervisor thread
watches every child; with --http, one endpoint thread answers probes. A
generation is a tick thread with its own stop event, so a stop aimed at
generation N can never end N+1.

Waiting for leadership lives in leadership.py, the heartbeat file in
heartbeat.py, control requests in control.py, the service manager's protocol
in notify.py and the HTTP endpoint in endpoint.py. Every time reading goes
through the context's clock.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from cronctl.clock import Clock
from cronctl.context import Context
from cronctl.errors import HomeError, SchedulerRunningError
from cronctl.loop import control
from cronctl.loop.beat import JsonBeat, TickBeat
from cronctl.loop.clockstep import ClockWatch, record_step
from cronctl.loop.due import DueIndex
from cronctl.loop.engine import PRESPAWN_LEAD, Engine, EngineOptions, build_engine
from cronctl.loop.forgetting import LoopForgetter
from cronctl.loop.heal import HealReport, heal_pass
from cronctl.loop.heartbeat import HEARTBEAT_STALE_AFTER, HeartbeatWriter
from cronctl.loop.idlebeat import IdleBeats
from cronctl.loop.leadership import Leadership, Takeover, record_takeover
from cronctl.loop.notify import Notifier, ServiceBeat
from cronctl.loop.notify_worker import STOP_DRAIN_S, NotifyWorker, start_notifications
from cronctl.loop.storewatch import StoreWatch
from cronctl.loop.watched_file import FileApplied as FileApplied  # ops.runs takes it from here
from cronctl.loop.watched_file import WatchedFile
from cronctl.models import AuditEvent
from cronctl.proc import identity as procs
from cronctl.proc.supervisor import Supervisor
from cronctl.store.claims import Owner
from cronctl.store.locks import SchedulerLock, lock_holder
from cronctl.store.statefiles import read_json
from cronctl.timefmt import to_iso

if TYPE_CHECKING:  # the PostgreSQL side is imported only when a loop runs on it, the HTTP
    # endpoint only with --http (sockets, selectors: a loop's start-up is timed)
    from cronctl.loop.cluster import ClusterMember
    from cronctl.loop.endpoint import Endpoint, Handler, Reply, Route

WATCHDOG_PERIOD = 0.5
# Without systemd or --file the main thread looks for a silent tick thread when it could
# first be silent for stall_after (no sooner than WATCHDOG_PERIOD), and every this often
# once it was reported.
IDLE_WATCH_PERIOD = 10.0
# An idle loop on the JSON store (nothing running, claimed, owed or watched, nothing due
# sooner) beats this often instead of every second: its wake-ups were nearly all of its
# CPU. What others write to the store wakes it at once (loop/storewatch.py), requests to it
# come with SIGUSR1, and the beat stays inside HEARTBEAT_STALE_AFTER, so `status` judges it
# as before. Each idle beat also rewrites scheduler.json (loop/heartbeat.py: it may never be
# older than HEARTBEAT_FILE_EVERY, the same 5 s): 0.2 wake-ups a second, where a 3 s beat
# writing the file every other beat made 0.33.
IDLE_BEAT = 5.0


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
    http: tuple[str, int] | None = None  # --http, already checked (loopback unless allowed)
    http_token: str | None = None  # --http-token's secret: the dashboard's actions are on
    live_after: float = HEARTBEAT_STALE_AFTER  # /livez fails when the last tick is older than this
    forget_after: float = 900.0  # on PostgreSQL: a loop silent this long, its runs all reclaimed, is forgotten


@dataclass
class LoopHooks:
    """Work the loop does for the layers above it, without importing them.

    `apply_file(ctx, path)` applies the watched jobs file (raising CronctlError for a
    bad one); `after_tick(ctx)` runs on the tick thread after every tick (the metrics
    textfile); `http_routes()` gives the --http endpoint's pages that need the use
    cases (/metrics, /healthz). All are passed in by ops.runs.run_loop.
    """

    apply_file: Callable[[Context, str], FileApplied] | None = None
    after_tick: Callable[[Context], None] | None = None
    http_routes: Callable[[], dict[str, Route]] | None = None
    # The dashboard (SPEC §14): its pages and API by path or prefix, and the POST actions.
    http_handlers: Callable[[], dict[str, Handler]] | None = None
    http_actions: Callable[[], Handler] | None = None


@dataclass
class Generation:
    id: str
    clock: Clock
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    last_beat: float = 0.0
    stall_reported: bool = False

    def __post_init__(self) -> None:
        self.last_beat = self.clock.monotonic()


class Scheduler:
    def __init__(self, ctx: Context, options: LoopOptions, *, hooks: LoopHooks | None = None,
                 supervisor_factory: Callable[..., Supervisor] = Supervisor,
                 notifier: Notifier | None = None) -> None:
        self.ctx = ctx
        self.options = options
        self.lock = SchedulerLock(ctx.paths.scheduler_lock)
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        # What the signal handlers were asked, for a handler that interrupted another (_signalled).
        self._stop_signalled = self._wake_signalled = self._in_handler = False
        self.tick_lock = threading.Lock()
        self.identity = procs.identify(os.getpid())
        self.boot = procs.boot_id()
        self.generation: Generation | None = None
        self.started_at = ctx.clock.now()
        self.ticks = 0
        self._watched_file: WatchedFile | None = None  # --file (loop/watched_file.py)
        self._last_heal = 0.0
        self._supervisor_factory = supervisor_factory
        self.supervisor: Supervisor | None = None
        self.engine: Engine | None = None
        self.notify_worker: NotifyWorker | None = None
        self.takeover: Takeover | None = None
        self.cluster: ClusterMember | None = None  # on PostgreSQL: this loop among the others
        self._first_due: DueIndex | None = None  # the JSON store as read before the loop announced itself
        self.beat: TickBeat | None = None  # the backend's part of the tick (loop/beat.py)
        self.hooks = hooks or LoopHooks()
        self.service = ServiceBeat(notifier or Notifier.from_env(os.environ), ctx.clock)
        self.endpoint: Endpoint | None = None
        self.role = "starting"
        self._heartbeat_problem: str | None = None
        self.heartbeat = HeartbeatWriter(ctx.paths, ctx.clock, self.identity, self.boot, self.started_at,
                                         options.file)
        self.clock_watch = ClockWatch(ctx.clock)  # wall-clock steps (SPEC §4, loop/clockstep.py)
        self.forgetter = LoopForgetter(ctx.clock, options.forget_after)  # on PostgreSQL (loop/forgetting.py)
        self._store_watch: StoreWatch | None = None  # started the first time the loop is idle
        self.idle_beats = IdleBeats(ctx.paths.store)  # beats that need no tick (loop/idlebeat.py)

    # --- life ----------------------------------------------------------------------

    def run(self) -> int:
        self._install_signals()
        try:
            return self._run()
        except OSError as exc:
            # A read-only or full home, a lost permission: a plain message naming the path, never a traceback.
            raise HomeError(f"the loop cannot run on {self.ctx.paths.home}: {_os_words(exc)}") from exc
        finally:
            if self.endpoint is not None:
                self.endpoint.stop()

    def _run(self) -> int:
        previous = read_json(self.ctx.paths.heartbeat)
        if self.ctx.cluster is not None and self.options.standby:
            # SPEC §9: on PostgreSQL every loop claims and the database arbitrates; nothing to wait for.
            self._say("cronctl: --standby is a JSON-store feature; on PostgreSQL every loop is active")
            self.options.standby = False
        leading = self._lock_or_standby()
        try:
            self._start_endpoint()  # after the lock: a second loop is told about the first, not the port
        except BaseException:
            if leading:
                self.lock.release()
            raise
        if not leading:
            if not self._stand_by():
                return 0
            previous = read_json(self.ctx.paths.heartbeat)
        try:
            return self._lead(previous)
        finally:
            self.lock.release()

    def _lock_or_standby(self) -> bool:
        """True when this process holds the lock; False for a --standby that must wait."""
        if self.lock.try_acquire():
            return True
        if not self.options.standby:
            holder = lock_holder(self.ctx.paths)
            raise SchedulerRunningError(
                f"another 'cronctl run' (pid {holder if holder else 'unknown'}) already runs on "
                f"{self.ctx.paths.home}; stop it first, or start this one with --standby to take over when it dies"
            )
        return False

    def _stand_by(self) -> bool:
        """Wait for leadership; False when asked to stop first."""
        self.role = "standby"
        self.service.standby()
        self.takeover = Leadership(self.ctx, self.lock, self.options.takeover_after, self.stop_event,
                                   self.identity, self.boot, self._say).wait()
        if self.takeover is None:
            self.service.stopping()
            return False
        return True

    def _check_before_announcing(self) -> None:
        """Fail before the `scheduler.started` row and the first heartbeat, so that a loop that
        could not start never looks like one that started and crashed."""
        if self.ctx.cluster is not None:
            from cronctl.loop.cluster_life import check_store_at_start

            check_store_at_start(self.ctx, self.options.lease)
        else:
            # A corrupt store: StoreCorruptError, its message names the file and the fix. The engine
            # starts from this read (`_first_due`): parsed once before the first tick, not twice.
            self._first_due = DueIndex(self.ctx.store)
            self._first_due.refresh()
        self.heartbeat.prepare()  # the home is writable (and the tick record of a full disk exists)

    def _lead(self, previous: dict[str, Any] | None) -> int:
        self._check_before_announcing()
        if self.options.file is not None:
            self._apply_file(initial=True)
        gen_id = self._new_generation_id()
        self.cluster = self._join_cluster()
        self.engine = self._start_engine(gen_id)
        self.ctx.audit.append(AuditEvent.SCHEDULER_STARTED, pid=os.getpid(), generation=gen_id,
                              file=str(self.options.file) if self.options.file else None,
                              previous_pid=(previous or {}).get("pid"),
                              previous_stopped_cleanly=(previous or {}).get("stopped_cleanly"))
        if self.takeover is not None:
            record_takeover(self.ctx, self.takeover, previous)
        self._write_heartbeat(stopped_cleanly=False)  # alive before a possibly long first heal
        self._beat().first_heal(self._heal)
        self._start_generation(gen_id)
        self.role = "leader"
        if self.takeover is not None:
            self.service.took_over(self.service_status())
        else:
            self.service.ready(self.service_status())
        self._say(f"cronctl: loop running (pid {os.getpid()}, home {self.ctx.paths.home}); Ctrl-C to stop")
        try:
            self._watch()
        finally:
            self._stop()
        return 0

    def _start_engine(self, gen_id: str) -> Engine:
        """The engine and its supervisor (started), its self-fence on PostgreSQL, the backend's beat
        and the notification worker."""
        engine = build_engine(self.ctx, self._owner(gen_id),
                              EngineOptions(lease=self.options.lease, max_parallel=self.options.max_parallel,
                                            # --once fires what is due now, never a slot still ahead
                                            prespawn_lead=0.0 if self.options.once else PRESPAWN_LEAD),
                              wake=self.wake, subreaper=True, make_supervisor=self._supervisor_factory,
                              due=self.cluster.due if self.cluster else self._first_due)
        self.supervisor = engine.supervisor
        self.supervisor.start()
        if self.cluster is not None:
            from cronctl.loop.cluster_beat import ClusterBeat
            from cronctl.loop.cluster_life import start_self_fence

            engine.fence = start_self_fence(engine, self.options.lease, self.ctx.clock.monotonic)
            self.beat = ClusterBeat(self.ctx, self.cluster, self.forgetter)
        else:
            self.beat = JsonBeat(self.ctx, engine.due, self.options.heal_every)
        self.notify_worker = start_notifications(self.ctx, engine, f"{os.getpid()}:{gen_id}")
        return engine

    def _join_cluster(self) -> ClusterMember | None:
        """On PostgreSQL: this loop's row among the others (loop/cluster.py); None on the JSON store."""
        cluster = self.ctx.cluster
        if cluster is None:
            return None
        from cronctl.loop.cluster import ClusterMember

        start = self.identity.start_time if self.identity else 0.0
        cluster.set_deadline(cluster.deadline_for(self.options.lease))  # SPEC §9: 5 s, at most a quarter of the lease
        member = ClusterMember(cluster, self.ctx.clock, cluster.host_id, self.boot, os.getpid(), start,
                               str(self.ctx.paths.home), say=self._say, lease_s=self.options.lease)
        from cronctl.loop.cluster_life import refused_start_on_outage

        with refused_start_on_outage():  # before `scheduler.started`: the loop did not start
            member.register()
        return member

    def _watch(self) -> None:
        # Only systemd's watchdog and --file need a look twice a second; otherwise the main
        # thread waits on the tick thread itself, which wakes it at once if that thread ends
        # (died, or stopping), and looks for a silent one when it could first be: waking twice a
        # second for nothing was a quarter of an idle loop's CPU, every 10 s still a twentieth.
        needs_polling = self.service.watch_period is not None or self.options.file is not None
        period = min(WATCHDOG_PERIOD, self.service.watch_period or WATCHDOG_PERIOD)
        while not self.stop_event.is_set():
            self._wait_for_trouble(period if needs_polling else self._stall_look_in())
            if self.stop_event.is_set():
                break
            self._watchdog()
            if self.generation is not None:
                self.service.watch(self.generation.last_beat, self.service_status)
            if self.options.file is not None:
                self._apply_file(initial=False)

    def _stall_look_in(self) -> float:
        """Seconds until the tick thread, if it beats no more, is silent for stall_after."""
        gen = self.generation
        if gen is None or gen.stall_reported:
            return IDLE_WATCH_PERIOD
        return max(WATCHDOG_PERIOD, gen.last_beat + self.options.stall_after - self.ctx.clock.monotonic())

    def _wait_for_trouble(self, period: float) -> None:
        gen = self.generation
        thread = gen.thread if gen is not None else None
        if thread is not None and thread.is_alive():
            thread.join(timeout=period)
        else:  # not started, or dead: the watchdog restarts it, at most every WATCHDOG_PERIOD
            self.stop_event.wait(WATCHDOG_PERIOD)

    def _stop(self) -> None:
        self.role = "stopping"
        self.service.stopping()
        if self.cluster is not None:
            self._stop_in_cluster()
            return
        gen = self.generation
        if gen is not None:
            gen.stop.set()
            self.wake.set()
            if gen.thread is not None:
                gen.thread.join(timeout=10)
        if self._store_watch is not None:
            self._store_watch.stop()
        assert self.engine is not None
        with self.tick_lock:
            stopped = self.engine.shutdown()
        if self.notify_worker is not None:
            self.notify_worker.drain(self.ctx, STOP_DRAIN_S)
        if self.cluster is not None:
            self.cluster.stop()
        self._write_heartbeat(stopped_cleanly=True)
        self.ctx.audit.append(AuditEvent.SCHEDULER_STOPPED, pid=os.getpid(),
                              generation=gen.id if gen else None, runs_stopped=stopped, reason="signal")
        self._say(stopped_words(stopped, self.engine.held.handed_back))

    def _stop_in_cluster(self) -> None:
        """On PostgreSQL: runs end within their kill_grace even while the store does not answer
        (loop/cluster_life.py); the loop's last rows are written only if it does."""
        from cronctl.loop.cluster_life import stop_cluster_loop

        assert self.engine is not None and self.cluster is not None
        gen = self.generation
        if gen is not None:
            gen.stop.set()
        self.wake.set()
        done = stop_cluster_loop(self.engine, self.cluster, gen.thread if gen else None, self.tick_lock,
                                 join_s=self.cluster.store.deadline_for(self.options.lease) + 1.0)
        self._write_heartbeat(stopped_cleanly=True)
        if done.store_answered:
            self.ctx.audit.append(AuditEvent.SCHEDULER_STOPPED, pid=os.getpid(),
                                  generation=gen.id if gen else None, runs_stopped=done.recorded, reason="signal")
            self._say(f"cronctl: loop stopped ({done.recorded} running run(s) ended and recorded)")
        else:
            self._say("cronctl: loop stopped; its runs were ended, and what the store did not record is "
                      "reclaimed by the other loops")

    def request_stop(self) -> None:
        self.stop_event.set()
        self.wake.set()

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, lambda *_: self._signalled(stop=True))
        signal.signal(signal.SIGINT, lambda *_: self._signalled(stop=True))
        signal.signal(signal.SIGUSR1, lambda *_: self._signalled(stop=False))

    def _signalled(self, stop: bool) -> None:
        """A signal handler (main thread). `Event.set` takes the event's non-reentrant lock: a
        handler that interrupts another one's `set` (three `force-run`s send three SIGUSR1s at
        once) waited on that lock for ever, and the tick thread, waiting on the same event,
        with it: the loop stopped ticking. A handler inside another only records what it
        asks; the outer one sets the events, until nothing new was asked meanwhile."""
        self._stop_signalled = self._stop_signalled or stop
        self._wake_signalled = True
        if self._in_handler:
            return
        self._in_handler = True
        try:
            while self._wake_signalled:
                self._wake_signalled = False
                if self._stop_signalled and not self.stop_event.is_set():
                    self.stop_event.set()
                self.wake.set()
        finally:
            self._in_handler = False

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
        gen = Generation(gen_id, self.ctx.clock)
        gen.thread = threading.Thread(target=self._tick_loop, args=(gen,), name=f"cronctl-tick-{gen_id}",
                                      daemon=True)
        self.generation = gen
        gen.thread.start()
        return gen

    def _watchdog(self) -> None:
        gen = self.generation
        if gen is None or gen.thread is None:
            return
        silent = self.ctx.clock.monotonic() - gen.last_beat
        if not gen.thread.is_alive() and not gen.stop.is_set():
            self._restart_generation(gen, "tick thread died")
        elif silent > self.options.stall_after and not gen.stall_reported:
            # Alive but silent: report it, never start a second ticking thread beside it.
            gen.stall_reported = True
            self.ctx.audit.append("scheduler.tick_stalled", generation=gen.id, pid=os.getpid(),
                                  silent_s=round(silent, 1))
            print(f"cronctl: warning: tick thread of generation {gen.id} is alive but has not ticked "
                  f"for {self.options.stall_after:.0f}s", file=sys.stderr)

    def _restart_generation(self, dead: Generation, why: str) -> None:
        assert self.engine is not None
        gen_id = self._new_generation_id()
        with self.tick_lock:
            adopted = self.engine.adopt(self._owner(gen_id))
            self.ctx.leases.bump("generation_restarted")
        self.ctx.audit.append(AuditEvent.SCHEDULER_GENERATION_RESTARTED, pid=os.getpid(), previous=dead.id,
                              generation=gen_id, reason=why, adopted_runs=adopted)
        print(f"cronctl: warning: {why}; restarted as generation {gen_id}", file=sys.stderr)
        self._start_generation(gen_id)

    def _tick_loop(self, gen: Generation) -> None:
        # Also ends on a stop request, so the main thread, waiting on this thread, wakes at once.
        woken = True  # the first beat ticks
        while not gen.stop.is_set() and not self.stop_event.is_set():
            hint = 1.0
            with self.tick_lock:
                if gen.stop.is_set():
                    break
                try:
                    hint = self._beat_only() if self._quiet_beat(woken) else self._tick()
                except Exception as exc:  # a tick error must never end the loop
                    self._report_tick_error(exc)
            gen.last_beat = self.ctx.clock.monotonic()
            gen.stall_reported = False
            self.heartbeat.period = max(1.0, hint)  # declared in the tick record: when to expect the next
            try:
                self._write_heartbeat(stopped_cleanly=False, tick=True)
                if self.hooks.after_tick is not None:
                    self.hooks.after_tick(self.ctx)
            except Exception as exc:
                self._report_tick_error(exc)
            if self.options.once and self._once_done():
                self.request_stop()
                return
            woken = self.wake.wait(hint)
            self.wake.clear()

    def _quiet_beat(self, woken: bool) -> bool:
        """Whether this beat may skip the tick (loop/idlebeat.py: nothing can have changed)."""
        return self.idle_beats.beat_only(woken, self.ctx.clock.monotonic(), self.clock_watch.stepped())

    def _beat_only(self) -> float:
        self.ticks += 1
        return self.idle_beats.wait(self.ctx.clock.monotonic(), IDLE_BEAT)

    def _store_changed(self) -> None:
        """The store watch saw a write: it wakes the tick thread only while it sleeps idle; a
        busy loop sees the store at its next tick, as it always did (its own writes among them)."""
        if self.idle_beats.spell is not None:
            self.wake.set()

    def _tick(self) -> float:
        """One tick, the same on every store; what differs is the backend's beat (loop/beat.py)."""
        assert self.engine is not None
        self.idle_beats.end()
        self.ticks += 1
        self._watch_clock(self.engine)
        if self.options.once and self.ticks > 1:
            # --once fires what was due at its first tick; after that it only tends those runs
            # (a slot that comes due while they run is the next loop's).
            return self.engine.tend()
        beat = self._beat()
        wait = beat.begin()
        if wait is not None:
            return wait  # the store is out of reach: nothing is claimed or written
        with self.engine.due.steady():  # one look at the store for the whole tick
            if beat.heal_due(self.ctx.clock.monotonic() - self._last_heal):
                self._heal()
                beat.healed()
            beat.serve(self.engine)
            control.serve(self.ctx.paths, self.engine)  # requests of this host's commands
            hint = self.engine.tick().sleep_hint
        beat.end()
        return self._rest(hint)

    def _beat(self) -> TickBeat:
        if self.beat is None:  # a loop built by hand (tests); _start_engine builds it otherwise
            assert self.engine is not None and self.cluster is None
            self.beat = JsonBeat(self.ctx, self.engine.due, self.options.heal_every)
        return self.beat

    def _rest(self, hint: float) -> float:
        """How long the tick thread waits: the engine's hint, or an idle spell (IDLE_BEAT)."""
        if hint < 1.0 or not self._may_idle():
            return hint
        assert self.engine is not None
        wait = self.engine.sleep_hint(IDLE_BEAT)
        self.idle_beats.begin(self.engine.due.signature, self.ctx.clock.monotonic(), wait, IDLE_BEAT)
        # From now on a write wakes the thread (_store_changed); one that came before, since
        # the tick's read, is seen by this stat.
        return wait if self.idle_beats.unchanged() else 0.0

    def _may_idle(self) -> bool:
        """Whether the tick thread may sleep longer than a second (IDLE_BEAT): only when
        nothing but the store's own changes and the clock can give it work, and those
        changes wake it (a store watch that runs)."""
        engine, options = self.engine, self.options
        assert engine is not None
        if options.once or options.file is not None or options.http is not None or options.metrics_file is not None:
            return False
        if self.service.watch_period is not None or options.stall_after <= 2 * IDLE_BEAT:
            return False
        if engine.active or engine.held or engine.due.watching:  # on PostgreSQL it always is
            return False
        if self.notify_worker is not None and self.notify_worker.busy():
            return False
        return self._store_watched()

    def _store_watched(self) -> bool:
        if self._store_watch is None:  # not yet on the first idle tick: a write since its read is seen next tick
            store = self.ctx.paths.store
            self._store_watch = StoreWatch(store.parent, frozenset({store.name}), self._store_changed)
            self._store_watch.start()
            return False
        return self._store_watch.alive

    def _watch_clock(self, engine: Engine) -> None:
        """A wall-clock step: audited and shown, and followed as the backend's beat says."""
        step = self.clock_watch.check()
        if step is None:
            return
        record_step(self.ctx, step, self._beat().clock_stepped(engine, step))
        self.heartbeat.clock_jump = step.to_dict()

    def _once_done(self) -> bool:
        return self.engine is not None and self.ticks >= 1 and not self.engine.active

    def _report_tick_error(self, exc: BaseException) -> None:
        try:
            print(f"cronctl: error in tick (the loop goes on): {type(exc).__name__}: {exc}", file=sys.stderr)
            if os.environ.get("CRONCTL_DEBUG"):
                traceback.print_exc()
        except Exception:
            pass

    # --- healing ---------------------------------------------------------------------------

    def _heal(self) -> HealReport:
        assert self.engine is not None
        self._last_heal = self.ctx.clock.monotonic()
        given = self._beat().heal_inputs()
        if not given.found:
            return HealReport()  # no claim and no failed run: nothing can need healing
        report = heal_pass(self.ctx, given.now, given.live, given.kill, supervised=self.engine.active.keys(),
                           found=given.found)
        self.engine.ended_elsewhere([run_id for _job, run_id in report.deadline_terminated])
        if report.anything:
            self.wake.set()
        return report

    # --- what the loop tells: heartbeat, service manager, HTTP ----------------------------------

    def _write_heartbeat(self, stopped_cleanly: bool, tick: bool = False) -> None:
        """scheduler.json and the tick record; `tick`: a tick's beat, which rewrites the file
        only when what it says changed or it is due (see loop/heartbeat.py)."""
        gen = self.generation
        said: dict[str, Any] = {"generation": gen.id if gen else None, "ticks": self.ticks,
                                "active_runs": self._active_runs()}
        if tick:
            problem = self.heartbeat.beat(**said)
        else:
            problem = self.heartbeat.write(**said, stopped_cleanly=stopped_cleanly)
        if problem == self._heartbeat_problem:
            return
        # Said once per change, on stderr: on a full disk an audit row would fail like the heartbeat.
        self._heartbeat_problem = problem
        if problem is not None:
            print(f"cronctl: warning: cannot write the heartbeat ({problem}); the loop goes on ticking and "
                  "'cronctl status' says so (from heartbeat.tick)", file=sys.stderr, flush=True)
        else:
            print("cronctl: the heartbeat is written again", file=sys.stderr, flush=True)

    def service_status(self) -> str:
        """The one STATUS= line: jobs, running, and when the last tick completed."""
        jobs = self.engine.due.job_count if self.engine else 0
        running = self._active_runs()
        clock, gen = self.ctx.clock, self.generation
        ago = clock.monotonic() - gen.last_beat if gen is not None else 0.0
        last_tick = to_iso(clock.now() - timedelta(seconds=max(0.0, ago)))
        return f"leading: {jobs} jobs, {running} running, last tick {last_tick}"

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        """/livez: alive while the tick thread progresses (a standby, or a loop starting up, is alive)."""
        gen = self.generation
        if self.role != "leader" or gen is None:
            return True, {"live": True, "role": self.role}
        age = self.ctx.clock.monotonic() - gen.last_beat
        live = age <= self.options.live_after and gen.thread is not None and gen.thread.is_alive()
        return live, {"live": live, "role": self.role, "generation": gen.id, "ticks": self.ticks,
                      "last_tick_age_s": round(age, 3)}

    def _livez(self) -> Reply:
        from cronctl.loop.endpoint import Reply

        live, body = self.liveness()
        return Reply(200 if live else 503, (json.dumps(body) + "\n").encode())

    def _start_endpoint(self) -> None:
        if self.options.http is None:
            return
        from cronctl.loop.endpoint import Endpoint

        routes: dict[str, Route] = {"/livez": self._livez}
        if self.hooks.http_routes is not None:
            routes.update(self.hooks.http_routes())
        handlers = self.hooks.http_handlers() if self.hooks.http_handlers is not None else {}
        actions = self.hooks.http_actions() if self.hooks.http_actions is not None else None
        self.endpoint = Endpoint(*self.options.http, routes, handlers, actions)
        self.endpoint.start()
        host, port = self.endpoint.address
        self._say(f"cronctl: serving {', '.join(sorted({*routes, *handlers}))} on http://{host}:{port}")

    # --- the watched file ---------------------------------------------------------------------

    def _apply_file(self, initial: bool) -> None:
        assert self.options.file is not None
        if self._watched_file is None:
            self._watched_file = WatchedFile(self.ctx, self.options.file, self.hooks.apply_file, self._say,
                                             self.wake.set, self._active_runs)
        self._watched_file.apply(initial)

    def _active_runs(self) -> int:
        return len(self.engine.active) if self.engine else 0

    def _say(self, message: str) -> None:
        if not self.options.quiet:
            print(message, file=sys.stderr, flush=True)


def stopped_words(ended: int, handed_back: int) -> str:
    """The loop's last line, once, in plain words: what it ended and what it did not start."""
    if ended == 0:
        said = "nothing was running"
    else:
        said = "it ended the run still going" if ended == 1 else f"it ended the {ended} runs still going"
    if handed_back == 1:
        said += "; 1 run due in a moment was not started and keeps its slot"
    elif handed_back:
        said += f"; {handed_back} runs due in a moment were not started and keep their slots"
    return f"cronctl: loop stopped; {said}"


def _os_words(exc: OSError) -> str:
    """'PATH: No space left on device', the path being the file the call was about."""
    path = exc.filename2 or exc.filename
    reason = exc.strerror or str(exc)
    return f"{path}: {reason}" if path else reason
