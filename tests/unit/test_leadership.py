"""Leadership on the injected clock: when a standby judges the leader wedged, and how it takes over."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.heartbeat import HeartbeatWriter
from cronctl.loop.leadership import Leadership, Takeover, record_takeover
from cronctl.proc import identity as procs
from cronctl.store.locks import SchedulerLock


def standby(ctx: Context, takeover_after: float = 60.0) -> Leadership:
    return Leadership(ctx, SchedulerLock(ctx.paths.scheduler_lock), takeover_after, threading.Event(),
                      procs.identify(os.getpid()), procs.boot_id(), lambda _: None)


def beat(ctx: Context, stopped_cleanly: bool = False) -> None:
    HeartbeatWriter(ctx.paths, ctx.clock, procs.identify(os.getpid()), procs.boot_id(), ctx.clock.now(),
                    None).write(generation="g", ticks=1, active_runs=0, stopped_cleanly=stopped_cleanly)


def test_a_leader_is_wedged_only_after_takeover_after_of_silence_on_the_clock(home: Path) -> None:
    clock = FakeClock()
    ctx = Context.open(home, clock=clock)
    beat(ctx)
    watcher = standby(ctx, takeover_after=60.0)
    clock.advance(59.0)
    assert not watcher._leader_wedged()
    clock.advance(2.0)
    assert watcher._leader_wedged()
    beat(ctx, stopped_cleanly=True)  # a leader that stopped cleanly is never wedged
    clock.advance(120.0)
    assert not watcher._leader_wedged()


def test_the_lock_free_at_once_is_a_takeover_of_a_stopped_leader(home: Path) -> None:
    ctx = Context.open(home, clock=FakeClock())
    beat(ctx, stopped_cleanly=True)
    watcher = standby(ctx)
    takeover = watcher.wait()
    try:
        assert takeover == Takeover("leader_stopped", 0.0)
        assert not (ctx.paths.home / "standby.json").exists()  # a leader is nobody's standby
        record_takeover(ctx, takeover, {"pid": 4242})
        (row,) = [r for r in ctx.audit.rows() if r["event"] == "scheduler.takeover"]
        assert (row["reason"], row["previous_pid"], row["waited_s"]) == ("leader_stopped", 4242, 0.0)
        assert ctx.store.read()["counters"]["takeover"] == 1
    finally:
        watcher.lock.release()


def test_a_stop_while_waiting_ends_the_wait(home: Path) -> None:
    ctx = Context.open(home, clock=FakeClock())
    holder = SchedulerLock(ctx.paths.scheduler_lock)
    assert holder.try_acquire()
    try:
        watcher = standby(ctx)
        watcher.stop.set()
        assert watcher.wait() is None
    finally:
        holder.release()
