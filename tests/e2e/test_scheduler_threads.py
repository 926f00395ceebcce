"""Generations and the watchdog, in-process: a dead tick thread is replaced, a stop aims at one generation."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.loophelp import wait_until

from cronctl.context import Context
from cronctl.loop.scheduler import LoopOptions, Scheduler


class ThreadDeath(BaseException):
    """Escapes the tick's `except Exception`, like a bug that kills a thread outright."""


@pytest.fixture
def loop(home: Path):  # type: ignore[no-untyped-def]
    scheduler = Scheduler(Context.open(home), LoopOptions(quiet=True))
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    wait_until(lambda: scheduler.generation is not None and scheduler.ticks >= 1, 20)
    yield scheduler
    scheduler.request_stop()
    thread.join(timeout=30)
    assert not thread.is_alive()


def events(scheduler: Scheduler, name: str) -> list[dict[str, Any]]:
    return [row for row in scheduler.ctx.audit.rows() if row["event"] == name]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_dead_tick_thread_is_restarted_as_a_new_generation(loop: Scheduler) -> None:
    first = loop.generation
    assert first is not None
    real_tick = loop._tick
    calls = {"n": 0}

    def dying_tick() -> float:
        calls["n"] += 1
        if calls["n"] == 1:
            raise ThreadDeath()
        return real_tick()

    loop._tick = dying_tick  # type: ignore[method-assign]
    loop.wake.set()
    (row,) = wait_until(lambda: events(loop, "scheduler.generation_restarted"), 20)
    assert row["previous"] == first.id and row["generation"] != first.id
    ticks = loop.ticks
    wait_until(lambda: loop.ticks > ticks + 1, 20)  # the new generation ticks
    assert loop.generation is not None and loop.generation.id == row["generation"]
    assert loop.ctx.store.read()["counters"]["generation_restarted"] == 1


@pytest.mark.slow
def test_exception_in_a_tick_never_ends_the_loop(loop: Scheduler) -> None:
    real_tick = loop._tick
    calls = {"n": 0}

    def failing_tick() -> float:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise RuntimeError("disk hiccup")
        return real_tick()

    loop._tick = failing_tick  # type: ignore[method-assign]
    loop._quiet_beat = lambda woken: False  # type: ignore[method-assign]  # every beat ticks (loop/idlebeat.py)
    loop.wake.set()
    gen = loop.generation
    wait_until(lambda: calls["n"] > 5, 20)
    assert loop.generation is gen, "an ordinary exception is survived, not restarted"
    assert events(loop, "scheduler.generation_restarted") == []


@pytest.mark.slow
def test_stop_aimed_at_an_old_generation_never_ends_the_new_one(loop: Scheduler) -> None:
    old = loop.generation
    assert old is not None
    new = loop._start_generation("second")
    old.stop.set()  # a late stop for generation N
    ticks = loop.ticks
    wait_until(lambda: loop.ticks > ticks + 2, 20)
    assert new.thread is not None and new.thread.is_alive()
    assert old.thread is not None and not old.thread.is_alive()


@pytest.mark.slow
def test_alive_but_silent_tick_thread_is_reported_once_and_never_duplicated(home: Path) -> None:
    scheduler = Scheduler(Context.open(home), LoopOptions(quiet=True, stall_after=0.5))
    release = threading.Event()
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: scheduler.generation is not None and scheduler.ticks >= 1, 20)
        real_tick = scheduler._tick

        def hung_tick() -> float:
            release.wait(30)
            return real_tick()

        scheduler._tick = hung_tick  # type: ignore[method-assign]
        scheduler.wake.set()
        wait_until(lambda: events(scheduler, "scheduler.tick_stalled"), 20)
        time.sleep(1.5)
        assert len(events(scheduler, "scheduler.tick_stalled")) == 1
        assert events(scheduler, "scheduler.generation_restarted") == []
        ticking = [t for t in threading.enumerate() if t.name.startswith("cronctl-tick-")]
        assert len(ticking) == 1
    finally:
        release.set()
        scheduler.request_stop()
        thread.join(timeout=30)


def test_a_request_the_loop_fails_to_serve_is_answered_not_left_to_time_out(tmp_path: Path) -> None:
    from cronctl.loop import control
    from cronctl.paths import Paths

    class BrokenEngine:
        def force(self, job: str) -> None:
            raise RuntimeError("boom")

    paths = Paths(tmp_path)
    request_id = control.send_request(paths, "force_run", None, job="j")
    control.serve(paths, BrokenEngine())  # type: ignore[arg-type]
    reply = control.wait_reply(paths, request_id, 1.0, alive=lambda: True)
    assert reply is not None and reply["ok"] is False and "RuntimeError: boom" in reply["error"]
    assert control.pending_requests(paths) == []


class SignalInsideSet(threading.Event):
    """An event whose `set` is interrupted, while it holds its lock, by a signal handler: what
    a second SIGUSR1 arriving inside the first one's handler does (injected, since a real
    signal lands there only sometimes)."""

    def __init__(self, handler: Any) -> None:
        super().__init__()
        self.handler = handler
        self.interrupted = False

    def set(self) -> None:
        with self._cond:  # type: ignore[attr-defined]
            if not self.interrupted:
                self.interrupted = True
                self.handler()  # the nested handler, with the lock held
            self._flag = True  # type: ignore[attr-defined]
            self._cond.notify_all()  # type: ignore[attr-defined]


def test_a_signal_inside_another_signals_handler_neither_deadlocks_nor_is_lost(home: Path) -> None:
    scheduler = Scheduler(Context.open(home), LoopOptions(quiet=True))
    scheduler.wake = SignalInsideSet(lambda: scheduler._signalled(stop=True))
    done = threading.Thread(target=scheduler._signalled, kwargs={"stop": False}, daemon=True)
    done.start()
    done.join(timeout=5)
    assert not done.is_alive(), "a handler inside another's Event.set deadlocked"
    assert scheduler.wake.interrupted and scheduler.wake.is_set()
    assert scheduler.stop_event.is_set(), "the nested handler's stop was lost"
