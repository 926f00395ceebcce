"""The guarantees of `LeaseStore` for what follows a decision, on every backend: a run's end
reaches the audit log and the history exactly once even when its writer dies right after
its commit (`deliver_pending`, `settle`, `flush_settled`), the recovery writes (`rearm`,
`bump`) and the refused spawns (`release_refused`) of a blocked config and a forced run.

How a backend keeps its promise differs (the JSON store leaves a run's end pending in its
outbox and delivers it after the commit; PostgreSQL commits it with the end): the tests
say only what a caller sees.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cronctl.models import AuditEvent, Fault, RunStatus
from cronctl.store.claims import Event, NewClaim, Outcome
from cronctl.store.leases import Refused, RunEnd
from cronctl.timefmt import to_iso
from tests.contract.conftest import Backend
from tests.contract.test_lease_store import MINUTE, OWNER_A, at, child, claim_one, lease, start_one, success


def every_writer_dead(_by: dict[str, Any]) -> bool:
    return False


def finished_rows(backend: Backend, run_id: str) -> list[dict[str, Any]]:
    return [row for row in backend.events(AuditEvent.RUN_FINISHED) if row["run_id"] == run_id]


# --- what must follow a run's end ----------------------------------------------------------------


def _finish(backend: Backend, new: NewClaim) -> None:
    backend.leases.finish_many(OWNER_A, [RunEnd(new.run_id, success(), new.job, "/logs/run.log")], at(2 * MINUTE))


def _reclaim(backend: Backend, new: NewClaim) -> None:
    assert backend.leases.reclaim(new.job, new.run_id, OWNER_A, "owner_dead", at(2 * MINUTE), 1)


def _past_deadline(backend: Backend, new: NewClaim) -> None:
    assert backend.leases.end_past_deadline(new.job, new.run_id, 30.0, at(2 * MINUTE), 1)


def _unsupervised(backend: Backend, new: NewClaim) -> None:
    assert backend.leases.end_unsupervised(new.job, new.run_id, Outcome(RunStatus.KILLED, "operator"),
                                           at(2 * MINUTE), 1)


ENDERS: dict[str, tuple[Callable[[Backend, NewClaim], None], str]] = {
    "finish_many": (_finish, "success"), "reclaim": (_reclaim, "lost"),
    "end_past_deadline": (_past_deadline, "timeout"), "end_unsupervised": (_unsupervised, "killed")}


@pytest.mark.parametrize("ender", sorted(ENDERS))
def test_a_run_end_whose_writer_died_after_the_commit_is_delivered_once(lease_store: Backend, ender: str) -> None:
    end, status = ENDERS[ender]
    lease_store.define("tick", every="1m")
    new = start_one(lease_store, at(MINUTE))
    with lease_store.crash_after_commit():
        end(lease_store, new)

    assert lease_store.leases.deliver_pending(every_writer_dead) == []
    assert lease_store.leases.deliver_pending(every_writer_dead) == []  # a second recovery finds nothing

    [record] = lease_store.leases.history("tick")
    assert (record["run_id"], record["status"]) == (new.run_id, status)
    assert len(finished_rows(lease_store, new.run_id)) == 1
    assert lease_store.pending() == 0
    assert lease_store.leases.claims_of("tick") == []


def test_a_forced_spawn_failure_whose_writer_died_is_still_recorded(lease_store: Backend) -> None:
    """`force-run --wait` waits for this record: a crash after the commit must not lose it."""
    lease_store.define("tick", every="1h")
    [new] = lease_store.leases.claim_force("tick", at(10), OWNER_A, lease(at(10))).claims
    outcome = Outcome(RunStatus.NOT_STARTED, "spawn_failed", output_tail="E2BIG", fault=Fault.JOB)
    with lease_store.crash_after_commit():
        lease_store.leases.release_refused(OWNER_A, [Refused(new.job, new.run_id, outcome, _spawn_failed(new),
                                                             always_record=True)], at(10))
    assert lease_store.leases.deliver_pending(every_writer_dead) == []
    [record] = lease_store.leases.history("tick")
    assert (record["status"], record["reason"]) == ("not_started", "spawn_failed")
    assert [row["run_id"] for row in lease_store.events(AuditEvent.RUN_SPAWN_FAILED)] == [new.run_id]


def test_a_delivered_end_is_never_delivered_again_and_flush_leaves_nothing_pending(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = start_one(lease_store, at(MINUTE))
    _finish(lease_store, new)
    # Delivered by its writer: a recovery that judges that writer dead finds nothing to add.
    assert lease_store.leases.deliver_pending(every_writer_dead) == []
    lease_store.leases.settle([("tick", new.run_id)])
    lease_store.leases.flush_settled()
    assert lease_store.pending() == 0
    assert len(lease_store.leases.history("tick")) == 1
    assert len(finished_rows(lease_store, new.run_id)) == 1


def test_the_next_write_made_anyway_drops_what_was_delivered(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    first = start_one(lease_store, at(MINUTE))
    _finish(lease_store, first)
    claim_one(lease_store, at(3 * MINUTE))  # the loop's next claim: no write of its own for the outbox
    assert lease_store.pending() == 0
    assert lease_store.leases.deliver_pending(every_writer_dead) == []
    assert len(finished_rows(lease_store, first.run_id)) == 1


# --- refused spawns ------------------------------------------------------------------------------


def _spawn_failed(new: NewClaim) -> Event:
    return Event(AuditEvent.RUN_SPAWN_FAILED, {"job": new.job, "run_id": new.run_id, "reason": "spawn_failed"})


def _blocked(new: NewClaim) -> Refused:
    outcome = Outcome(RunStatus.NOT_STARTED, "blocked_config", output_tail="cwd /gone does not exist", fault=Fault.JOB)
    return Refused(new.job, new.run_id, outcome, Event(AuditEvent.RUN_SKIPPED, {
        "job": new.job, "run_id": new.run_id, "slot": to_iso(new.slot), "reason": "blocked_config"}))


def test_a_blocked_config_is_recorded_once_then_released_until_a_run_succeeds(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    for minute in (1, 2):
        new = claim_one(lease_store, at(minute * MINUTE))
        lease_store.leases.release_refused(OWNER_A, [_blocked(new)], at(minute * MINUTE))
    assert lease_store.leases.job("tick").state["blocked"] == "cwd /gone does not exist"
    assert [(r["status"], r["reason"]) for r in lease_store.leases.history("tick")] == [
        ("not_started", "blocked_config")]
    assert [row["reason"] for row in lease_store.events(AuditEvent.RUN_SKIPPED)] == ["blocked_config"]

    fixed = claim_one(lease_store, at(3 * MINUTE))  # the config was fixed: a run starts and ends
    lease_store.leases.mark_dispatched(OWNER_A, [child(fixed)], at(3 * MINUTE))
    lease_store.leases.finish_many(OWNER_A, [RunEnd(fixed.run_id, success(), "tick")], at(3 * MINUTE + 1))
    assert not lease_store.leases.job("tick").state.get("blocked")
    again = claim_one(lease_store, at(4 * MINUTE))  # blocked again: news again, recorded
    lease_store.leases.release_refused(OWNER_A, [_blocked(again)], at(4 * MINUTE))
    assert [r["reason"] for r in lease_store.leases.history("tick")] == ["blocked_config", None, "blocked_config"]


def test_a_forced_spawn_failure_after_a_blocked_config_is_still_recorded(lease_store: Backend) -> None:
    """A forced run's record never depends on what the job's scheduled runs were refused for."""
    lease_store.define("tick", every="1m")
    new = claim_one(lease_store, at(MINUTE))
    lease_store.leases.release_refused(OWNER_A, [_blocked(new)], at(MINUTE))
    [forced] = lease_store.leases.claim_force("tick", at(MINUTE + 5), OWNER_A, lease(at(MINUTE + 5))).claims
    outcome = Outcome(RunStatus.NOT_STARTED, "spawn_failed", output_tail="cwd /gone does not exist")
    lease_store.leases.release_refused(OWNER_A, [Refused(forced.job, forced.run_id, outcome, _spawn_failed(forced),
                                                         always_record=True)], at(MINUTE + 5))
    assert [(r["run_id"], r["reason"]) for r in lease_store.leases.history("tick")] == [
        (new.run_id, "blocked_config"), (forced.run_id, "spawn_failed")]


# --- recovery writes -------------------------------------------------------------------------------


def test_a_failed_job_pushed_past_its_next_slot_is_rearmed_once(lease_store: Backend) -> None:
    lease_store.define("tick", every="1h")
    new = start_one(lease_store, at(3600))
    failed = Outcome(RunStatus.ERROR, "exit_code", exit_code=3, duration=1.0)
    lease_store.leases.finish_many(OWNER_A, [RunEnd(new.run_id, failed, "tick")], at(3601))
    far = to_iso(at(10 * 3600))  # a clock stepped back, or an older version, left it far ahead
    lease_store.set_state("tick", next_run_at=far)
    now = at(3 * 3600)

    assert lease_store.leases.rearm("tick", now)
    assert not lease_store.leases.rearm("tick", now + (at(60) - at(0)))  # once per failure

    [row] = lease_store.events(AuditEvent.RECOVERY_PERSISTED_ERROR_REARMED)
    assert (row["previous_next_run_at"], row["next_run_at"], row["last_status"]) == (far, to_iso(now), "error")
    assert lease_store.leases.counters()["persisted_error_rearmed"] == 1
    assert claim_one(lease_store, now).slot == now


def test_a_job_not_wedged_is_not_rearmed(lease_store: Backend) -> None:
    lease_store.define("tick", every="1h")
    new = start_one(lease_store, at(3600))
    lease_store.leases.finish_many(OWNER_A, [RunEnd(new.run_id, success(), "tick")], at(3601))
    assert not lease_store.leases.rearm("tick", at(3 * 3600))
    assert not lease_store.leases.rearm("nope", at(3 * 3600))
    assert lease_store.events(AuditEvent.RECOVERY_PERSISTED_ERROR_REARMED) == []


def test_bump_counts_one_more_of_a_recovery_counter(lease_store: Backend) -> None:
    lease_store.leases.bump("clock_jumps")
    lease_store.leases.bump("clock_jumps")
    lease_store.leases.bump("adopted")
    assert lease_store.leases.counters() == {"clock_jumps": 2, "adopted": 1}
