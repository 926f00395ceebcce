"""Slots claimed ahead: children spawned at the gate before their instant, released at it.

In-process with a FakeClock and the real Supervisor (real, gated children): what the
store, the audit log and the file system show before the instant, at it, and when the
job changed in between. Plus the idle tick that must not re-read the store, and the
loop killed while children wait at their gates (a real `cronctl run`).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.store import history as history_mod
from cronctl.ops import definitions as ops
from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.engine import Engine, EngineOptions
from cronctl.loop.scheduler import LoopOptions, Scheduler
from cronctl.timefmt import from_iso, to_iso
from tests.helpers.enginehelp import wired_engine
from tests.helpers.loophelp import audit_rows, start_loop, stop, wait_until

pytestmark = pytest.mark.slow

LEAD = 2.0


class Rig:
    def __init__(self, home: Path) -> None:
        self.clock = FakeClock(datetime.now(timezone.utc).replace(microsecond=0))
        self.ctx = Context.open(home, clock=self.clock)
        self.ctx.audit.clock = self.clock
        self.engine = wired_engine(self.ctx, options=EngineOptions(prespawn_lead=LEAD))
        self.supervisor = self.engine.supervisor
        self.supervisor.start()

    def add(self, name: str, command: str, every: str = "1h") -> datetime:
        ops.add_job(self.ctx, ops.spec_from_options(name, {"every": every, "command": command}))
        slot = from_iso(self.state(name)["next_run_at"])
        assert slot is not None
        return slot

    def state(self, name: str) -> dict[str, Any]:
        return self.ctx.store.read()["jobs"][name]["state"]

    def at(self, instant: datetime) -> None:
        self.clock.advance((instant - self.clock.now()).total_seconds())

    def rows(self, event: str, job: str) -> list[dict[str, Any]]:
        return [r for r in self.ctx.audit.rows() if r["event"] == event and r.get("job") == job]

    def settle(self) -> None:
        """Let every child end and its result be recorded (the quiet window passed)."""
        assert self.supervisor.wait_idle(20), "a run was left waiting"
        self.clock.advance(2.0)
        self.engine.tick()


@pytest.fixture
def rig(home: Path) -> Iterator[Rig]:
    rig = Rig(home)
    yield rig
    rig.supervisor.shutdown(wait=20)


def test_a_slot_claimed_ahead_waits_at_its_gate_and_runs_once_at_its_instant(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    slot = rig.add("early", f"echo ran >> {marker}")
    rig.at(slot - timedelta(seconds=LEAD - 0.5))
    assert rig.engine.tick().claimed == 1
    state = rig.state("early")
    (claim,) = state["claims"].values()
    assert claim["slot"] == to_iso(slot) and claim["held_until"] == to_iso(slot)
    assert claim["dispatched"] is False, "nothing has begun: a crash now is run_claimed_without_dispatch"
    assert state["next_run_at"] == to_iso(slot + timedelta(hours=1)), "the claim advanced past its slot"
    assert len(rig.supervisor.running()) == 1, "its child waits at the gate"
    assert not marker.exists()

    rig.at(slot - timedelta(milliseconds=20))
    rig.engine.tick()
    (claim,) = rig.state("early")["claims"].values()
    assert claim["dispatched"] is True and claim["child"]["pid"] > 0
    wait_until(marker.exists, 10)
    rig.settle()
    assert marker.read_text() == "ran\n"
    (record,) = history_mod.read_records(rig.ctx.paths, "early")
    assert (record["status"], record["slot"], record["started_at"]) == ("success", to_iso(slot), to_iso(slot))
    assert [r["event"] for r in rig.ctx.audit.rows() if r.get("run_id") == claim["run_id"]] == [
        "run.claimed", "run.started", "run.finished"]
    assert rig.state("early")["runs_started"] == 1
    assert rig.ctx.store.read()["metrics"]["fire_lateness_seconds"]["count"] == 1


@pytest.mark.parametrize("change", ["pause", "edit", "remove"])
def test_a_child_held_at_the_gate_is_cancelled_when_its_job_changes_before_the_slot(
        rig: Rig, tmp_path: Path, change: str) -> None:
    marker = tmp_path / "ran"
    slot = rig.add("held", f"touch {marker}")
    rig.at(slot - timedelta(seconds=1))
    rig.engine.tick()
    (run_id,) = rig.state("held")["claims"]
    if change == "pause":
        ops.pause_job(rig.ctx, "held")
    elif change == "edit":
        ops.edit_job(rig.ctx, "held", {"command": f"touch {marker}.new"}, [])
    else:
        _remove_claimed(rig, "held")
    rig.at(slot - timedelta(milliseconds=20))
    rig.engine.tick()
    assert rig.supervisor.wait_idle(20), "the held child was not cancelled"
    assert not marker.exists(), "nothing of the cancelled run ran"
    (skipped,) = [r for r in rig.ctx.audit.rows() if r["event"] == "run.skipped" and r.get("run_id") == run_id]
    assert skipped["reason"] == "cancelled_before_slot"
    assert skipped["why"] == {"pause": "paused", "edit": "edited", "remove": "removed"}[change]
    assert run_id not in rig.engine.active and not rig.engine.held
    if change != "remove":
        state = rig.state("held")
        assert state["claims"] == {}
        assert state["next_run_at"] == to_iso(slot), "the slot is handed back, as if never claimed"
        assert state["runs_started"] == 0 and state["last_status"] is None
    if change == "edit":
        # The slot still fires, with the new command, through the ordinary path at its instant.
        rig.at(slot)
        rig.engine.tick()
        wait_until(Path(f"{marker}.new").exists, 10)
    rig.settle()
    assert not [r for r in rig.ctx.audit.rows() if r.get("run_id") == run_id and r["event"] == "run.finished"]
    records = history_mod.read_records(rig.ctx.paths, "held")
    assert [r["status"] for r in records] == (["success"] if change == "edit" else [])
    assert run_id not in {r["run_id"] for r in records}


def _remove_claimed(rig: Rig, name: str) -> None:
    # `cronctl remove` refuses a job with a claim (--force kills its processes first);
    # what matters here is the job vanishing from the store before the instant.
    with rig.ctx.store.transaction() as doc:
        del doc["jobs"][name]


def test_stopping_the_loop_hands_back_runs_still_at_their_gate(rig: Rig, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    slot = rig.add("stopped", f"touch {marker}")
    rig.at(slot - timedelta(seconds=1))
    rig.engine.tick()
    (run_id,) = rig.state("stopped")["claims"]
    rig.engine.shutdown()
    state = rig.state("stopped")
    assert state["claims"] == {} and state["next_run_at"] == to_iso(slot)
    assert not marker.exists()
    (skipped,) = rig.rows("run.skipped", "stopped")
    assert (skipped["run_id"], skipped["why"]) == (run_id, "shutdown")
    assert history_mod.read_records(rig.ctx.paths, "stopped") == []


def test_a_job_with_a_running_run_is_not_claimed_ahead(rig: Rig) -> None:
    """An overlap decision belongs to the slot's instant, not to two seconds before it."""
    slot = rig.add("busy", "sleep 30", every="2s")
    rig.at(slot)
    assert rig.engine.tick().claimed == 1  # the ordinary claim at the instant
    rig.clock.advance(0.5)
    assert rig.engine.tick().claimed == 0, "the next slot waits for its instant"
    assert not rig.rows("run.skipped", "busy")
    assert len(rig.state("busy")["claims"]) == 1


