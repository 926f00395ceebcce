"""A chain hop costs no tick (SPEC §10, issue 22 item 3): the tick that records an upstream's
finish claims and dispatches the dependant that finish made ready, in that same tick.
(The figures are bench/chain_hops.py's; this proves the mechanism, without timing.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from cronctl.context import Context
from cronctl.loop.due import DueIndex
from cronctl.loop.engine import Engine, build_engine
from cronctl.ops import definitions as ops
from cronctl.ops.runs import cli_owner

pytestmark = pytest.mark.slow


def steady_tick(engine: Engine) -> tuple[int, int]:
    """One tick as the loop makes it (one look at the store for the whole tick): (finished, claimed)."""
    assert isinstance(engine.due, DueIndex)
    with engine.due.steady():
        report = engine.tick()
    return report.finished, report.claimed


def wait_result(engine: Engine) -> None:
    assert engine.wake.wait(30), "the run's result never came"
    engine.wake.clear()


def test_the_tick_that_records_a_finish_claims_the_dependant_it_made_ready(home: Path) -> None:
    ctx = Context.open(home)
    ops.add_job(ctx, ops.spec_from_options("a", {"every": "1h", "command": "true"}))
    ops.add_job(ctx, ops.spec_from_options("b", {"after": ["a"], "command": "true"}))
    ops.add_job(ctx, ops.spec_from_options("c", {"after": ["b"], "command": "true"}))
    chain_id, _ = ctx.leases.force_chain("a", ctx.clock.now())
    engine = build_engine(ctx, cli_owner())
    engine.supervisor.start()
    try:
        assert steady_tick(engine) == (0, 1), "a is claimed"
        for dependant in ("b", "c"):
            wait_result(engine)
            assert steady_tick(engine) == (1, 1), f"{dependant} is claimed in the tick that recorded its upstream"
            assert [run.job for run in engine.active.values()] == [dependant]
        wait_result(engine)
        assert steady_tick(engine) == (1, 0)
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    assert ctx.store.read()["chains"][chain_id]["outcome"] == "success"
