"""force-run without a loop: build_engine() wires a real supervisor, run_one() tends one run
with the engine's own steps until its record is written."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.engine import Engine, build_engine, run_one
from cronctl.models import AuditEvent
from cronctl.ops import definitions as ops
from cronctl.store.claims import Dispatched, Lease, Owner

pytestmark = pytest.mark.slow

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
OTHER = Owner("gen-other", 4242, 1.0, "boot")


@pytest.fixture
def ctx(home: Path) -> Context:
    return Context.open(home, clock=FakeClock(T0))


@pytest.fixture
def engine(ctx: Context) -> Iterator[Engine]:
    engine = build_engine(ctx, Owner("cli-test", os.getpid(), 1.0, "boot"))
    engine.supervisor.start()
    yield engine
    engine.supervisor.shutdown("shutdown", wait=20)


def test_run_one_runs_the_job_once_and_returns_its_record(ctx: Context, engine: Engine, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ops.add_job(ctx, ops.spec_from_options("once", {"every": "1h", "command": f"echo ran >> {marker}; exit 3"}))
    before = ctx.store.read()["jobs"]["once"]["state"]["next_run_at"]

    ran = run_one(engine, "once")

    assert ran is not None and ran.record is not None
    assert (ran.record["run_id"], ran.record["status"], ran.record["exit_code"], ran.record["trigger"]) == \
        (ran.run_id, "error", 3, "force")
    assert marker.read_text() == "ran\n"
    assert ctx.leases.claims_of("once") == []
    assert [r["run_id"] for r in ctx.leases.history("once")] == [ran.run_id]
    assert ctx.store.read()["jobs"]["once"]["state"]["next_run_at"] == before, "force-run never moves the schedule"
    started = [r for r in ctx.audit.rows() if r["event"] == AuditEvent.RUN_STARTED]
    assert [r["run_id"] for r in started] == [ran.run_id]


def test_run_one_starts_nothing_while_an_overlap_skip_job_runs(ctx: Context, engine: Engine, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    ops.add_job(ctx, ops.spec_from_options("busy", {"every": "1h", "command": f"touch {marker}",
                                                    "overlap": "skip"}))
    lease = Lease(ctx.clock.monotonic() + 60, T0 + timedelta(seconds=60))
    [held] = ctx.leases.claim_force("busy", T0, OTHER, lease).claims
    ctx.leases.mark_dispatched(OTHER, [Dispatched("busy", held.run_id, 999_999, 1.0, 0.0)], T0)

    assert run_one(engine, "busy") is None
    assert not marker.exists()
    assert [c.run_id for c in ctx.leases.claims_of("busy")] == [held.run_id]
