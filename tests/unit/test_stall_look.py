"""The main thread of a loop without systemd or --file looks for a silent tick thread when
it could first be silent for stall_after, not every few seconds (loop/scheduler.py)."""

from __future__ import annotations

from pathlib import Path

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.scheduler import IDLE_WATCH_PERIOD, WATCHDOG_PERIOD, Generation, LoopOptions, Scheduler


def test_the_look_comes_when_the_tick_thread_could_first_be_stalled(home: Path) -> None:
    clock = FakeClock()
    scheduler = Scheduler(Context.open(home, clock=clock), LoopOptions(quiet=True, stall_after=30.0))
    assert scheduler._stall_look_in() == IDLE_WATCH_PERIOD  # no tick thread yet
    gen = Generation("g", clock)
    scheduler.generation = gen
    assert scheduler._stall_look_in() == 30.0  # it just beat
    clock.advance(25.0)
    assert scheduler._stall_look_in() == 5.0
    clock.advance(10.0)
    assert scheduler._stall_look_in() == WATCHDOG_PERIOD  # overdue: looked at again shortly
    gen.stall_reported = True
    assert scheduler._stall_look_in() == IDLE_WATCH_PERIOD  # said once: no need to hurry
