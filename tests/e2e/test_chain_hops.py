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


def test_a_hop_parses_the_chains_jobs_not_the_store(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The root's finish (which starts the chain) and the hop's claim are writes of the jobs
    they name (LazyJobs): the chain's jobs are found in the bytes, so 200 other jobs are
    never parsed on the hop."""
    from datetime import datetime, timezone

    from cronctl.clock import FakeClock
    from cronctl.store.lazyjobs import LazyJobs

    clock = FakeClock(datetime.now(timezone.utc).replace(microsecond=0))
    ctx = Context.open(home, clock=clock)
    for index in range(200):
        ops.add_job(ctx, ops.spec_from_options(f"other-{index:03d}", {"every": "24h", "command": "true"}))
    ops.add_job(ctx, ops.spec_from_options("a", {"every": "1h", "command": "true"}))
    for name in ("b", "c"):
        ops.add_job(ctx, ops.spec_from_options(name, {"after": ["a"], "command": "true"}))
    clock.advance(3601.0)
    engine = build_engine(ctx, cli_owner())
    engine.supervisor.start()
    try:
        assert steady_tick(engine) == (0, 1), "a is claimed by its schedule"
        wait_result(engine)
        loaded: list[int] = []
        real = LazyJobs.load_all
        monkeypatch.setattr(LazyJobs, "load_all", lambda self: (loaded.append(1), real(self))[1])
        assert engine.record_results() == 1 and engine.hops_claimed == 2, "b and c claimed in the hop"
        assert loaded == [], "a hop parsed every job of the store"
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)


def test_chain_names_are_read_from_the_bytes() -> None:
    from cronctl.store.lazyjobs import JobLines

    raw = (b'{\n "version": 1,\n "jobs": {\n  "a": {"command": "x \\"after\\": [y]"},\n'
           b'  "b": {"after": ["a"]},\n  "c d": {"after": ["b"], "n": 1}\n }\n}\n')
    lines = JobLines.of(raw)
    assert lines is not None and lines.chain_names() == ["b", "c d"]
    escaped = JobLines.of(raw.replace(b'"c d"', b'"c\\u0020d"'))
    assert escaped is not None and escaped.chain_names() is None


def test_a_fan_out_hop_adopts_children_spawned_while_its_upstream_ran(home: Path) -> None:
    """The loop keeps as many warm children as the chain has nodes waiting (loop/warm_hops.py),
    spawned after the tick that started the upstream: the hop that claims the dependants
    spawns none, it adopts those. No chain dispatched for KEEP_WARM: they are let go."""
    import time

    from cronctl.loop import warm_hops

    ctx = Context.open(home)
    ops.add_job(ctx, ops.spec_from_options("r", {"every": "1h", "command": "sleep 0.3"}))
    for name in ("w0", "w1", "w2"):
        ops.add_job(ctx, ops.spec_from_options(name, {"after": ["r"], "command": "sleep 1; echo $CRONCTL_UPSTREAM"}))
    chain_id, _ = ctx.leases.force_chain("r", ctx.clock.now())
    engine = build_engine(ctx, cli_owner())
    engine.supervisor.start()
    try:
        assert steady_tick(engine) == (0, 1)
        warm = {child.child.pid for child in engine.supervisor.warm._children}
        assert len(warm) == 3, "one warm child per node still waiting, made in the root's tick"
        root_run = next(iter(engine.active))
        wait_result(engine)
        assert steady_tick(engine) == (1, 3)
        assert {run.pid for run in engine.supervisor._shared.runs.values()
                if run.run_id in engine.active} == warm, "the hop adopted them, spawning none"
        while engine.active:
            wait_result(engine)
            steady_tick(engine)
        engine.warm_hops._mono = lambda: time.monotonic() + warm_hops.KEEP_WARM + 1
        engine.warm_hops.tend(lambda: False)
        assert len(engine.supervisor.warm) == 0
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    doc = ctx.store.read()
    assert doc["chains"][chain_id]["outcome"] == "success"
    for name in ("w0", "w1", "w2"):
        (record,) = [r for r in ctx.leases.history(name) if r.get("chain") == chain_id]
        assert Path(record["log"]).read_text() == f"{root_run}\n", "each adopted child got its run's environment"


def test_a_loop_that_runs_no_chain_keeps_no_warm_child(home: Path) -> None:
    ctx = Context.open(home)
    ops.add_job(ctx, ops.spec_from_options("plain", {"every": "1h", "command": "true"}))
    engine = build_engine(ctx, cli_owner())
    engine.supervisor.start()
    try:
        engine.force("plain")
        engine.tick()
        assert len(engine.supervisor.warm) == 0
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)


def test_cronctl_warm_children_caps_the_pool_and_zero_turns_it_off(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from cronctl.loop import warm_hops

    monkeypatch.setenv(warm_hops.MAX_ENV, "2")
    assert warm_hops.max_warm() == 2
    monkeypatch.setenv(warm_hops.MAX_ENV, "many")
    assert warm_hops.max_warm() == warm_hops.MAX_WARM
    assert "CRONCTL_WARM_CHILDREN='many' is not a count of children" in capsys.readouterr().err
    monkeypatch.setenv(warm_hops.MAX_ENV, "0")
    ctx = Context.open(home)
    ops.add_job(ctx, ops.spec_from_options("r", {"every": "1h", "command": "sleep 0.2"}))
    ops.add_job(ctx, ops.spec_from_options("w", {"after": ["r"], "command": "true"}))
    chain_id, _ = ctx.leases.force_chain("r", ctx.clock.now())
    engine = build_engine(ctx, cli_owner())
    made = []
    real_fill = engine.supervisor.warm.fill
    engine.supervisor.warm.fill = lambda *a, **k: made.append(real_fill(*a, **k)) or made[-1]  # type: ignore[method-assign]
    engine.supervisor.start()
    try:
        assert steady_tick(engine) == (0, 1)
        assert len(engine.supervisor.warm) == 0 and not any(made), "not one warm child, not even for the root"
        wait_result(engine)
        assert steady_tick(engine) == (1, 1), "the hop spawns its child as before"
        wait_result(engine)
        steady_tick(engine)
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    assert ctx.store.read()["chains"][chain_id]["outcome"] == "success"
