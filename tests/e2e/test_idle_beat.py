"""An idle loop beats less often (IDLE_BEAT) and is woken at once by a write to the store
(loop/storewatch.py): a job added meanwhile is seen and fired as before, and a loop with
anything to watch keeps its one-second tick."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from tests.helpers.loophelp import wait_until

from cronctl.context import Context
from cronctl.loop import scheduler as scheduler_mod
from cronctl.loop.scheduler import LoopOptions, Scheduler
from cronctl.loop.storewatch import StoreWatch
from cronctl.models import JobSpec
from cronctl.ops.definitions import add_job


def test_store_watch_wakes_on_its_file_only(tmp_path: Path) -> None:
    woken = threading.Event()
    watch = StoreWatch(tmp_path, frozenset({"jobs.json"}), woken.set)
    assert watch.start() and watch.alive
    try:
        (tmp_path / ".other.tmp").write_text("x")
        os.replace(tmp_path / ".other.tmp", tmp_path / "other.json")
        assert not woken.wait(0.5)  # another file: no wake-up
        (tmp_path / ".jobs.json.tmp").write_text("{}")
        os.replace(tmp_path / ".jobs.json.tmp", tmp_path / "jobs.json")  # how every store write lands
        assert woken.wait(10)
        woken.clear()
        (tmp_path / "jobs.json").unlink()
        assert woken.wait(10)
    finally:
        watch.stop()
    wait_until(lambda: woken.is_set(), 10)  # a stopping watch wakes its sleeper once more
    assert not watch.alive


@pytest.fixture
def idle_loop(home: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    # A beat far longer than any wait below: only the store watch can wake this loop in time.
    monkeypatch.setattr(scheduler_mod, "IDLE_BEAT", 600.0)
    ctx = Context.open(home)
    add_job(ctx, JobSpec(name="hourly", command="true", every=3600.0))
    scheduler = Scheduler(ctx, LoopOptions(quiet=True, stall_after=3600.0))  # silent for long on purpose
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    wait_until(lambda: scheduler._store_watch is not None and scheduler._store_watch.alive and scheduler.ticks >= 2,
               30)
    yield scheduler
    scheduler.request_stop()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert scheduler._store_watch is not None and not scheduler._store_watch.alive


@pytest.mark.slow
def test_an_idle_loop_sleeps_and_a_job_added_meanwhile_fires(idle_loop: Scheduler) -> None:
    ticks = idle_loop.ticks
    time.sleep(1.5)
    assert idle_loop.ticks <= ticks + 1  # idle: no tick a second
    add_job(Context.open(idle_loop.ctx.paths.home), JobSpec(name="soon", command="true", every=1.0))
    records = wait_until(lambda: [r for r in idle_loop.ctx.leases.history("soon") if r.get("status") == "success"],
                         30)
    assert records
    # A job that runs every second: the loop ticks every second again while it does.
    ticks = idle_loop.ticks
    wait_until(lambda: idle_loop.ticks >= ticks + 3, 30)


@pytest.mark.slow
def test_a_loop_with_a_claim_to_watch_does_not_idle(idle_loop: Scheduler) -> None:
    assert idle_loop.engine is not None
    with idle_loop.tick_lock:
        assert idle_loop._may_idle()
        idle_loop.options.file = Path("jobs.yaml")  # a watched file is looked at every second
        assert not idle_loop._may_idle()
        idle_loop.options.file = None
        idle_loop.engine.due._next_late = idle_loop.ctx.clock.now()  # a job may go late unwritten
        assert not idle_loop._may_idle()
        idle_loop.engine.due._next_late = None
        assert idle_loop._may_idle()


def test_a_quiet_spell_ends_at_any_change(tmp_path: Path) -> None:
    from cronctl.loop.idlebeat import FULL_TICK_EVERY, IdleBeats
    from cronctl.store.jsonstore import StoreSignature

    store = tmp_path / "jobs.json"
    store.write_text("{}")
    beats = IdleBeats(store)
    assert not beats.beat_only(False, 0.0, False)  # no spell begun: tick
    beats.begin(StoreSignature.of(os.stat(store)), 100.0, 3.0, 3.0)
    assert beats.beat_only(False, 101.0, False) and beats.wait(101.0, 3.0) == 3.0
    assert not beats.beat_only(True, 101.0, False)  # woken
    assert not beats.beat_only(False, 101.0, True)  # the wall clock stepped
    assert not beats.beat_only(False, 100.0 + FULL_TICK_EVERY, False)  # a full tick now and then
    beats.begin(StoreSignature.of(os.stat(store)), 100.0, 2.0, 3.0)  # the engine acts in 2 s
    assert beats.beat_only(False, 101.0, False) and beats.wait(101.0, 3.0) == 1.0
    assert not beats.beat_only(False, 102.0, False)
    beats.begin(StoreSignature.of(os.stat(store)), 100.0, 3.0, 3.0)
    (tmp_path / "new").write_text('{"jobs": {}}')
    os.replace(tmp_path / "new", store)  # another writer
    assert not beats.beat_only(False, 101.0, False)
    store.unlink()
    assert not beats.beat_only(False, 101.0, False)
    beats.end()
    assert not beats.beat_only(False, 101.0, False)
