"""Claims as store transactions: claim_due, overlap, catchup, repeat, retries and fencing.

Every test drives cronctl.store.claims through a real Store with explicit instants
(a FakeClock only dates the job definitions); nothing sleeps, nothing forks.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.store import claims

from cronctl.loop import heal

from cronctl.ops import definitions as ops
from cronctl.store.claims import ClaimBatch, Dispatched, Finished, Lease, Outcome, Owner
from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.models import AuditEvent, RunStatus
from cronctl.timefmt import to_iso

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
OWNER_A = Owner("gen-a", 1001, 111.0, "boot-1")
OWNER_B = Owner("gen-b", 1002, 222.0, "boot-1")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    return to_iso(at(seconds)) or ""


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return Context.open(tmp_path / "home", clock=FakeClock(T0))


def add(ctx: Context, name: str, **options: Any) -> None:
    """Define a job at T0 (so an `every` job's first slot is T0 + interval)."""
    ops.add_job(ctx, ops.spec_from_options(name, {"command": "true", **options}))


def lease(now: datetime) -> Lease:
    return Lease(10_000.0, now + timedelta(seconds=60))


def claim_due(ctx: Context, now: datetime, owner: Owner = OWNER_A, capacity: int | None = None) -> ClaimBatch:
    with ctx.store.transaction() as doc:
        return claims.claim_due(doc, now, owner, lease(now), capacity)


def dispatch(ctx: Context, batch: ClaimBatch, now: datetime, owner: Owner = OWNER_A) -> list[Dispatched]:
    runs = [Dispatched(c.job, c.run_id, 40_000 + i, 1.0, 5_000.0) for i, c in enumerate(batch.claims)]
    with ctx.store.transaction() as doc:
        return claims.mark_dispatched(doc, owner, runs, now)


def finish(ctx: Context, job: str, run_id: str, now: datetime, owner: Owner | None = OWNER_A,
           status: RunStatus = RunStatus.SUCCESS, reason: str | None = None,
           exit_code: int | None = 0) -> Finished:
    outcome = Outcome(status, reason, exit_code=exit_code, duration=1.0)
    with ctx.store.transaction() as doc:
        return claims.finish(doc, job, run_id, owner, outcome, now)


def fire(ctx: Context, now: datetime, owner: Owner = OWNER_A) -> ClaimBatch:
    """Claim what is due and dispatch it, as one tick of a loop does."""
    batch = claim_due(ctx, now, owner)
    dispatch(ctx, batch, now, owner)
    return batch


def state(ctx: Context, name: str) -> dict[str, Any]:
    return dict(ctx.store.read()["jobs"][name]["state"])


def rows(events: list[claims.Event], name: AuditEvent) -> list[dict[str, Any]]:
    return [e.details for e in events if e.name == name]


# --- one write claims every due job --------------------------------------------------


def test_one_write_claims_every_due_job(ctx: Context) -> None:
    for name in ("a", "b", "c"):
        add(ctx, name, every="1m")
    add(ctx, "hourly", every="1h")
    rev = ctx.store.read()["rev"]

    batch = claim_due(ctx, at(60))

    doc = ctx.store.read()
    assert doc["rev"] == rev + 1, "all due jobs must be claimed in one store write"
    assert sorted(c.job for c in batch.claims) == ["a", "b", "c"]
    assert len({c.run_id for c in batch.claims}) == 3
    for new in batch.claims:
        job_state = doc["jobs"][new.job]["state"]
        claim = job_state["claims"][new.run_id]
        assert job_state["next_run_at"] == iso(120)
        assert claim["owner"] == OWNER_A.to_dict()
        assert claim["slot"] == iso(60)
        assert claim["dispatched"] is False and claim["child"] is None
        assert claim["lease_until"] == iso(120)
    assert doc["jobs"]["hourly"]["state"]["claims"] == {}
    assert doc["jobs"]["hourly"]["state"]["next_run_at"] == iso(3600)
    claimed = rows(batch.events, AuditEvent.RUN_CLAIMED)
    assert sorted(r["job"] for r in claimed) == ["a", "b", "c"]
    assert all(r["trigger"] == "schedule" and r["slot"] == iso(60) for r in claimed)


def test_a_tick_with_nothing_due_writes_nothing(ctx: Context) -> None:
    add(ctx, "a", every="1m")
    rev = ctx.store.read()["rev"]

    batch = claim_due(ctx, at(59.999))

    assert batch.claims == [] and batch.events == []
    assert ctx.store.read()["rev"] == rev


def test_jobs_over_capacity_are_deferred_to_a_later_tick_not_skipped(ctx: Context) -> None:
    for name in ("a", "b", "c"):
        add(ctx, name, every="1m")

    first = claim_due(ctx, at(60), capacity=2)
    second = claim_due(ctx, at(61), capacity=1)

    assert [c.job for c in first.claims] == ["a", "b"] and first.deferred == 1
    assert [c.job for c in second.claims] == ["c"]
    assert second.claims[0].slot == at(60), "a deferred job still fires its own slot"


def test_over_capacity_the_job_due_longest_is_claimed_first_so_none_starves(ctx: Context) -> None:
    add(ctx, "a", every="1m")
    add(ctx, "b", every="1m")
    first = claim_due(ctx, at(60), capacity=1)

    second = claim_due(ctx, at(125), capacity=1)  # a is due again (slot 120), b since 60

    assert [c.job for c in first.claims] == ["a"]
    assert [c.job for c in second.claims] == ["b"], "b was waiting longer"
    assert second.claims[0].slot == at(120)  # its slot at 60 is coalesced into this fire
    assert [(r["job"], r["count"]) for r in rows(second.events, AuditEvent.RUN_MISSED)] == [("b", 1)]


def test_paused_and_completed_jobs_are_never_claimed(ctx: Context) -> None:
    add(ctx, "paused", every="1m", paused=True)
    add(ctx, "done", every="1m")
    with ctx.store.transaction() as doc:
        doc["jobs"]["done"]["state"]["completed"] = True

    assert claim_due(ctx, at(600)).claims == []


# --- overlap ------------------------------------------------------------------------------


def test_overlap_skip_writes_one_skipped_row_per_slot_and_never_a_second_claim(ctx: Context) -> None:
    add(ctx, "a", every="1m")
    first = fire(ctx, at(60))

    second = claim_due(ctx, at(120))
    third = claim_due(ctx, at(180))

    assert second.claims == [] and third.claims == []
    skipped = rows(second.events, AuditEvent.RUN_SKIPPED) + rows(third.events, AuditEvent.RUN_SKIPPED)
    assert [(r["slot"], r["reason"]) for r in skipped] == [(iso(120), "overlap"), (iso(180), "overlap")]
    assert all(r["running"] == first.claims[0].run_id for r in skipped)
    assert list(state(ctx, "a")["claims"]) == [first.claims[0].run_id]
    assert state(ctx, "a")["next_run_at"] == iso(240), "a skipped slot is consumed, not retried every tick"


def test_overlap_allow_claims_beside_the_running_one(ctx: Context) -> None:
    add(ctx, "a", every="1m", overlap="allow")
    first = fire(ctx, at(60))

    second = claim_due(ctx, at(120))

    assert len(second.claims) == 1 and second.claims[0].replaces == []
    assert set(state(ctx, "a")["claims"]) == {first.claims[0].run_id, second.claims[0].run_id}


def test_overlap_replace_names_the_running_run_to_kill_first(ctx: Context) -> None:
    add(ctx, "a", every="1m", overlap="replace")
    first = fire(ctx, at(60))
    old = first.claims[0].run_id

    second = claim_due(ctx, at(120))

    assert second.claims[0].replaces == [old]
    assert rows(second.events, AuditEvent.RUN_CLAIMED)[0]["replaces"] == [old]
    # The replaced run is recorded by its own runner, as killed, and its write is still its own.
    done = finish(ctx, "a", old, at(121), status=RunStatus.KILLED, reason="replaced", exit_code=None)
    assert not done.fenced and done.record is not None and done.record["status"] == "killed"
    assert list(state(ctx, "a")["claims"]) == [second.claims[0].run_id]


# --- catchup ------------------------------------------------------------------------------


def test_catchup_latest_fires_the_latest_overdue_slot_once_and_counts_the_rest(ctx: Context) -> None:
    add(ctx, "a", every="1m")

    batch = claim_due(ctx, at(605))  # slots 60 .. 600 are overdue: ten of them
    again = claim_due(ctx, at(606))

    assert [c.slot for c in batch.claims] == [at(600)]
    missed = rows(batch.events, AuditEvent.RUN_MISSED)
    assert len(missed) == 1
    assert missed[0]["count"] == 9 and missed[0]["first_missed"] == iso(60)
    assert batch.claims[0].late is False, "5 s after its slot is within the default starting deadline"
    assert state(ctx, "a")["next_run_at"] == iso(660)
    assert again.claims == [] and again.events == []


def test_catchup_latest_past_the_starting_deadline_fires_flagged_late(ctx: Context) -> None:
    add(ctx, "a", every="1m", starting_deadline="10s")

    batch = claim_due(ctx, at(630))

    assert [c.slot for c in batch.claims] == [at(600)]
    assert batch.claims[0].late is True
    claimed = rows(batch.events, AuditEvent.RUN_CLAIMED)[0]
    assert claimed["late"] is True and claimed["reason"] == "scheduler_missed"
    assert len(rows(batch.events, AuditEvent.RUN_MISSED)) == 1


def test_catchup_skip_past_the_starting_deadline_fires_nothing_and_writes_one_missed_row(ctx: Context) -> None:
    add(ctx, "a", every="1m", catchup="skip", starting_deadline="10s")

    batch = claim_due(ctx, at(630))  # slots 60 .. 600 overdue, the latest by 30 s > 10 s

    assert batch.claims == []
    missed = rows(batch.events, AuditEvent.RUN_MISSED)
    assert len(missed) == 1, f"one row for the whole misfire, not one per reason: {missed}"
    assert missed[0]["count"] == 10, "every slot that did not fire is counted"
    assert missed[0]["slot"] == iso(600)
    assert state(ctx, "a")["next_run_at"] == iso(660), "the job waits for its next slot"
    assert state(ctx, "a")["claims"] == {}


def test_catchup_skip_within_the_starting_deadline_still_fires(ctx: Context) -> None:
    add(ctx, "a", every="1m", catchup="skip", starting_deadline="10s")

    batch = claim_due(ctx, at(65))

    assert [c.slot for c in batch.claims] == [at(60)]
    assert rows(batch.events, AuditEvent.RUN_MISSED) == []


def test_a_day_of_downtime_is_one_missed_row_never_a_storm(ctx: Context) -> None:
    add(ctx, "a", every="1s")
    day = 86_400

    batch = claim_due(ctx, at(day + 0.5))

    assert [c.slot for c in batch.claims] == [at(day)]
    missed = rows(batch.events, AuditEvent.RUN_MISSED)
    assert len(missed) == 1 and missed[0]["count"] == day - 1
    assert len(batch.events) == 2  # run.missed + run.claimed, nothing per slot


# --- repeat and one-shot -------------------------------------------------------------------


def test_a_finite_repeat_completes_after_its_budget_of_runs(ctx: Context) -> None:
    add(ctx, "a", every="1m", repeat=2)
    for minute in (1, 2):
        batch = fire(ctx, at(60 * minute))
        assert len(batch.claims) == 1
        finish(ctx, "a", batch.claims[0].run_id, at(60 * minute + 1))

    assert state(ctx, "a")["completed"] is True
    assert state(ctx, "a")["next_run_at"] is None
    assert claim_due(ctx, at(600)).claims == []


def test_a_finite_repeat_never_starts_more_runs_than_its_budget_even_with_overlap_allow(ctx: Context) -> None:
    add(ctx, "a", every="1m", repeat=2, overlap="allow")
    started = []
    for minute in range(1, 6):
        started += fire(ctx, at(60 * minute)).claims  # none of them has finished

    assert len(started) == 2
    for new in started:
        finish(ctx, "a", new.run_id, at(400))
    assert state(ctx, "a")["completed"] is True
    assert claim_due(ctx, at(1000)).claims == []


def test_a_spawn_failure_does_not_spend_the_repeat_budget(ctx: Context) -> None:
    add(ctx, "a", every="1m", repeat=1)
    batch = claim_due(ctx, at(60))
    with ctx.store.transaction() as doc:
        assert claims.release(doc, "a", batch.claims[0].run_id)

    retried = fire(ctx, at(120))

    assert [c.slot for c in retried.claims] == [at(120)]
    finish(ctx, "a", retried.claims[0].run_id, at(121))
    assert state(ctx, "a")["completed"] is True


def test_a_one_shot_whose_spawn_failed_is_due_again_not_lost(ctx: Context) -> None:
    add(ctx, "once", at=iso(90))
    batch = claim_due(ctx, at(90))
    with ctx.store.transaction() as doc:
        claims.release(doc, "once", batch.claims[0].run_id)

    again = claim_due(ctx, at(91))

    assert [c.slot for c in again.claims] == [at(90)]
    assert state(ctx, "once")["completed"] is False


def test_a_retry_whose_spawn_failed_stays_pending(ctx: Context) -> None:
    add(ctx, "a", every="1h", retries=1, retry_delay="1m")
    first = fire(ctx, at(3600))
    finish(ctx, "a", first.claims[0].run_id, at(3601), status=RunStatus.ERROR, exit_code=1)
    retry = claim_due(ctx, at(3661))
    with ctx.store.transaction() as doc:
        claims.release(doc, "a", retry.claims[0].run_id)

    again = claim_due(ctx, at(3662))

    assert [(c.trigger, c.attempt, c.slot) for c in again.claims] == [("retry", 2, at(3600))]


def test_a_one_shot_fires_once_and_is_completed(ctx: Context) -> None:
    add(ctx, "once", at=iso(90))

    early = claim_due(ctx, at(89))
    batch = fire(ctx, at(90))

    assert early.claims == []
    assert [c.slot for c in batch.claims] == [at(90)]
    assert state(ctx, "once")["next_run_at"] is None
    assert state(ctx, "once")["completed"] is False, "not completed while its run is in flight"
    finish(ctx, "once", batch.claims[0].run_id, at(95))
    assert state(ctx, "once")["completed"] is True
    assert claim_due(ctx, at(10_000)).claims == []


# --- retries ----------------------------------------------------------------------------------


def test_retries_double_their_delay_capped_at_the_cadence_then_stop(ctx: Context) -> None:
    add(ctx, "a", every="1h", retries=3, retry_delay="20m")
    batch = fire(ctx, at(3600))
    slot = iso(3600)
    now = 3601.0
    delays = []
    attempts = [batch.claims[0].attempt]
    run_id = batch.claims[0].run_id
    for _ in range(4):
        done = finish(ctx, "a", run_id, at(now), status=RunStatus.ERROR, reason="exit_code_nonzero", exit_code=1)
        scheduled = rows(done.events, AuditEvent.RUN_RETRY_SCHEDULED)
        if not scheduled:
            break
        delays.append(scheduled[0]["delay_s"])
        assert scheduled[0]["due_at"] == iso(now + scheduled[0]["delay_s"])
        now += scheduled[0]["delay_s"]
        retry = fire(ctx, at(now))
        assert [(c.trigger, c.slot) for c in retry.claims] == [("retry", at(3600))]
        attempts.append(retry.claims[0].attempt)
        run_id = retry.claims[0].run_id
        now += 1

    assert delays == [1200.0, 2400.0, 3600.0]  # 20m, 40m, then 80m capped at the 1h cadence
    assert attempts == [1, 2, 3, 4]
    final = state(ctx, "a")
    assert final["retry"] is None and final["last_status"] == "error"
    assert final["consecutive_failures"] == 4 and final["last_slot"] == slot


def test_a_retry_is_not_claimed_before_it_is_due(ctx: Context) -> None:
    add(ctx, "a", every="1h", retries=1, retry_delay="1m")
    batch = fire(ctx, at(3600))
    finish(ctx, "a", batch.claims[0].run_id, at(3601), status=RunStatus.ERROR, exit_code=1)

    early = claim_due(ctx, at(3660.999))
    due = claim_due(ctx, at(3661))

    assert early.claims == []
    assert [(c.trigger, c.attempt, c.slot) for c in due.claims] == [("retry", 2, at(3600))]


def test_a_successful_run_schedules_no_retry(ctx: Context) -> None:
    add(ctx, "a", every="1h", retries=3, retry_delay="1m")
    batch = fire(ctx, at(3600))

    done = finish(ctx, "a", batch.claims[0].run_id, at(3601))

    assert rows(done.events, AuditEvent.RUN_RETRY_SCHEDULED) == []
    assert state(ctx, "a")["retry"] is None


# --- force ----------------------------------------------------------------------------------


def test_a_forced_claim_leaves_next_run_at_alone_and_honours_overlap(ctx: Context) -> None:
    add(ctx, "a", every="1h")
    before = state(ctx, "a")["next_run_at"]

    with ctx.store.transaction() as doc:
        forced = claims.claim_force(doc, "a", at(10), OWNER_A, lease(at(10)))
    with ctx.store.transaction() as doc:
        refused = claims.claim_force(doc, "a", at(11), OWNER_A, lease(at(11)))

    assert [(c.trigger, c.slot) for c in forced.claims] == [("force", at(10))]
    assert refused.claims == [] and rows(refused.events, AuditEvent.RUN_SKIPPED)[0]["trigger"] == "force"
    assert state(ctx, "a")["next_run_at"] == before


# --- fencing ------------------------------------------------------------------------------------


def test_stale_owner_cannot_overwrite_a_newer_run(ctx: Context) -> None:
    add(ctx, "a", every="1m")
    stale = fire(ctx, at(60), OWNER_A).claims[0].run_id
    # Owner A is presumed dead: a healer reclaims its run, then owner B claims the next slot.
    claim = state(ctx, "a")["claims"][stale]
    assert heal.reclaim(ctx, "a", stale, claim, "owner_dead", at(90), kill=lambda *_: 0)
    fresh = fire(ctx, at(120), OWNER_B).claims[0].run_id
    before = state(ctx, "a")

    late_write = finish(ctx, "a", stale, at(125), OWNER_A)
    wrong_run = finish(ctx, "a", fresh, at(125), OWNER_A, status=RunStatus.ERROR, exit_code=1)

    assert late_write.fenced and late_write.record is None
    assert [(e.name, e.details["reason"]) for e in late_write.events] == [(AuditEvent.RUN_FENCED, "claim_gone")]
    assert wrong_run.fenced and wrong_run.record is None
    assert [(e.name, e.details["reason"]) for e in wrong_run.events] == [(AuditEvent.RUN_FENCED, "claim_not_owned")]
    assert state(ctx, "a") == before, "a refused write changes nothing"
    assert before["last_status"] == "lost" and before["last_reason"] == "executor_lost_mid_run"

    with ctx.store.transaction() as doc:
        assert claims.renew(doc, OWNER_A, {stale: "a", fresh: "a"}, lease(at(126))) == [stale, fresh]
        assert claims.mark_dispatched(doc, OWNER_A, [Dispatched("a", fresh, 1, 1.0, 1.0)], at(126)) == []
    assert finish(ctx, "a", fresh, at(130), OWNER_B).fenced is False
    assert state(ctx, "a")["last_status"] == "success" and state(ctx, "a")["last_run_id"] == fresh


def test_a_new_generation_of_the_same_process_is_a_different_owner(ctx: Context) -> None:
    add(ctx, "a", every="1m")
    run_id = fire(ctx, at(60), OWNER_A).claims[0].run_id
    restarted = Owner("gen-a2", OWNER_A.pid, OWNER_A.start_time, OWNER_A.boot_id)

    done = finish(ctx, "a", run_id, at(61), restarted)

    assert done.fenced and run_id in state(ctx, "a")["claims"]
