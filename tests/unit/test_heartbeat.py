"""The heartbeat on the injected clock: the tick record every tick, scheduler.json when it says something new."""

from __future__ import annotations

import os
from pathlib import Path

from cronctl.clock import FakeClock
from cronctl.loop.heartbeat import HEARTBEAT_FILE_EVERY, HeartbeatWriter, read_heartbeat, tick_path
from cronctl.paths import Paths
from cronctl.proc import identity as procs
from cronctl.store.statefiles import read_json


def writer(home: Path, clock: FakeClock) -> HeartbeatWriter:
    home.mkdir(parents=True, exist_ok=True)
    beats = HeartbeatWriter(Paths(home), clock, procs.identify(os.getpid()), procs.boot_id(), clock.now(), None)
    beats.prepare()
    return beats


def written(home: Path) -> dict:
    data = read_json(Paths(home).heartbeat)
    assert data is not None
    return data


def test_an_idle_tick_overwrites_the_tick_record_and_rewrites_the_file_only_when_due(home: Path) -> None:
    clock = FakeClock()
    beats = writer(home, clock)
    assert beats.beat(generation="g1", ticks=1, active_runs=0) is None
    first = written(home)
    assert first["ticks"] == 1
    for tick in range(2, 6):  # four more seconds: the file is not due yet
        clock.advance(1.0)
        beats.beat(generation="g1", ticks=tick, active_runs=0)
    assert written(home) == first
    seen = read_heartbeat(Paths(home))
    assert seen is not None
    assert (seen["ticks"], seen["last_tick_mono"]) == (5, clock.monotonic())
    assert seen["last_tick_at"] == read_json(tick_path(Paths(home)))["at"]
    clock.advance(HEARTBEAT_FILE_EVERY - 4.0)
    beats.beat(generation="g1", ticks=6, active_runs=0)
    assert (written(home)["ticks"], written(home)["last_tick_mono"]) == (6, clock.monotonic())


def test_what_the_file_says_is_written_at_the_tick_it_changes(home: Path) -> None:
    clock = FakeClock()
    beats = writer(home, clock)
    beats.beat(generation="g1", ticks=1, active_runs=0)
    clock.advance(1.0)
    beats.beat(generation="g1", ticks=2, active_runs=3)  # runs started
    assert written(home)["active_runs"] == 3
    clock.advance(1.0)
    beats.beat(generation="g2", ticks=3, active_runs=3)  # a restarted tick thread
    assert written(home)["generation"] == "g2"


def test_a_tick_record_of_another_process_is_not_taken_for_this_loop(home: Path) -> None:
    clock = FakeClock()
    beats = writer(home, clock)
    beats.beat(generation="g1", ticks=1, active_runs=0)
    paths = Paths(home)
    record = read_json(tick_path(paths))
    assert record is not None
    record.update(pid=record["pid"] + 1, mono=record["mono"] + 100.0, ticks=999)
    tick_path(paths).write_text(str(record).replace("'", '"').replace("None", "null"))
    seen = read_heartbeat(paths)
    assert seen is not None and seen["ticks"] == 1


def test_a_file_that_cannot_be_written_is_retried_every_tick_and_the_tick_record_says_why(home: Path) -> None:
    clock = FakeClock()
    beats = writer(home, clock)
    paths = Paths(home)
    paths.heartbeat.mkdir()  # os.replace onto a directory fails like a full disk would
    problem = beats.beat(generation="g1", ticks=1, active_runs=0)
    assert problem is not None and "scheduler.json" in problem
    clock.advance(1.0)
    assert beats.beat(generation="g1", ticks=2, active_runs=0) == problem  # tried again, not skipped
    record = read_json(tick_path(paths))
    assert record is not None and record["error"] == problem and record["ticks"] == 2
    paths.heartbeat.rmdir()
    clock.advance(1.0)
    assert beats.beat(generation="g1", ticks=3, active_runs=0) is None
    assert written(home)["ticks"] == 3
    assert read_json(tick_path(paths))["error"] is None


def test_an_idle_beat_rewrites_the_file_each_time_so_it_is_never_older_than_its_bound(home: Path) -> None:
    clock = FakeClock()
    beats = writer(home, clock)
    beats.period = 5.0  # an idle loop's beat (loop/scheduler.py IDLE_BEAT)
    beats.beat(generation="g1", ticks=1, active_runs=0)
    for tick in range(2, 5):
        clock.advance(5.0)
        beats.beat(generation="g1", ticks=tick, active_runs=0)
        assert written(home)["ticks"] == tick  # at the next beat it would be 10 s old
    beats.period = 1.0
    clock.advance(1.0)
    beats.beat(generation="g1", ticks=5, active_runs=0)  # back to 1 s ticks: the file waits its 5 s
    assert written(home)["ticks"] == 4
