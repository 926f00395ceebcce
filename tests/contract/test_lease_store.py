"""The guarantees of `LeaseStore`, run against every backend (tests/contract/conftest.py).

Instants come from the FakeClock; nothing sleeps and nothing forks: a "child" is a
`Dispatched` record with a made-up pid, as the loop would persist it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from cronctl.errors import JobNotFoundError
from cronctl.models import AuditEvent, RunStatus, Trigger
from cronctl.store.claims import ClaimBatch, Dispatched, Event, Lease, NewClaim, Outcome, Owner
from cronctl.store.leases import HeldGate, Refused, RunEnd, Unhold
from cronctl.timefmt import to_iso
from tests.contract.conftest import T0, Backend

OWNER_A = Owner("gen-a", 1001, 111.0, "boot-1")
OWNER_B = Owner("gen-b", 1002, 222.0, "boot-1")
MINUTE = 60.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def lease(now: datetime) -> Lease:
    return Lease(10_000.0, now + timedelta(seconds=60))


def child(new: NewClaim, pid: int = 40_000) -> Dispatched:
    return Dispatched(new.job, new.run_id, pid, 1.0, 5_000.0)


def claim_one(backend: Backend, now: datetime, owner: Owner = OWNER_A) -> NewClaim:
    batch = backend.leases.claim_due(now, owner, lease(now))
    assert len(batch.claims) == 1, batch
    return batch.claims[0]


def start_one(backend: Backend, now: datetime, owner: Owner = OWNER_A) -> NewClaim:
    """Claim the one due slot and pass its gate, as a tick of the loop does."""
    new = claim_one(backend, now, owner)
    assert backend.leases.mark_dispatched(owner, [child(new)], now) == [child(new)]
    return new


def success() -> Outcome:
    return Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=1.0)


# --- claim ------------------------------------------------------------------------------------


def test_a_slot_is_claimed_once_whoever_asks(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    first = claim_one(lease_store, at(MINUTE), OWNER_A)
    again_a = lease_store.leases.claim_due(at(MINUTE), OWNER_A, lease(at(MINUTE)))
    again_b = lease_store.leases.claim_due(at(MINUTE + 1), OWNER_B, lease(at(MINUTE + 1)))
    assert (first.job, first.slot, first.attempt, first.trigger) == ("tick", at(MINUTE), 1, "schedule")
    assert again_a.claims == [] and again_b.claims == []
    assert [row["run_id"] for row in lease_store.events(AuditEvent.RUN_CLAIMED)] == [first.run_id]


def test_nothing_is_claimed_before_its_slot(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    assert lease_store.leases.claim_due(at(MINUTE - 1), OWNER_A, lease(at(0))).claims == []


def test_capacity_defers_what_does_not_fit(lease_store: Backend) -> None:
    for name in ("a", "b", "c"):
        lease_store.define(name, every="1m")
    batch = lease_store.leases.claim_due(at(MINUTE), OWNER_A, lease(at(MINUTE)), capacity=2)
    assert (len(batch.claims), batch.deferred) == (2, 1)
    rest = lease_store.leases.claim_due(at(MINUTE), OWNER_A, lease(at(MINUTE)))
    assert [new.job for new in rest.claims] == sorted({"a", "b", "c"} - {new.job for new in batch.claims})


def test_a_claim_ahead_handed_back_leaves_its_slot_to_fire(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    ahead = lease_store.leases.claim_ahead(at(MINUTE - 2), at(MINUTE), OWNER_A, lease(at(MINUTE - 2)))
    [new] = ahead.claims
    assert new.held_until == at(MINUTE) and new.slot == at(MINUTE)
    assert lease_store.leases.claim_due(at(MINUTE), OWNER_B, lease(at(MINUTE))).claims == []  # already ours

    assert lease_store.leases.unhold([Unhold(new.job, new.run_id, new.advanced_to)], "shutdown") == 1

    assert lease_store.leases.find_run("tick", new.run_id) is None
    again = claim_one(lease_store, at(MINUTE), OWNER_B)
    assert again.slot == at(MINUTE)
    [skipped] = lease_store.events(AuditEvent.RUN_SKIPPED)
    assert (skipped["reason"], skipped["why"]) == ("cancelled_before_slot", "shutdown")


def test_held_runs_are_dispatched_at_their_instant_unless_their_job_changed(lease_store: Backend) -> None:
    lease_store.define("kept", every="1m")
    lease_store.define("paused", every="1m")
    batch = lease_store.leases.claim_ahead(at(MINUTE - 2), at(MINUTE), OWNER_A, lease(at(MINUTE - 2)))
    assert len(batch.claims) == 2
    lease_store.pause("paused")
    gates = [HeldGate(new.job, new.run_id, new.spec, new.slot.isoformat(), new.advanced_to, child(new),
                      at(MINUTE)) for new in batch.claims]

    kept = lease_store.leases.release_held(OWNER_A, gates, lateness=[0.002])

    by_job = {new.job: new for new in batch.claims}
    assert kept == [by_job["kept"].run_id]
    claim = lease_store.leases.find_run("kept", by_job["kept"].run_id)
    assert claim is not None and claim.dispatched and claim.child == {"pid": 40_000, "start_time": 1.0}
    assert lease_store.leases.find_run("paused", by_job["paused"].run_id) is None
    assert [row["why"] for row in lease_store.events(AuditEvent.RUN_SKIPPED)] == ["paused"]


# --- the gate, renew, fencing ------------------------------------------------------------------


def test_the_gate_refuses_a_claim_that_was_reclaimed(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = claim_one(lease_store, at(MINUTE))
    expired = MINUTE + 60 + 6  # the claim's lease (60 s) ran out more than the margin ago
    assert lease_store.leases.reclaim("tick", new.run_id, OWNER_A, "lease_expired", at(expired), 0)
    assert lease_store.leases.mark_dispatched(OWNER_A, [child(new)], at(expired + 1)) == []
    [record] = lease_store.leases.history("tick")
    assert (record["status"], record["reason"]) == ("not_started", "run_claimed_without_dispatch")


def test_the_gate_refuses_another_owner(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = claim_one(lease_store, at(MINUTE), OWNER_A)
    assert lease_store.leases.mark_dispatched(OWNER_B, [child(new)], at(MINUTE)) == []
    claim = lease_store.leases.find_run("tick", new.run_id)
    assert claim is not None and not claim.dispatched


def test_renew_reports_the_claims_that_were_lost(lease_store: Backend) -> None:
    lease_store.define("a", every="1m")
    lease_store.define("b", every="1m")
    batch = lease_store.leases.claim_due(at(MINUTE), OWNER_A, lease(at(MINUTE)))
    lease_store.leases.mark_dispatched(OWNER_A, [child(new) for new in batch.claims], at(MINUTE))
    kept, taken = batch.claims
    assert lease_store.leases.reclaim(taken.job, taken.run_id, OWNER_A, "owner_dead", at(MINUTE + 5), 1)

    later = Lease(20_000.0, at(MINUTE + 100))
    lost = lease_store.leases.renew(OWNER_A, {new.run_id: new.job for new in batch.claims}, later)

    assert lost == [taken.run_id]
    claim = lease_store.leases.find_run(kept.job, kept.run_id)
    assert claim is not None and claim.lease_until == to_iso(later.until_wall)


def test_finish_by_a_stale_owner_is_fenced(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = start_one(lease_store, at(MINUTE), OWNER_A)
    assert lease_store.leases.adopt(OWNER_A, OWNER_B, {new.run_id: new.job}) == 1

    [stale] = lease_store.leases.finish_many(OWNER_A, [RunEnd(new.run_id, success(), new.job)], at(MINUTE + 1))
    assert stale.fenced and stale.record is None
    assert lease_store.leases.find_run("tick", new.run_id) is not None
    [fenced] = lease_store.events(AuditEvent.RUN_FENCED)
    assert fenced["reason"] == "claim_not_owned"

    [done] = lease_store.leases.finish_many(OWNER_B, [RunEnd(new.run_id, success(), new.job)], at(MINUTE + 2))
    assert not done.fenced and done.record is not None and done.record["status"] == "success"


def test_finish_is_idempotent(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = start_one(lease_store, at(MINUTE))
    end = RunEnd(new.run_id, success(), log="/logs/run.log")
    [first] = lease_store.leases.finish_many(OWNER_A, [end], at(MINUTE + 1))
    [second] = lease_store.leases.finish_many(OWNER_A, [end], at(MINUTE + 2))
    assert not first.fenced and second.fenced
    [record] = lease_store.leases.history("tick")
    assert (record["run_id"], record["status"], record["log"]) == (new.run_id, "success", "/logs/run.log")
    assert len(lease_store.events(AuditEvent.RUN_FINISHED)) == 1
    assert lease_store.events(AuditEvent.RUN_FENCED)[0]["reason"] == "claim_gone"


def test_a_failure_schedules_its_retry(lease_store: Backend) -> None:
    lease_store.define("tick", every="1h", retries=1, retry_delay="10s")
    new = start_one(lease_store, at(3600))
    failed = Outcome(RunStatus.ERROR, "exit_code", exit_code=3, duration=1.0)
    lease_store.leases.finish_many(OWNER_A, [RunEnd(new.run_id, failed, new.job)], at(3601))
    assert lease_store.leases.claim_due(at(3610), OWNER_A, lease(at(3610))).claims == []
    retry = claim_one(lease_store, at(3611))
    assert (retry.trigger, retry.attempt, retry.slot) == (Trigger.RETRY.value, 2, at(3600))


# --- recovery --------------------------------------------------------------------------------------


def test_reclaim_records_a_dispatched_run_lost_and_counts_once(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = start_one(lease_store, at(MINUTE))
    assert lease_store.leases.reclaim("tick", new.run_id, OWNER_A, "owner_dead", at(MINUTE + 30), 2)
    assert not lease_store.leases.reclaim("tick", new.run_id, OWNER_A, "owner_dead", at(MINUTE + 31), 0)
    [record] = lease_store.leases.history("tick")
    assert (record["status"], record["reason"], record["fault"]) == ("lost", "executor_lost_mid_run", "platform")
    [row] = lease_store.events(AuditEvent.CLAIM_RECLAIMED)
    assert (row["reason"], row["processes_killed"], row["owner_pid"]) == ("owner_dead", 2, OWNER_A.pid)


def test_reclaim_is_fenced_on_the_owner_it_judged(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = start_one(lease_store, at(MINUTE), OWNER_A)
    lease_store.leases.adopt(OWNER_A, OWNER_B, {new.run_id: new.job})
    assert not lease_store.leases.reclaim("tick", new.run_id, OWNER_A, "owner_dead", at(MINUTE + 30), 0)
    assert lease_store.leases.find_run("tick", new.run_id) is not None


def test_a_run_past_its_deadline_ends_timeout_unless_it_ended_first(lease_store: Backend) -> None:
    lease_store.define("a", every="1m")
    lease_store.define("b", every="1m")
    batch = lease_store.leases.claim_due(at(MINUTE), OWNER_A, lease(at(MINUTE)))
    lease_store.leases.mark_dispatched(OWNER_A, [child(new) for new in batch.claims], at(MINUTE))
    late, ended = batch.claims
    lease_store.leases.finish_many(OWNER_A, [RunEnd(ended.run_id, success(), ended.job)], at(MINUTE + 5))

    assert lease_store.leases.end_past_deadline(late.job, late.run_id, 4000.0, at(MINUTE + 9), 1)
    assert not lease_store.leases.end_past_deadline(ended.job, ended.run_id, 4000.0, at(MINUTE + 9), 1)
    [record] = lease_store.leases.history(late.job)
    assert (record["status"], record["reason"]) == ("timeout", "deadline_janitor")


def test_a_spawn_failure_gives_the_slot_back_without_a_record(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = claim_one(lease_store, at(MINUTE))
    row = Refused(new.job, new.run_id, None, _spawn_failed(new))
    lease_store.leases.release_refused(OWNER_A, [row], at(MINUTE))
    assert lease_store.leases.claims_of("tick") == []
    assert lease_store.leases.history("tick") == []
    assert claim_one(lease_store, at(2 * MINUTE)).slot == at(2 * MINUTE)


# --- overlap, force-run, kill ---------------------------------------------------------------------


def test_overlap_skip_claims_nothing_while_a_run_is_in_flight(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m", overlap="skip")
    first = start_one(lease_store, at(MINUTE))
    assert lease_store.leases.claim_due(at(2 * MINUTE), OWNER_A, lease(at(2 * MINUTE))).claims == []
    assert lease_store.leases.claim_force("tick", at(2 * MINUTE), OWNER_A, lease(at(2 * MINUTE))).claims == []
    rows = lease_store.events(AuditEvent.RUN_SKIPPED)
    assert [(row["reason"], row["running"], row["trigger"]) for row in rows] == [
        ("overlap", first.run_id, "schedule"), ("overlap", first.run_id, "force")]


def test_force_run_claims_now_and_leaves_the_schedule_alone(lease_store: Backend) -> None:
    lease_store.define("tick", every="1h")
    forced: ClaimBatch = lease_store.leases.claim_force("tick", at(10), OWNER_A, lease(at(10)))
    [new] = forced.claims
    assert (new.trigger, new.slot) == ("force", at(10))
    lease_store.leases.mark_dispatched(OWNER_A, [child(new)], at(10))
    lease_store.leases.finish_many(OWNER_A, [RunEnd(new.run_id, success(), new.job)], at(11))
    assert claim_one(lease_store, at(3600)).slot == at(3600)


def test_killing_a_run_no_loop_supervises_records_it_killed_once(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = start_one(lease_store, at(MINUTE))
    killed = Outcome(RunStatus.KILLED, "operator")
    assert lease_store.leases.end_unsupervised("tick", new.run_id, killed, at(MINUTE + 3), 2)
    assert not lease_store.leases.end_unsupervised("tick", new.run_id, killed, at(MINUTE + 4), 0)
    [record] = lease_store.leases.history("tick")
    assert (record["status"], record["reason"]) == ("killed", "operator")
    [row] = lease_store.events(AuditEvent.RUN_KILLED)
    assert row["processes_killed"] == 2


# --- read views ------------------------------------------------------------------------------------


def test_read_views_show_runs_in_flight_and_history(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    assert lease_store.leases.has_job("tick") and not lease_store.leases.has_job("nope")
    first = start_one(lease_store, at(MINUTE))
    [claim] = lease_store.leases.claims_of("tick")
    assert (claim.run_id, claim.trigger, claim.attempt, claim.owner, claim.dispatched) == \
        (first.run_id, "schedule", 1, OWNER_A, True)
    assert lease_store.leases.find_run("tick", "no-such-run") is None
    lease_store.leases.finish_many(OWNER_A, [RunEnd(first.run_id, success(), "tick")], at(MINUTE + 1))
    second = start_one(lease_store, at(2 * MINUTE))
    lease_store.leases.finish_many(OWNER_A, [RunEnd(second.run_id, success(), "tick")], at(2 * MINUTE + 1))
    assert lease_store.leases.claims_of("tick") == []
    assert [r["run_id"] for r in lease_store.leases.history("tick")] == [first.run_id, second.run_id]
    assert [r["run_id"] for r in lease_store.leases.history("tick", 1)] == [second.run_id]
    assert lease_store.leases.history("tick", 0) == []


def _spawn_failed(new: NewClaim) -> Event:
    return Event(AuditEvent.RUN_SPAWN_FAILED, {"job": new.job, "run_id": new.run_id, "reason": "spawn_failed"})


def test_job_views_show_each_job_with_its_state_and_the_counters(lease_store: Backend) -> None:
    lease_store.define("b", every="1m")
    lease_store.define("a", every="1h")
    new = start_one(lease_store, at(MINUTE))
    lease_store.leases.reclaim(new.job, new.run_id, OWNER_A, "owner_dead", at(MINUTE + 1), 0)

    assert [view.spec.name for view in lease_store.leases.jobs()] == ["a", "b"]
    view = lease_store.leases.job("b")
    assert (view.state["last_status"], view.state["last_run_id"], view.claims) == ("lost", new.run_id, {})
    assert lease_store.leases.counters() == {"owner_dead": 1}
    with pytest.raises(JobNotFoundError, match="no job named 'nope'"):
        lease_store.leases.job("nope")


def test_a_forced_spawn_failure_is_recorded_every_time_and_blocks_nothing(lease_store: Backend) -> None:
    """Whoever forced the run (perhaps with --wait) learns from its record that nothing ran."""
    lease_store.define("tick", every="1h")
    for second in (10, 20):
        [new] = lease_store.leases.claim_force("tick", at(second), OWNER_A, lease(at(second))).claims
        outcome = Outcome(RunStatus.NOT_STARTED, "spawn_failed", output_tail="E2BIG")
        row = Refused(new.job, new.run_id, outcome, _spawn_failed(new), always_record=True)
        lease_store.leases.release_refused(OWNER_A, [row], at(second))
    assert lease_store.leases.claims_of("tick") == []
    assert [(r["status"], r["reason"]) for r in lease_store.leases.history("tick")] == \
        [("not_started", "spawn_failed")] * 2
    assert len(lease_store.events(AuditEvent.RUN_SPAWN_FAILED)) == 2
    assert not lease_store.leases.job("tick").state.get("blocked")


def test_job_views_of_a_name_prefix_are_the_jobs_whose_name_starts_with_it(lease_store: Backend) -> None:
    for name in ("report", "backup_c", "backup-b", "backup-a", "back"):
        lease_store.define(name, every="1h")

    def names(prefix: str | None) -> list[str]:
        return [view.spec.name for view in lease_store.leases.jobs(prefix)]

    assert names("backup-") == ["backup-a", "backup-b"]
    assert names("backup_") == ["backup_c"]  # plain text: `_` is no wildcard on PostgreSQL
    assert names("back") == ["back", "backup-a", "backup-b", "backup_c"]
    assert names("x") == []
    assert names("") == names(None) == ["back", "backup-a", "backup-b", "backup_c", "report"]


def test_the_jobs_that_may_be_stale_hold_every_stale_job(lease_store: Backend) -> None:
    from cronctl.jobs.health import job_health

    for name in ("fine", "late", "failed", "running", "paused-late"):
        lease_store.define(name, every="1h")
    now = at(3 * 3600)
    lease_store.set_state("fine", next_run_at=to_iso(now + timedelta(minutes=5)))
    lease_store.set_state("failed", last_status="error", last_exit_code=1, consecutive_failures=1,
                          last_run_at=to_iso(now - timedelta(minutes=1)), next_run_at=to_iso(now + timedelta(minutes=5)))
    lease_store.set_state("running", next_run_at=to_iso(now + timedelta(minutes=5)))
    start_one_of(lease_store, "running", now)
    lease_store.pause("paused-late")

    def stale(views: list[Any]) -> list[str]:
        return [v.spec.name for v in views if job_health(v, now, lambda owner: False, lambda claim: True).stale]

    every = lease_store.leases.jobs()
    judged, any_jobs = lease_store.leases.may_be_stale(now)
    assert stale(every) == ["failed", "late", "running"]  # the run's owner judged dead: wedged
    assert set(stale(every)) <= {view.spec.name for view in judged}
    assert "fine" not in {view.spec.name for view in judged} or lease_store.name == "json"
    assert any_jobs in (True, None)
    assert lease_store.leases.may_be_stale(now)[0] == judged


def start_one_of(backend: Backend, job: str, now: datetime) -> None:
    """A run of `job` claimed by force and dispatched: a live run."""
    [new] = backend.leases.claim_force(job, now, OWNER_A, lease(now)).claims
    assert backend.leases.mark_dispatched(OWNER_A, [child(new)], now) == [child(new)]
