"""A chain hop is one write from its upstream's recorded end to its dependants' open gates
(beside the finish write itself), when warm children can be the runs (loop/hop_start.py):
they are adopted inside the hop's claim write, which marks them dispatched. A run no warm
child can be is spawned and marked after it, as before; a kill -9 right after that write
leaves dispatched runs whose gates never opened, reclaimed `lost` by the next loop."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cronctl.context import Context
from cronctl.loop.engine import Engine, build_engine
from cronctl.ops import definitions as ops
from cronctl.ops.runs import cli_owner
from cronctl.store import jsonstore
from tests.e2e.test_chain_hops import steady_tick, wait_result
from tests.helpers.loophelp import audit_rows, cli, start_loop, stop, wait_ticking, wait_until

pytestmark = pytest.mark.slow


@contextmanager
def counted_writes(ctx: Context) -> Iterator[list[int]]:
    """The store transactions made within the block (each one write: two fsyncs)."""
    made: list[int] = []
    real = ctx.store.transaction

    def counting(*args: Any, **kwargs: Any) -> Any:
        made.append(1)
        return real(*args, **kwargs)

    ctx.store.transaction = counting  # type: ignore[method-assign]
    try:
        yield made
    finally:
        ctx.store.transaction = real  # type: ignore[method-assign]


def fan_out(home: Path, dependants: dict[str, dict[str, Any]]) -> tuple[Context, Engine, str]:
    ctx = Context.open(home)
    ops.add_job(ctx, ops.spec_from_options("r", {"every": "1h", "command": "sleep 0.3"}))
    for name, options in dependants.items():
        ops.add_job(ctx, ops.spec_from_options(name, {"after": ["r"], "command": "echo ran", **options}))
    chain_id, _ = ctx.leases.force_chain("r", ctx.clock.now())
    engine = build_engine(ctx, cli_owner())
    engine.supervisor.start()
    return ctx, engine, chain_id


def run_out(engine: Engine) -> None:
    while engine.active:
        wait_result(engine)
        steady_tick(engine)


def test_a_warm_fan_out_hop_is_the_finish_write_and_one_claim_write(home: Path) -> None:
    ctx, engine, chain_id = fan_out(home, {"w0": {}, "w1": {}, "w2": {}})
    try:
        assert steady_tick(engine) == (0, 1)
        warm = {child.child.pid for child in engine.supervisor.warm._children}
        wait_result(engine)
        with counted_writes(ctx) as writes:
            assert engine.record_results() == 1 and engine.hops_claimed == 3
        assert len(writes) == 2, "r's finish, then w0..w2 claimed and marked dispatched in one write"
        started = {row["job"]: row["pid"] for row in audit_rows(home, "run.started") if row["job"] != "r"}
        assert set(started) == {"w0", "w1", "w2"} and set(started.values()) == warm, \
            "their run.started rows (the warm children's pids) were written with the claim"
        run_out(engine)
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    assert ctx.store.read()["chains"][chain_id]["outcome"] == "success"
    for name in ("w0", "w1", "w2"):
        (record,) = [r for r in ctx.leases.history(name) if r.get("chain") == chain_id]
        assert record["status"] == "success" and Path(record["log"]).read_text() == "ran\n"


def test_the_hops_finish_leaves_its_directory_fsync_to_the_claim_write(home: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The finish write is fsync'd and renamed, its directory fsync (and its rows) left to the
    claim write right after it: one directory fsync makes both durable before any gate opens,
    and none is left owed once record_results returns, with a hop or without one."""
    flushed: list[int] = []
    real = jsonstore._fsync_directory
    monkeypatch.setattr(jsonstore, "_fsync_directory", lambda path: (flushed.append(1), real(path))[1])
    ctx, engine, chain_id = fan_out(home, {"w0": {}, "w1": {}})
    try:
        assert steady_tick(engine) == (0, 1)
        wait_result(engine)
        flushed.clear()
        with counted_writes(ctx) as writes:
            assert engine.record_results() == 1 and engine.hops_claimed == 2
        assert (len(writes), len(flushed)) == (2, 1), "two writes, one directory fsync (the claim's)"
        assert not ctx.store._dir_unflushed and [r["job"] for r in audit_rows(home, "run.finished")] == ["r"]
        flushed.clear()
        run_out(engine)  # w0's and w1's ends: no hop follows them
        assert len(flushed) >= 1 and not ctx.store._dir_unflushed, "an end with no hop after it is flushed at once"
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    assert ctx.store.read()["chains"][chain_id]["outcome"] == "success"


