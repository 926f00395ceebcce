"""The outbox of a run's end (store/outbox.py): what must follow the terminal store write
(audit rows, history record, on_failure) is written in that same write as `pending`, so a
process that dies after the commit owes it and the next one delivers it, once.

The JSON lease store over a FakeClock; the "kill" between the commit and the delivery is
a delivery that never happens (the writer's `_deliver` replaced by nothing), and its
death is a `writer_alive` that says no. The real kill is in test_finish_faults_e2e.py.
"""

from __future__ import annotations

import errno
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.models import AuditEvent, RunStatus
from cronctl.ops import definitions
from cronctl.paths import open_home
from cronctl.proc.spawn import MAX_ARG_STRLEN, argument_problem, command_problem
from cronctl.store import history
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.json_unit import JsonUnits
from cronctl.store.jsonstore import Store
from cronctl.store.leases import RunEnd
from cronctl.store.outbox import PENDING, hook_log

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
OWNER = Owner("gen-a", 1001, 111.0, "boot-1")


def dead(_: dict[str, Any]) -> bool:
    return False


def alive(_: dict[str, Any]) -> bool:
    return True


def open_ctx(tmp_path: Path, fault: Any = None) -> Context:
    paths = open_home(tmp_path / "home")
    clock = FakeClock(T0)
    return Context(paths, Store(paths, fault=fault), AuditLog(paths.audit, clock=clock), clock)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lease(now: datetime) -> Lease:
    return Lease(10_000.0, now + timedelta(seconds=60))


def started_run(ctx: Context, **options: Any) -> str:
    """Define job `j` (every minute), claim its first slot and pass the gate; its run id."""
    definitions.add_job(ctx, definitions.spec_from_options("j", {"command": "true", "every": "1m", **options}))
    [new] = ctx.leases.claim_due(at(60), OWNER, lease(at(60))).claims
    ctx.leases.mark_dispatched(OWNER, [Dispatched("j", new.run_id, 40_000, 1.0, 5_000.0)], at(60))
    return new.run_id


def finished_rows(ctx: Context, run_id: str) -> list[dict[str, Any]]:
    return [row for row in ctx.audit.rows() if row["event"] == AuditEvent.RUN_FINISHED and row["run_id"] == run_id]


def pending(ctx: Context) -> dict[str, Any]:
    return dict(ctx.store.read()["jobs"]["j"]["state"].get(PENDING) or {})


def error() -> Outcome:
    return Outcome(RunStatus.ERROR, None, exit_code=3, duration=1.0)


def finish_and_die(ctx: Context, run_id: str, outcome: Outcome, monkeypatch: pytest.MonkeyPatch) -> None:
    """The terminal write commits; the process dies before writing anything after it."""
    with monkeypatch.context() as patch:
        patch.setattr(JsonUnits, "_deliver", lambda *args, **kwargs: None)
        [done] = ctx.leases.finish_many(OWNER, [RunEnd(run_id, outcome, "j", "/logs/r.log")], at(61))
    assert not done.fenced
    assert finished_rows(ctx, run_id) == [] and history.find_record(ctx.paths, "j", run_id) is None


def test_the_finish_write_holds_what_must_follow_it_until_the_next_write(tmp_path: Path) -> None:
    ctx = open_ctx(tmp_path)
    run_id = started_run(ctx)
    ctx.leases.finish_many(OWNER, [RunEnd(run_id, error(), "j", "/logs/r.log")], at(61))
    entry = pending(ctx)[run_id]
    assert [name for name, _ in entry["rows"]] == ["run.finished"]
    assert entry["record"]["status"] == "error" and entry["record"]["log"] == "/logs/r.log"
    assert entry["on_failure"] is False and entry["by"]["pid"] > 0
    assert len(finished_rows(ctx, run_id)) == 1, "delivered by the writer right after the commit"
    rev = ctx.store.read()["rev"]

    ctx.leases.claim_due(at(120), OWNER, lease(at(120)))  # a write the loop makes anyway
    assert pending(ctx) == {} and ctx.store.read()["rev"] == rev + 1
    assert PENDING not in ctx.store.read()["jobs"]["j"]["state"]


def test_what_a_dead_writer_owed_is_delivered_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = open_ctx(tmp_path)
    run_id = started_run(ctx)
    finish_and_die(ctx, run_id, error(), monkeypatch)
    assert ctx.leases.deliver_pending(alive) == [], "a live writer delivers its own"
    assert finished_rows(ctx, run_id) == []

    assert ctx.leases.deliver_pending(dead) == []
    assert [row["status"] for row in finished_rows(ctx, run_id)] == ["error"]
    record = history.find_record(ctx.paths, "j", run_id)
    assert record is not None and record["log"] == "/logs/r.log"
    assert pending(ctx) == {}
    assert ctx.leases.deliver_pending(dead) == []
    assert len(finished_rows(ctx, run_id)) == 1 and len(history.read_records(ctx.paths, "j")) == 1


def test_what_reached_the_log_before_the_kill_is_not_written_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = open_ctx(tmp_path)
    run_id = started_run(ctx)
    finish_and_die(ctx, run_id, error(), monkeypatch)
    [[name, details]] = pending(ctx)[run_id]["rows"]
    ctx.audit.append(name, **details)  # the row landed, then the kill: no record yet
    ctx.leases.deliver_pending(dead)
    assert len(finished_rows(ctx, run_id)) == 1
    assert [r["run_id"] for r in history.read_records(ctx.paths, "j")] == [run_id]


