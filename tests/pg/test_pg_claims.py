"""The lease operations in SQL, one by one, on a real server (MULTIHOST §3–§4)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from cronctl.errors import JobNotFoundError
from cronctl.models import Catchup, RunStatus
from cronctl.store.claims import Outcome
from cronctl.store.pg.claims import (
    Gate,
    claim_due,
    claim_force,
    finish,
    heartbeat,
    mark_dispatched,
    reclaim_dead_owner,
    reclaim_expired,
    register_loop,
    release,
    renew,
)
from cronctl.store.pg.connect import Connection
from tests.pg.pghelp import audit_events, make_due_again, make_loop, one, put_due_job

LEASE = 60.0
EXPIRED = -10.0  # a lease that ended ten seconds ago on the database clock
SUCCESS = Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=0.5, output_tail="done\n")


def _state(conn: Connection, fence: int) -> str:
    return str(one(conn, "SELECT state FROM cronctl_runs WHERE fence = %s", fence))


# --- claim ---------------------------------------------------------------------------------


def test_a_due_slot_is_claimed_once_and_the_high_water_mark_moves_past_it(conn: Connection) -> None:
    put_due_job(conn, "backup")
    me, other = make_loop("host-a"), make_loop("host-b")
    batch = claim_due(conn, me, LEASE)
    assert [c.job for c in batch.claimed] == ["backup"]
    claimed = batch.claimed[0]
    assert claimed.trigger == "schedule" and claimed.attempt == 1 and claimed.fence > 0
    assert batch.db_now is not None and claimed.lease_expires_at > batch.db_now + timedelta(seconds=LEASE - 5)
    next_run, last_slot = one(conn, "SELECT next_run_at, last_slot FROM cronctl_jobs WHERE name = 'backup'")
    assert last_slot == claimed.slot and next_run == claimed.slot + timedelta(seconds=60)
    assert claim_due(conn, other, LEASE).claimed == []
    assert one(conn, "SELECT host_id, state FROM cronctl_runs WHERE fence = %s", claimed.fence) == ("host-a", "claimed")
    assert one(conn, "SELECT count(*) FROM cronctl_audit WHERE event = 'run.claimed' AND fence = %s AND loop_id = %s",
               claimed.fence, me.loop_id) == 1


def test_a_slot_at_or_below_the_high_water_mark_never_fires_again(conn: Connection) -> None:
    put_due_job(conn, "backup")
    first = claim_due(conn, make_loop(), LEASE).claimed[0]
    # A redefinition (or a loop's stale write) puts next_run_at back on the fired slot.
    with conn.transaction():
        conn.execute("UPDATE cronctl_jobs SET next_run_at = %s WHERE name = 'backup'", (first.slot,))
    again = claim_due(conn, make_loop("host-b"), LEASE)
    assert again.claimed == [] and again.skipped == ["backup"]
    assert audit_events(conn, "backup")[-1] == ("run.skipped", "slot_already_fired")
    assert one(conn, "SELECT next_run_at FROM cronctl_jobs WHERE name = 'backup'") > first.slot
    assert one(conn, "SELECT count(*) FROM cronctl_runs") == 1


def test_paused_and_not_yet_due_jobs_are_left_alone(conn: Connection) -> None:
    put_due_job(conn, "paused", paused=True)
    put_due_job(conn, "later", ago_s=-30)
    assert claim_due(conn, make_loop(), LEASE).claimed == []


def test_an_overlap_skip_job_has_one_live_run_and_the_skip_is_audited(conn: Connection) -> None:
    put_due_job(conn, "report", overlap="skip")
    me = make_loop()
    first = claim_due(conn, me, LEASE).claimed[0]
    make_due_again(conn, "report")
    assert claim_due(conn, make_loop("host-b"), LEASE).skipped == ["report"]
    assert audit_events(conn, "report")[-1] == ("run.skipped", "overlap")
    finish(conn, me, first.fence, SUCCESS)
    make_due_again(conn, "report")
    assert [c.job for c in claim_due(conn, make_loop("host-b"), LEASE).claimed] == ["report"]


def test_an_overlap_allow_job_may_run_twice_at_once(conn: Connection) -> None:
    put_due_job(conn, "sync", overlap="allow")
    claim_due(conn, make_loop(), LEASE)
    make_due_again(conn, "sync")
    assert len(claim_due(conn, make_loop("host-b"), LEASE).claimed) == 1
    assert one(conn, "SELECT count(*) FROM cronctl_runs WHERE state = 'claimed'") == 2


def test_an_overlap_replace_claim_ends_the_old_run_and_its_owner_loses_the_fence(conn: Connection) -> None:
    put_due_job(conn, "refresh", overlap="replace")
    old_owner = make_loop("host-a")
    old = claim_due(conn, old_owner, LEASE).claimed[0]
    mark_dispatched(conn, old_owner, [Gate(old.fence, 100, 1.0)], LEASE)
    make_due_again(conn, "refresh")
    new = claim_due(conn, make_loop("host-b"), LEASE).claimed[0]
    assert new.replaced == (old.fence,)
    assert _state(conn, old.fence) == "killed"
    assert renew(conn, old_owner, [old.fence], LEASE).lost == {old.fence}
    assert finish(conn, old_owner, old.fence, SUCCESS).fenced
    assert ("run.killed", "replaced") in audit_events(conn, "refresh")


def test_a_late_slot_of_a_catchup_skip_job_is_missed_not_run(conn: Connection) -> None:
    put_due_job(conn, "nightly", ago_s=30, every_s=3600, catchup=Catchup.SKIP, starting_deadline=5.0)
    batch = claim_due(conn, make_loop(), LEASE)
    assert batch.claimed == [] and batch.skipped == ["nightly"]
    assert audit_events(conn, "nightly")[-1] == ("run.missed", "starting_deadline")
    assert one(conn, "SELECT count(*) FROM cronctl_runs") == 0


def test_missed_slots_are_coalesced_into_one_run_and_one_audit_row(conn: Connection) -> None:
    put_due_job(conn, "ticker", ago_s=25, every_s=10)
    batch = claim_due(conn, make_loop(), LEASE)
    assert len(batch.claimed) == 1
    assert one(conn, "SELECT details->>'count' FROM cronctl_audit WHERE event = 'run.missed'") == "2"


def test_a_force_run_has_no_slot_leaves_next_run_at_and_honours_overlap(conn: Connection) -> None:
    put_due_job(conn, "deploy", ago_s=-3600)
    before = one(conn, "SELECT next_run_at FROM cronctl_jobs WHERE name = 'deploy'")
    forced = claim_force(conn, make_loop(), "deploy", LEASE)
    assert forced is not None and forced.slot is None and forced.trigger == "force"
    assert one(conn, "SELECT next_run_at FROM cronctl_jobs WHERE name = 'deploy'") == before
    assert claim_force(conn, make_loop("host-b"), "deploy", LEASE) is None
    assert audit_events(conn, "deploy")[-1] == ("run.skipped", "overlap")
    with pytest.raises(JobNotFoundError, match="nosuch"):
        claim_force(conn, make_loop(), "nosuch", LEASE)


# --- gate, renew, finish, release ------------------------------------------------------------


def test_the_gate_marks_the_run_running_once_and_records_the_child(conn: Connection) -> None:
    put_due_job(conn, "backup")
    me = make_loop()
    claimed = claim_due(conn, me, LEASE).claimed[0]
    assert mark_dispatched(conn, me, [Gate(claimed.fence, 777, 99.5)], LEASE) == {claimed.fence}
    assert one(conn, "SELECT state, pid, pid_start FROM cronctl_runs WHERE fence = %s", claimed.fence) == (
        "running", 777, 99.5)
    assert mark_dispatched(conn, me, [Gate(claimed.fence, 777, 99.5)], LEASE) == set()
    assert mark_dispatched(conn, make_loop(), [Gate(claimed.fence, 1, 1.0)], LEASE) == set()
    assert audit_events(conn, "backup")[-1] == ("run.started", None)


def test_renew_extends_the_leases_still_held_and_names_the_lost_ones(conn: Connection) -> None:
    put_due_job(conn, "a")
    put_due_job(conn, "b")
    me = make_loop()
    a, b = sorted(claim_due(conn, me, LEASE).claimed, key=lambda c: c.job)
    with conn.transaction():
        conn.execute("UPDATE cronctl_runs SET kill_requested = true WHERE fence = %s", (b.fence,))
    renewal = renew(conn, me, [a.fence, b.fence], 120.0)
    assert renewal.held == {a.fence} and renewal.lost == {b.fence}
    assert one(conn, "SELECT lease_expires_at > clock_timestamp() + interval '100 seconds' FROM cronctl_runs"
               " WHERE fence = %s", a.fence) is True
    assert audit_events(conn, "b")[-1] == ("run.fenced", "lease_lost")
    assert renew(conn, make_loop(), [a.fence], LEASE).lost == {a.fence}


def test_finish_records_the_end_once_and_a_stale_owner_is_fenced(conn: Connection) -> None:
    put_due_job(conn, "backup")
    me = make_loop()
    claimed = claim_due(conn, me, LEASE).claimed[0]
    mark_dispatched(conn, me, [Gate(claimed.fence, 777, 99.5)], LEASE)
    assert finish(conn, make_loop("host-b"), claimed.fence, SUCCESS).fenced
    done = finish(conn, me, claimed.fence, SUCCESS)
    assert not done.fenced and done.run_id == claimed.run_id
    assert one(conn, "SELECT state, exit_code, output_tail, duration_s FROM cronctl_runs WHERE fence = %s",
               claimed.fence) == ("success", 0, "done\n", 0.5)
    assert finish(conn, me, claimed.fence, Outcome(RunStatus.ERROR, "exit_code", exit_code=1)).fenced
    assert _state(conn, claimed.fence) == "success"
    assert [e for e in audit_events(conn, "backup") if e[0] in ("run.finished", "run.fenced")] == [
        ("run.fenced", "claim_not_owned"), ("run.finished", None), ("run.fenced", "claim_ended")]
    assert one(conn, "SELECT state->>'last_status' FROM cronctl_jobs WHERE name = 'backup'") == "success"


def test_consecutive_failures_count_up_and_a_success_resets_them(conn: Connection) -> None:
    put_due_job(conn, "flaky", overlap="allow")
    me = make_loop()
    for outcome in (Outcome(RunStatus.ERROR, "exit_code", exit_code=1), Outcome(RunStatus.TIMEOUT, "timeout")):
        make_due_again(conn, "flaky")
        finish(conn, me, claim_due(conn, me, LEASE).claimed[0].fence, outcome)
    assert one(conn, "SELECT state->>'consecutive_failures' FROM cronctl_jobs") == "2"
    make_due_again(conn, "flaky")
    finish(conn, me, claim_due(conn, me, LEASE).claimed[0].fence, SUCCESS)
    assert one(conn, "SELECT state->>'consecutive_failures' FROM cronctl_jobs") == "0"


def test_the_output_tail_keeps_the_last_64_kib(conn: Connection) -> None:
    put_due_job(conn, "chatty")
    me = make_loop()
    claimed = claim_due(conn, me, LEASE).claimed[0]
    finish(conn, me, claimed.fence, Outcome(RunStatus.SUCCESS, None, output_tail="x" * 100_000 + "END"))
    tail = one(conn, "SELECT output_tail FROM cronctl_runs WHERE fence = %s", claimed.fence)
    assert len(tail) == 64 * 1024 and tail.endswith("END")


def test_a_claim_whose_child_could_not_spawn_is_released_not_started(conn: Connection) -> None:
    put_due_job(conn, "backup")
    me = make_loop()
    claimed = claim_due(conn, me, LEASE).claimed[0]
    assert release(conn, me, claimed.fence)
    assert one(conn, "SELECT state, reason, fault FROM cronctl_runs WHERE fence = %s", claimed.fence) == (
        "not_started", "spawn_failed", "platform")
    assert not release(conn, me, claimed.fence)
    assert audit_events(conn, "backup")[-1] == ("run.spawn_failed", "spawn_failed")


# --- reclaim ---------------------------------------------------------------------------------


def test_an_expired_claim_never_gated_is_reclaimed_as_not_started(conn: Connection) -> None:
    put_due_job(conn, "backup")
    claimed = claim_due(conn, make_loop("host-a"), EXPIRED).claimed[0]
    found = reclaim_expired(conn, make_loop("host-b"), margin_s=5.0)
    assert [(r.fence, r.status, r.host_id) for r in found] == [(claimed.fence, RunStatus.NOT_STARTED, "host-a")]
    reason = one(conn, "SELECT reason FROM cronctl_runs WHERE fence = %s", claimed.fence)
    assert reason == "run_claimed_without_dispatch"
    assert audit_events(conn, "backup")[-1] == ("claim.reclaimed", "lease_expired")
    assert reclaim_expired(conn, make_loop("host-b"), margin_s=5.0) == []


def test_an_expired_running_run_is_reclaimed_as_lost(conn: Connection) -> None:
    put_due_job(conn, "backup")
    me = make_loop("host-a")
    claimed = claim_due(conn, me, LEASE).claimed[0]
    mark_dispatched(conn, me, [Gate(claimed.fence, 777, 99.5)], EXPIRED)
    [found] = reclaim_expired(conn, make_loop("host-b"), margin_s=5.0)
    assert found.status is RunStatus.LOST and found.pid == 777
    assert one(conn, "SELECT state->>'last_status' FROM cronctl_jobs") == "lost"


def test_a_lease_within_the_margin_is_not_reclaimed(conn: Connection) -> None:
    put_due_job(conn, "backup")
    claim_due(conn, make_loop(), -3.0)
    assert reclaim_expired(conn, make_loop("host-b"), margin_s=5.0) == []


def test_a_dead_owner_is_reclaimed_only_by_a_loop_on_its_own_host(conn: Connection) -> None:
    put_due_job(conn, "backup")
    claimed = claim_due(conn, make_loop("host-a", pid=10), LEASE).claimed[0]
    assert reclaim_dead_owner(conn, make_loop("host-b"), [claimed.fence]) == []
    [found] = reclaim_dead_owner(conn, make_loop("host-a", pid=11), [claimed.fence])
    assert found.status is RunStatus.NOT_STARTED
    assert audit_events(conn, "backup")[-1] == ("claim.reclaimed", "owner_dead")


# --- loops and audit -------------------------------------------------------------------------


def test_a_loop_registers_and_beats_on_the_database_clock(conn: Connection) -> None:
    me = make_loop()
    register_loop(conn, me)
    beat = heartbeat(conn, me)
    assert one(conn, "SELECT heartbeat_at, host_id FROM cronctl_loops WHERE loop_id = %s", me.loop_id) == (
        beat, "host-a")
    with pytest.raises(LookupError):
        heartbeat(conn, make_loop())


def test_audit_rows_roll_back_with_the_decision(connections: Callable[[], Connection]) -> None:
    conn = connections()
    put_due_job(conn, "backup")
    with pytest.raises(RuntimeError), conn.transaction():
        claim_due(conn, make_loop(), LEASE)
        raise RuntimeError("the claim's transaction is abandoned before COMMIT")
    assert one(conn, "SELECT count(*) FROM cronctl_audit WHERE event = 'run.claimed'") == 0
    assert one(conn, "SELECT count(*) FROM cronctl_runs") == 0
    assert len(claim_due(connections(), make_loop(), LEASE).claimed) == 1


# --- the hot queries use their indexes ---------------------------------------------------------


def _plan(conn: Connection, query: str, params: dict[str, object] | tuple[object, ...]) -> str:
    with conn.transaction():
        # Tiny test tables would be scanned whole anyway; what matters is whether the index *can* bound the scan.
        conn.execute("SET LOCAL enable_seqscan = off")
        rows = conn.execute(f"EXPLAIN {query}", params).fetchall()
    return "\n".join(row[0] for row in rows)


def test_the_due_query_range_scans_the_due_index(conn: Connection) -> None:
    from cronctl.store.pg.claims import _DUE

    plan = _plan(conn, _DUE + " FOR UPDATE SKIP LOCKED", (100,))
    assert "Index Scan on cronctl_jobs_due" in plan and "next_run_at <= $0" in plan


def test_the_expired_lease_query_range_scans_the_lease_index(conn: Connection) -> None:
    from cronctl.store.pg.claims import _EXPIRED

    plan = _plan(conn, f"SELECT fence FROM cronctl_runs WHERE {_EXPIRED}", {"margin": 5.0})
    assert "cronctl_runs_lease" in plan and "Index Cond: (lease_expires_at <" in plan