def test_a_dependant_no_warm_child_can_be_is_spawned_and_marked_after_the_claim_write(home: Path) -> None:
    """A value with a newline cannot be said to a warm child (proc/warm.py): w1 is spawned as before."""
    ctx, engine, chain_id = fan_out(home, {"w0": {}, "w1": {"env": {"NOTE": "two\nlines"}}, "w2": {}})
    try:
        assert steady_tick(engine) == (0, 1)
        wait_result(engine)
        with counted_writes(ctx) as writes:
            assert engine.record_results() == 1 and engine.hops_claimed == 3
        assert len(writes) == 3, "r's finish; w0 and w2 claimed and dispatched; w1 marked after its spawn"
        run_out(engine)
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    assert ctx.store.read()["chains"][chain_id]["outcome"] == "success"
    assert sorted(row["job"] for row in audit_rows(home, "run.started")) == ["r", "w0", "w1", "w2"]


def test_kill_9_right_after_a_hops_claim_write_leaves_runs_the_next_loop_reclaims_lost(home: Path,
                                                                                         tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"""\
jobs:
  - {{name: a, every: 1s, repeat: 1, command: 'sleep 1'}}
  - {{name: b, after: a, command: 'echo b >> {out / "b"}'}}
  - {{name: c, after: a, command: 'echo c >> {out / "c"}'}}
""")
    assert cli(home, "apply", "-f", str(jobs)).returncode == 0
    crashing = start_loop(home, env={"CRONCTL_FAULT_LOOP_CRASH": "after_hop_claim"})
    assert crashing.wait(timeout=60) == -9, "the seam killed the loop after the hop's claim write"
    ctx = Context.open(home)
    marked = {claim.job: claim.child for job in ("b", "c") for claim in ctx.leases.claims_of(job) if claim.dispatched}
    assert set(marked) == {"b", "c"} and all(child and child["pid"] for child in marked.values()), \
        "b and c were marked dispatched, their warm children's identities recorded, by the hop's claim write"
    started = {row["job"] for row in audit_rows(home, "run.started")}
    assert started == {"a"}, "the seam is at the commit, before the write's rows (the gates open there)"
    loop = start_loop(home)
    try:
        wait_ticking(home, loop)
        wait_until(lambda: audit_rows(home, "chain.finished"), 60)
    finally:
        assert stop(loop) == 0
    reclaimed = {row["job"]: (row["reason"], row["run_reason"]) for row in audit_rows(home, "claim.reclaimed")}
    assert reclaimed == {"b": ("owner_dead", "executor_lost_mid_run"), "c": ("owner_dead", "executor_lost_mid_run")}
    assert not (out / "b").exists() and not (out / "c").exists(), "their gates never opened: nothing of them ran"
    [finished] = audit_rows(home, "chain.finished")
    assert finished["outcome"] == "failed" and finished["statuses"] == {"a": "success", "b": "lost", "c": "lost"}


def test_a_dependant_whose_directory_vanished_is_refused_as_before_and_takes_no_warm_child(home: Path,
                                                                                          tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    ctx, engine, chain_id = fan_out(home, {"w0": {}, "w1": {"cwd": str(gone)}})
    try:
        assert steady_tick(engine) == (0, 1)
        assert len(engine.supervisor.warm) == 2
        gone.rmdir()
        wait_result(engine)
        assert engine.record_results() == 1 and engine.hops_claimed == 2
        assert len(engine.supervisor.warm) == 1, "w0 adopted one; w1's refusal took none"
        run_out(engine)
    finally:
        engine.supervisor.shutdown("shutdown", wait=10)
    [w1] = audit_rows(home, "run.finished", "w1")
    assert (w1["status"], w1["reason"]) == ("not_started", "blocked_config")
    assert ctx.store.read()["chains"][chain_id]["nodes"]["w1"]["status"] == "not_started"