# --- the idle tick -------------------------------------------------------------------------


class NoSpawnSupervisor:
    def __init__(self, **_: Any) -> None:
        pass

    def running(self) -> list[str]:
        return []


def test_an_idle_tick_reads_the_store_only_after_the_file_changed(home: Path) -> None:
    clock = FakeClock(datetime.now(timezone.utc))
    ctx = Context.open(home, clock=clock)
    for index in range(50):
        ops.add_job(ctx, ops.spec_from_options(f"idle-{index}", {"every": "1h", "command": "true"}))
    reads: list[int] = []
    real = ctx.store._read_raw

    def counted() -> Any:
        reads.append(1)
        return real()

    ctx.store._read_raw = counted  # type: ignore[method-assign]
    scheduler = Scheduler(ctx, LoopOptions(quiet=True))
    scheduler.engine = Engine(ctx, NoSpawnSupervisor(), scheduler._owner("idle"),  # type: ignore[arg-type]
                              EngineOptions(prespawn_lead=LEAD))

    def idle_tick() -> None:
        scheduler._last_heal = 0.0  # heal on every tick, as an idle loop does once a second
        scheduler._tick()
        clock.advance(1.0)

    idle_tick()
    first = len(reads)
    assert first == 1, "the first tick reads the store once, for the engine and the healer"
    for _ in range(5):
        idle_tick()
    assert len(reads) == first, "an idle tick must not re-read the store"
    with Context.open(home).store.transaction() as doc:  # another process changes it
        doc["counters"]["touched"] = 1
    idle_tick()
    assert len(reads) == first + 1
    idle_tick()
    assert len(reads) == first + 1


# --- a real loop killed while children wait at their gates -------------------------------------


def test_loop_killed_with_children_at_the_gate_leaves_runs_that_provably_never_ran(
        home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ctx = Context.open(home)
    ops.add_job(ctx, ops.spec_from_options("gatekept", {"every": "5s", "command": f"echo x >> {marker}"}))
    loop = start_loop(home, env={"CRONCTL_FAULT_LOOP_CRASH": "held_at_gate"})
    assert loop.wait(timeout=30) == -signal.SIGKILL
    (claim_row,) = audit_rows(home, "run.claimed", "gatekept")
    assert claim_row["held_until"] == claim_row["slot"]
    claim = json.loads((home / "jobs.json").read_text())["jobs"]["gatekept"]["state"]["claims"][claim_row["run_id"]]
    assert claim["dispatched"] is False
    loop = start_loop(home)
    try:
        rows = wait_until(lambda: [r for r in audit_rows(home, "run.finished", "gatekept")
                                   if r["run_id"] == claim_row["run_id"]], 20)
        assert (rows[0]["status"], rows[0]["reason"]) == ("not_started", "run_claimed_without_dispatch")
        assert [r["reason"] for r in audit_rows(home, "claim.reclaimed", "gatekept")] == ["owner_dead"]
    finally:
        stop(loop)
    slot = from_iso(claim_row["slot"])
    assert slot is not None
    lines = marker.read_text().splitlines() if marker.exists() else []
    started = [r for r in audit_rows(home, "run.started", "gatekept")]
    assert len(lines) == len(started), "only runs whose gate opened ran, the held one never did"
    assert claim_row["run_id"] not in {r["run_id"] for r in started}
