"""A skipped chain node is a run (SPEC §10): its record follows its row, even past a crash,
and the loop's line names the chain and the upstream. Pure of processes: an injected clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.cli.render import history_table, loop_line, run_reason
from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.errors import CronctlError
from cronctl.models import RunStatus
from cronctl.ops import definitions
from cronctl.ops.logread import check_statuses
from cronctl.paths import open_home
from cronctl.store import history
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.json_unit import JsonUnits
from cronctl.store.jsonstore import Store
from cronctl.store.leases import RunEnd

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
OWNER = Owner("gen-a", 1001, 111.0, "boot-1")
FAIL = Outcome(RunStatus.ERROR, "exit_code", exit_code=3, duration=1.0)


def open_ctx(tmp_path: Path) -> Context:
    paths = open_home(tmp_path / "home")
    clock = FakeClock(T0)
    return Context(paths, Store(paths), AuditLog(paths.audit, clock=clock), clock)


def chain_of_three(ctx: Context) -> str:
    """a (every minute) -> b -> c; a claimed and started: its run id."""
    definitions.add_job(ctx, definitions.spec_from_options("a", {"command": "true", "every": "1m"}))
    definitions.add_job(ctx, definitions.spec_from_options("b", {"command": "true", "after": ["a"]}))
    definitions.add_job(ctx, definitions.spec_from_options("c", {"command": "true", "after": ["b"]}))
    now = T0 + timedelta(seconds=60)
    [new] = ctx.leases.claim_due(now, OWNER, Lease(10_000.0, now + timedelta(minutes=1))).claims
    ctx.leases.mark_dispatched(OWNER, [Dispatched("a", new.run_id, 40_000, 1.0, 5_000.0)], now)
    return new.run_id


def records(ctx: Context, job: str) -> list[dict[str, Any]]:
    return history.read_records(ctx.paths, job)


def test_a_failed_root_records_each_skipped_node_as_a_run(tmp_path: Path) -> None:
    ctx = open_ctx(tmp_path)
    root = chain_of_three(ctx)
    ctx.leases.finish_many(OWNER, [RunEnd(root, FAIL, "a")], T0 + timedelta(seconds=61))
    (b,), (c,) = records(ctx, "b"), records(ctx, "c")
    assert (b["status"], b["reason"], b["upstream"], b["upstream_status"], b["chain"]) == \
        ("skipped", "upstream_failed", "a", "error", root)
    assert (c["upstream"], c["upstream_status"]) == ("b", "skipped"), "the cascade names its own upstream"
    assert b["trigger"] == "chain" and b["started_at"] is None and b["duration"] is None
    state = ctx.store.read()["jobs"]["c"]["state"]
    assert state["last_status"] == "skipped" and state["last_run_id"] == c["run_id"]


def test_skips_owed_by_a_dead_writer_are_recorded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = open_ctx(tmp_path)
    root = chain_of_three(ctx)
    with monkeypatch.context() as patch:  # the finish commits; the writer dies before anything follows
        patch.setattr(JsonUnits, "_deliver", lambda *args, **kwargs: None)
        ctx.leases.finish_many(OWNER, [RunEnd(root, FAIL, "a")], T0 + timedelta(seconds=61))
    assert records(ctx, "b") == []
    ctx.leases.deliver_pending(lambda _: False)
    ctx.leases.deliver_pending(lambda _: False)
    assert [r["status"] for r in records(ctx, "b") + records(ctx, "c")] == ["skipped", "skipped"]


def test_the_loop_line_and_history_name_the_upstream(capsys: pytest.CaptureFixture[str]) -> None:
    row = {"event": "run.skipped", "ts": "2026-03-01T12:01:01.000+00:00", "job": "d", "chain": "20260301T1201-ab",
           "reason": "upstream_failed", "upstream": "b", "upstream_status": "error", "run_id": "r1",
           "slot": "2026-03-01T12:01:00.000+00:00"}
    assert loop_line(row) == "12:01:01 d                skipped   in chain 20260301T1201-ab (upstream_failed: b ended error)"
    record = {"job": "d", "run_id": "r1", "status": "skipped", "reason": "upstream_failed", "upstream": "b",
              "upstream_status": "error", "trigger": "chain"}
    assert run_reason(record) == "upstream_failed: b error"
    history_table([record])
    assert "upstream_failed: b error" in capsys.readouterr().out


def test_history_status_filter_knows_skipped() -> None:
    assert check_statuses("skipped,failed") == {"skipped", "error", "timeout", "lost"}
    with pytest.raises(CronctlError):
        check_statuses("skippy")
