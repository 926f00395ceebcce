"""Chain hops on PostgreSQL (issue 22 item 3): the loop that records an upstream's finish
claims the dependants it made ready in the same step, and starts them in warm children
made before the upstream ended (loop/warm_hops.py), as on the JSON store."""

from __future__ import annotations

from pathlib import Path

import pytest

from cronctl.context import Context
from cronctl.loop.engine import Engine, build_engine
from cronctl.ops import definitions as ops
from cronctl.ops.runs import cli_owner
from cronctl.store.pg.connect import parse_store_url

pytestmark = pytest.mark.slow


def wait_result(engine: Engine) -> None:
    assert engine.wake.wait(30), "the run's result never came"
    engine.wake.clear()


def test_a_fan_out_hop_on_postgresql_adopts_the_warm_children(store_url: str, tmp_path: Path) -> None:
    ctx = Context.open(tmp_path / "home", store_url=parse_store_url(store_url))
    ops.add_job(ctx, ops.spec_from_options("r", {"every": "1h", "command": "sleep 0.3"}))
    for name in ("w0", "w1", "w2"):
        ops.add_job(ctx, ops.spec_from_options(name, {"after": ["r"], "command": "sleep 1; echo $CRONCTL_CHAIN_ID"}))
    chain_id, _ = ctx.leases.force_chain("r", ctx.clock.now())
    engine = build_engine(ctx, cli_owner())
    engine.supervisor.start()
    try:
        engine.dispatch(ctx.leases.claim_chain(chain_id, ctx.clock.now(), engine.owner, engine.lease()))
        warm = {child.child.pid for child in engine.supervisor.warm._children}
        assert len(warm) == 3, "made before the forced root started: one per node waiting"
        wait_result(engine)
        assert engine.record_results() == 1
        running = {run.pid for run in engine.supervisor._shared.runs.values() if run.run_id in engine.active}
        assert running == warm and len(engine.active) == 3, "the finish's own step claimed and started them"
        while engine.active:
            wait_result(engine)
            engine.record_results()
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    runs = [r for name in ("w0", "w1", "w2") for r in ctx.leases.history(name) if r.get("chain") == chain_id]
    assert [r["status"] for r in runs] == ["success"] * 3
    assert all(Path(r["log"]).read_text() == f"{chain_id}\n" for r in runs)
