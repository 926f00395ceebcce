"""The guarantees of `LeaseStore` for notifications owed (SPEC §12), on every backend: a
decision owes its notifications in its own write; a loop finds them due (`notify_due`),
leases a try (`notify_take`), records its outcome (`notify_settle`, with backoff and its
audit row); the health pass owes `stale` once per episode (`notify_stale`).

Nothing is sent here: a try's outcome is given, as the delivery worker would report it.
"""

from __future__ import annotations

from cronctl.models import AuditEvent, RunStatus
from cronctl.store.claims import Outcome
from cronctl.store.leases import RunEnd
from cronctl.store.notify_owed import Result, RetryPolicy
from tests.contract.conftest import Backend
from tests.contract.test_lease_store import MINUTE, OWNER_A, at, start_one

TARGET = {"url": "http://127.0.0.1:9/hook"}  # failure, recovery, stale (the default events)
POLICY = RetryPolicy(first=10.0, cap=60.0, give_up=3600.0)


def failed_run(backend: Backend, minute: int = 1) -> str:
    new = start_one(backend, at(minute * MINUTE))
    failed = Outcome(RunStatus.ERROR, "exit_code", exit_code=2, duration=1.0)
    backend.leases.finish_many(OWNER_A, [RunEnd(new.run_id, failed, new.job)], at(minute * MINUTE + 1))
    return new.run_id


def test_a_failure_owes_its_notification_in_the_same_write(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m", notify=[TARGET], alert_after=2)
    run_id = failed_run(lease_store)
    [item] = lease_store.leases.notify_due(at(MINUTE + 1))
    assert (item.job, item.entry["event"], item.entry["body"]["run_id"]) == ("tick", "failure", run_id)
    assert item.key == f"cronctl-{run_id}-failure-1"
    assert lease_store.leases.notify_due(at(MINUTE)) == []  # not due before it was owed
    second = failed_run(lease_store, minute=2)  # alert_after reached: stale too, in the same write
    assert sorted(item.entry["event"] for item in lease_store.leases.notify_due(at(2 * MINUTE + 1))
                  if item.entry["body"]["run_id"] == second) == ["failure", "stale"]


def test_a_sent_notification_is_settled_once_and_audited(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m", notify=[TARGET], alert_after=2)
    failed_run(lease_store)
    now = at(MINUTE + 2)
    [item] = lease_store.leases.notify_due(now)
    [taken] = lease_store.leases.notify_take([(item.job, item.key)], "loop-a", now, 30.0)
    assert (taken.key, taken.entry["lease_by"]) == (item.key, "loop-a")

    lease_store.leases.notify_settle([Result(item.job, item.key, "sent", code=204)], now, POLICY)

    assert lease_store.leases.notify_due(at(MINUTE + 3600)) == []
    assert lease_store.leases.notify_take([(item.job, item.key)], "loop-a", now, 30.0) == []  # settled: gone
    [row] = lease_store.events(AuditEvent.NOTIFY_SENT)
    assert (row["job"], row["key"], row["attempt"], row["code"], row["notification"]) == (
        "tick", item.key, 1, 204, "failure")


def test_a_failed_try_is_retried_after_its_backoff(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m", notify=[TARGET], alert_after=2)
    failed_run(lease_store)
    now = at(MINUTE + 2)
    [item] = lease_store.leases.notify_due(now)
    lease_store.leases.notify_take([(item.job, item.key)], "loop-a", now, 30.0)

    lease_store.leases.notify_settle([Result(item.job, item.key, "retry", "HTTP 503", 503)], now, POLICY)

    assert lease_store.leases.notify_due(at(MINUTE + 11)) == []  # 10 s of backoff from the try
    [again] = lease_store.leases.notify_due(at(MINUTE + 12))
    assert (again.key, again.entry["attempts"], again.entry["last_error"]) == (item.key, 1, "HTTP 503")
    [row] = lease_store.events(AuditEvent.NOTIFY_FAILED)
    assert (row["error"], row["next_try_at"]) == ("HTTP 503", "2026-03-01T12:01:12.000+00:00")


def test_a_refused_try_is_abandoned_and_counted(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m", notify=[TARGET], alert_after=2)
    failed_run(lease_store)
    now = at(MINUTE + 2)
    [item] = lease_store.leases.notify_due(now)
    lease_store.leases.notify_settle([Result(item.job, item.key, "abandon", "HTTP 404", 404)], now, POLICY)
    assert lease_store.leases.notify_due(at(MINUTE + 3600)) == []
    assert len(lease_store.events(AuditEvent.NOTIFY_ABANDONED)) == 1
    assert lease_store.leases.job("tick").state["notify_abandoned"]["count"] == 1


def test_stale_is_owed_once_per_episode(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m", notify=[TARGET], alert_after=2)
    assert lease_store.leases.notify_stale("tick", ("late", "missed its slot"), at(5 * MINUTE))
    assert not lease_store.leases.notify_stale("tick", ("late", "missed its slot"), at(6 * MINUTE))
    [item] = lease_store.leases.notify_due(at(6 * MINUTE))
    assert (item.entry["event"], item.entry["body"]["status"], item.entry["body"]["reason"]) == (
        "stale", "late", "missed its slot")

    assert not lease_store.leases.notify_stale("tick", None, at(7 * MINUTE))  # healthy again
    assert lease_store.leases.notify_stale("tick", ("late", "missed its slot"), at(8 * MINUTE))  # news again


def test_a_job_without_targets_owes_nothing(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    failed_run(lease_store)
    assert not lease_store.leases.notify_stale("tick", ("late", "missed its slot"), at(5 * MINUTE))
    assert lease_store.leases.notify_due(at(5 * MINUTE)) == []
