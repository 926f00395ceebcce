"""Wall-clock steps (SPEC §4): seen against the monotonic clock, audited `clock.jumped`, shown by
`status`; after a backward step `every` jobs keep their elapsed-time cadence (injected clock)."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.jobs.state import entry_from, new_state
from cronctl.loop.clockstep import ClockWatch, follow_backward_step, record_step, shift_interval_slots
from cronctl.loop.engine import build_engine
from cronctl.loop.heartbeat import HeartbeatWriter, loop_status
from cronctl.models import JobSpec, Overlap
from cronctl.paths import open_home
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Owner
from cronctl.store.jsonstore import Store
from cronctl.timefmt import to_iso
from tests.helpers.loophelp import audit_rows

START = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


def test_a_step_over_two_seconds_either_way_is_seen_and_a_slew_is_not() -> None:
    clock = FakeClock(START)
    watch = ClockWatch(clock)
    clock.advance(30)
    assert watch.check() is None  # time passing is no step
    clock.set_wall(clock.now() + timedelta(seconds=1.5))
    assert watch.check() is None  # under the threshold
    clock.set_wall(clock.now() - timedelta(seconds=60))
    back = watch.check()
    assert back is not None and round(back.step_s) == -60 and back.wall_before - back.wall_after == timedelta(
        seconds=60)
    assert watch.check() is None  # said once
    clock.set_wall(clock.now() + timedelta(seconds=2.5))
    forward = watch.check()
    assert forward is not None and round(forward.step_s, 1) == 2.5


def test_a_backward_step_moves_every_slots_and_retries_but_never_cron_slots() -> None:
    doc = {"jobs": {
        "tick": {"every": "5s", "state": {"next_run_at": to_iso(START), "retry": {"due_at": to_iso(START)}}},
        "nightly": {"cron": "0 3 * * *", "every": None, "state": {"next_run_at": to_iso(START)}},
    }}
    assert shift_interval_slots(doc, -60.0) == ["tick"]
    earlier = to_iso(START - timedelta(seconds=60))
    assert doc["jobs"]["tick"]["state"]["next_run_at"] == earlier
    assert doc["jobs"]["tick"]["state"]["retry"]["due_at"] == earlier
    assert doc["jobs"]["nightly"]["state"]["next_run_at"] == to_iso(START)


@pytest.mark.slow
def test_after_a_backward_step_an_every_5s_job_keeps_firing_every_5s(tmp_path: Path) -> None:
    paths = open_home(tmp_path / "h")
    clock = FakeClock(START)
    ctx = Context(paths, Store(paths), AuditLog(paths.audit), clock)
    with ctx.store.transaction() as doc:
        doc["jobs"]["tick"] = entry_from(JobSpec(name="tick", command="true", every=5.0, overlap=Overlap.ALLOW),
                                         new_state(START, START))
    engine = build_engine(ctx, Owner("g", 1, 1.0, "b"))
    engine.supervisor.start()
    watch = ClockWatch(clock)

    def claims_over(seconds: int) -> int:
        claimed = 0
        for _ in range(seconds):
            clock.advance(1)
            step = watch.check()
            if step is not None:
                record_step(ctx, step, follow_backward_step(ctx, engine, step) if step.step_s < 0 else [])
            claimed += engine.tick().claimed
            engine.supervisor.wait_idle(5)
            time.sleep(0.01)
        return claimed

    try:
        assert claims_over(11) == 3  # the slots at the start, +5 s and +10 s
        clock.set_wall(clock.now() - timedelta(minutes=10))  # NTP steps the clock back ten minutes
        assert claims_over(11) == 2  # not ten minutes of silence: 5 s after the last slot, then 5 s later
    finally:
        engine.shutdown(wait=30)
    (row,) = audit_rows(paths.home, "clock.jumped")
    assert (row["direction"], round(row["step_s"]), row["every_jobs_moved"]) == ("backward", -600, 1)


def test_status_shows_the_last_step(tmp_path: Path) -> None:
    paths = open_home(tmp_path / "h")
    clock = FakeClock(START)
    writer = HeartbeatWriter(paths, clock, None, "boot", START, None)
    writer.prepare()
    writer.clock_jump = {"at": to_iso(START), "step_s": -600.0}
    writer.write(generation="g", ticks=1, active_runs=0, stopped_cleanly=False)
    status = loop_status(paths, START)
    assert status.clock_jump == {"at": to_iso(START), "step_s": -600.0}
    from cronctl.cli.render import status_lines

    line = status_lines({"loop": status.to_dict(), "loop_stale": True, "jobs": [], "stale": True}, False)[0]
    assert "the wall clock stepped -600.0s at 2026-06-01T12:00:00" in line