def test_an_owed_hook_is_handed_to_the_caller_until_its_log_exists(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = open_ctx(tmp_path)
    run_id = started_run(ctx, on_failure="echo failed")
    finish_and_die(ctx, run_id, error(), monkeypatch)
    [owed] = ctx.leases.deliver_pending(dead)
    assert (owed.job, owed.run_id, owed.record["status"]) == ("j", run_id, "error")
    assert run_id in pending(ctx), "kept until the hook is known to have started"
    hook_log(ctx.paths, "j", run_id).parent.mkdir(parents=True, exist_ok=True)
    hook_log(ctx.paths, "j", run_id).write_text("")  # the hook was spawned, then a kill
    assert ctx.leases.deliver_pending(dead) == []
    assert pending(ctx) == {} and len(finished_rows(ctx, run_id)) == 1


def test_a_failed_directory_fsync_after_the_rename_still_delivers_the_end(tmp_path: Path) -> None:
    failing = {"on": False}

    def fault(step: str) -> None:
        if failing["on"] and step == "dirfsync":
            raise OSError(errno.EIO, "Input/output error")

    ctx = open_ctx(tmp_path, fault)
    run_id = started_run(ctx)
    failing["on"] = True
    [done] = ctx.leases.finish_many(OWNER, [RunEnd(run_id, error(), "j")], at(61))
    failing["on"] = False
    assert not done.fenced
    assert ctx.leases.find_run("j", run_id) is None
    assert len(finished_rows(ctx, run_id)) == 1 and history.find_record(ctx.paths, "j", run_id) is not None


def test_a_store_from_before_the_outbox_has_nothing_pending(tmp_path: Path) -> None:
    ctx = open_ctx(tmp_path)
    started_run(ctx)
    rev = ctx.store.read()["rev"]
    assert ctx.leases.deliver_pending(dead) == []
    assert ctx.store.read()["rev"] == rev, "looking costs no write"


def test_reclaims_leave_their_rows_pending_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = open_ctx(tmp_path)
    run_id = started_run(ctx)
    with monkeypatch.context() as patch:
        patch.setattr(JsonUnits, "_deliver", lambda *args, **kwargs: None)
        assert ctx.leases.reclaim("j", run_id, OWNER, "owner_dead", at(70), 0)
    ctx.leases.deliver_pending(dead)
    events = [row["event"] for row in ctx.audit.rows() if row.get("run_id") == run_id]
    assert events[-2:] == ["claim.reclaimed", "run.finished"]
    assert history.find_record(ctx.paths, "j", run_id)["status"] == "lost"  # type: ignore[index]


# --- E2BIG -------------------------------------------------------------------------------


def test_one_argument_over_max_arg_strlen_is_refused() -> None:
    assert argument_problem(["sh", "-c", "x" * (MAX_ARG_STRLEN - 1)], {}) is None
    problem = argument_problem(["sh", "-c", "x" * MAX_ARG_STRLEN], {})
    assert problem is not None and "E2BIG" in problem and "single argument" in problem


def test_argv_and_environment_over_arg_max_are_refused() -> None:
    import os

    many = ["x" * 100_000] * (os.sysconf("SC_ARG_MAX") // 100_000 + 1)
    problem = argument_problem(many, {})
    assert problem is not None and "environment" in problem


def test_a_job_command_is_checked_with_its_environment() -> None:
    assert command_problem("echo small", {}) is None
    assert command_problem(("echo", "y" * 200_000), {}) is not None
    assert command_problem("echo small", {"BIG": "z" * 200_000}) is not None


def test_add_refuses_a_command_the_kernel_cannot_exec() -> None:
    from cronctl.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        definitions.spec_from_options("big", {"command": "echo " + "x" * 200_000, "every": "1h"})
    assert "job 'big': field 'command':" in str(caught.value) and "E2BIG" in str(caught.value)


# --- a dead force-run's claim, as doctor would see it -----------------------------------------


def test_dead_claims_names_the_claim_of_a_dead_owner(tmp_path: Path) -> None:
    from cronctl.loop.heal import Liveness, dead_claims

    ctx = open_ctx(tmp_path)
    run_id = started_run(ctx)
    live = Liveness(owner_alive=lambda owner: owner.get("pid") != OWNER.pid, lease_expired=lambda claim: False,
                    monotonic=lambda: 0.0)
    assert dead_claims(ctx.store.read(), live) == [("j", run_id, "owner_dead")]
    healthy = Liveness(owner_alive=alive, lease_expired=lambda claim: False, monotonic=lambda: 0.0)
    assert dead_claims(ctx.store.read(), healthy) == []


# --- force-run --wait is bounded ----------------------------------------------------------------


def test_wait_gives_up_on_a_run_that_ended_without_a_record(tmp_path: Path) -> None:
    from cronctl.errors import CronctlError
    from cronctl.ops.runs import UNRECORDED_GRACE, wait_for_record

    ctx = open_ctx(tmp_path)
    definitions.add_job(ctx, definitions.spec_from_options("j", {"command": "true", "every": "1m"}))
    began = ctx.clock.monotonic()
    with pytest.raises(CronctlError, match="ended without a record"):
        wait_for_record(ctx, "j", "20260301T120000-deadbeef", timeout=None)
    assert ctx.clock.monotonic() - began <= UNRECORDED_GRACE + 1.0
