"""What the schema and `PgLeaseStore` guarantee together on the claim path, beyond the contract suite.

The contract suite (tests/contract) holds both backends to the same decisions; here are
the PostgreSQL parts of them: the unique index `cronctl_runs_once` and what the claim
does when a definition puts `next_run_at` back on a slot that already fired, the
`paused` and `wake_at` columns the due scan reads, runs of two hosts side by side, a
decision and its audit rows committing (or not) together, and the due scan on its index.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from cronctl.clock import FakeClock
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec, Overlap, RunStatus
from cronctl.store.claims import Dispatched, Lease, NewClaim, Outcome, Owner
from cronctl.store.leases import HeldGate, RunEnd, Unhold
from cronctl.store.pg import unit as pg_unit
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.leases import PgLeaseStore
from cronctl.timefmt import from_iso, to_iso
from tests.pg.pghelp import audit_events, one

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
SLOT = T0 + timedelta(minutes=1)
OWNER_A = Owner("gen-a", 1001, 111.0, "boot-a")
OWNER_B = Owner("gen-b", 2002, 222.0, "boot-b")
SUCCESS = Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=1.0)


def store(conn: Connection, host: str = "host-a") -> PgLeaseStore:
    return PgLeaseStore(conn, host, judge_by="caller", clock=FakeClock(T0))


def define(conn: Connection, name: str, next_run_at: datetime | None = SLOT, **fields: Any) -> JobSpec:
    """A job as a definition writes it: its spec and a state whose next slot is `next_run_at`."""
    spec = JobSpec(name=name, command="true", every=60.0, **fields)
    with conn.transaction():
        put_entry(conn, entry_from(spec, new_state(T0, next_run_at)))
    return spec


def lease(now: datetime) -> Lease:
    return Lease(10_000.0, now + timedelta(seconds=60))


def claim(leases: PgLeaseStore, now: datetime, owner: Owner = OWNER_A) -> list[NewClaim]:
    return leases.claim_due(now, owner, lease(now)).claims


def run_to_success(leases: PgLeaseStore, new: NewClaim, now: datetime, owner: Owner = OWNER_A) -> None:
    child = Dispatched(new.job, new.run_id, 40_000, 1.0, 5_000.0)
    assert leases.mark_dispatched(owner, [child], now) == [child]
    [done] = leases.finish_many(owner, [RunEnd(new.run_id, SUCCESS, new.job)], now)
    assert not done.fenced


# --- a slot fires once: cronctl_runs_once ---------------------------------------------------------


def test_the_index_refuses_a_second_run_of_one_job_slot_and_attempt(conn: Connection) -> None:
    define(conn, "backup")
    [first] = claim(store(conn), SLOT)
    with pytest.raises(psycopg.errors.UniqueViolation, match="cronctl_runs_once"), conn.transaction():
        conn.execute("INSERT INTO cronctl_runs (run_id, job, slot, trigger, attempt, exclusive, state)"
                     " VALUES ('intruder', 'backup', %s, 'schedule', 1, false, 'claimed')", (first.slot,))
    assert one(conn, "SELECT count(*) FROM cronctl_runs") == 1


@pytest.mark.parametrize("ended", [True, False], ids=["after-its-run-ended", "while-its-run-is-live"])
def test_a_definition_moving_next_run_at_back_onto_a_fired_slot_never_fires_it_again(
        conn: Connection, ended: bool) -> None:
    leases = store(conn)
    define(conn, "backup", overlap=Overlap.ALLOW)
    define(conn, "other", next_run_at=SLOT + timedelta(seconds=30))
    [first] = claim(leases, SLOT)
    if ended:
        run_to_success(leases, first, SLOT)
    # A definition written by a host whose clock is behind (or a one-shot put back on its
    # instant) puts next_run_at on the slot that already fired.
    with conn.transaction():
        state = {**leases.job("backup").state, "next_run_at": to_iso(SLOT), "claims": {}}
        conn.execute("UPDATE cronctl_jobs SET next_run_at = %s, wake_at = %s, state = %s WHERE name = 'backup'",
                     (SLOT, SLOT, psycopg.types.json.Jsonb(state)))

    later = SLOT + timedelta(seconds=40)
    batch = leases.claim_due(later, OWNER_B, lease(later))

    # No second run of (backup, 12:01, 1), no error, and the other job of the batch is claimed all the same.
    assert [new.job for new in batch.claims] == ["other"]
    assert one(conn, "SELECT count(*) FROM cronctl_runs WHERE job = 'backup'") == 1
    assert audit_events(conn, "backup")[-1] == ("run.skipped", "slot_already_fired")
    assert leases.job("backup").next_run_at == SLOT + timedelta(minutes=1)  # moved past the fired slot
    [second] = claim(leases, SLOT + timedelta(minutes=1))
    assert (second.job, second.slot) == ("backup", SLOT + timedelta(minutes=1))


def test_the_high_water_mark_keeps_an_earlier_slot_than_a_fired_one_from_firing(conn: Connection) -> None:
    leases = store(conn)
    define(conn, "backup", overlap=Overlap.ALLOW)
    [first] = claim(leases, SLOT)
    assert one(conn, "SELECT last_slot FROM cronctl_jobs WHERE name = 'backup'") is None  # claimed, not fired
    run_to_success(leases, first, SLOT)
    assert one(conn, "SELECT last_slot FROM cronctl_jobs WHERE name = 'backup'") == SLOT  # dispatched: fired
    # A definition puts next_run_at on a slot that never had a run, but is earlier than one that fired.
    earlier = SLOT - timedelta(seconds=20)
    with conn.transaction():
        state = {**leases.job("backup").state, "next_run_at": to_iso(earlier), "claims": {}}
        conn.execute("UPDATE cronctl_jobs SET next_run_at = %s, wake_at = %s, state = %s WHERE name = 'backup'",
                     (earlier, earlier, psycopg.types.json.Jsonb(state)))
    assert claim(leases, SLOT + timedelta(seconds=5)) == []
    assert audit_events(conn, "backup")[-1] == ("run.skipped", "slot_already_fired")
    assert one(conn, "SELECT count(*) FROM cronctl_runs WHERE job = 'backup'") == 1


def test_a_claim_handed_back_before_its_gate_leaves_the_mark_alone(conn: Connection) -> None:
    """Only a dispatched run raises the mark: a slot claimed ahead and handed back (its job
    paused or edited before the instant) fires when it comes again."""
    leases = store(conn)
    define(conn, "backup")
    ahead = SLOT - timedelta(seconds=1)
    [new] = leases.claim_ahead(ahead, SLOT + timedelta(seconds=1), OWNER_A, lease(ahead)).claims
    assert leases.unhold([Unhold("backup", new.run_id, new.advanced_to)], "edited") == 1
    assert one(conn, "SELECT last_slot FROM cronctl_jobs WHERE name = 'backup'") is None
    [again] = claim(leases, SLOT)
    assert again.slot == SLOT


def test_only_the_exact_job_slot_and_attempt_counts_as_fired(conn: Connection) -> None:
    other_slot = SLOT + timedelta(seconds=30)
    define(conn, "a")
    define(conn, "b", next_run_at=other_slot)
    with conn.transaction():  # runs of each job at the other one's slot: not the slots about to fire
        for run_id, job, slot in (("old-a", "a", other_slot), ("old-b", "b", SLOT)):
            conn.execute("INSERT INTO cronctl_runs (run_id, job, slot, trigger, attempt, exclusive, state)"
                         " VALUES (%s, %s, %s, 'schedule', 1, false, 'success')", (run_id, job, slot))
    batch = claim(store(conn), other_slot)
    assert sorted((new.job, new.slot) for new in batch) == [("a", SLOT), ("b", other_slot)]


def test_a_retry_of_a_fired_slot_is_another_attempt_and_fires(conn: Connection) -> None:
    leases = store(conn)
    define(conn, "flaky", retries=1, retry_delay=10.0)
    [first] = claim(leases, SLOT)
    child = Dispatched("flaky", first.run_id, 40_000, 1.0, 5_000.0)
    leases.mark_dispatched(OWNER_A, [child], SLOT)
    leases.finish_many(OWNER_A, [RunEnd(first.run_id, Outcome(RunStatus.ERROR, "exit_code", exit_code=1), "flaky")],
                       SLOT)
    [retry] = claim(leases, SLOT + timedelta(seconds=11))
    assert (retry.slot, retry.attempt) == (SLOT, 2)
    assert one(conn, "SELECT array_agg(attempt ORDER BY attempt) FROM cronctl_runs WHERE slot = %s", SLOT) == [1, 2]


# --- what the due scan reads ----------------------------------------------------------------------


def test_paused_and_not_yet_due_jobs_are_left_alone(conn: Connection) -> None:
    define(conn, "paused", paused=True)
    define(conn, "later", next_run_at=SLOT + timedelta(minutes=5))
    define(conn, "done", next_run_at=None)
    assert claim(store(conn), SLOT + timedelta(minutes=1)) == []
    assert one(conn, "SELECT count(*) FROM cronctl_runs") == 0


def test_the_due_scan_range_scans_the_wake_index(conn: Connection) -> None:
    # The query `claim_due` locks its rows with (document.load_jobs); tiny test tables would be
    # scanned whole anyway: what matters is whether the index *can* bound the scan.
    query = f"SELECT name, spec, state FROM cronctl_jobs WHERE {pg_unit._DUE} ORDER BY name FOR UPDATE SKIP LOCKED"
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        for now in (SLOT, None):  # the caller's instant; the database's (statement_timestamp())
            plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {query}", {"now": now}).fetchall())
            assert "cronctl_jobs_wake" in plan and "Index Cond: (wake_at <= " in plan, plan


# --- two hosts' runs side by side ---------------------------------------------------------------------


def test_an_overlap_skip_job_has_one_live_run_across_hosts(connections: Callable[[], Connection]) -> None:
    conn_a, conn_b = connections(), connections()
    define(conn_a, "report", overlap=Overlap.SKIP)
    [first] = claim(store(conn_a, "host-a"), SLOT)
    host_b = store(conn_b, "host-b")
    assert claim(host_b, SLOT + timedelta(minutes=1), OWNER_B) == []
    # A's run has not started (its claim is not dispatched): the slot is left due, not skipped
    # as overlap because of it (store/pg/takeover.py).
    assert ("run.skipped", "overlap") not in audit_events(conn_b, "report")
    child = Dispatched(first.job, first.run_id, 40_000, 1.0, 5_000.0)
    host_a = store(conn_a, "host-a")
    assert host_a.mark_dispatched(OWNER_A, [child], SLOT + timedelta(seconds=30)) == [child]
    assert claim(host_b, SLOT + timedelta(minutes=1, seconds=1), OWNER_B) == []
    assert audit_events(conn_b, "report")[-1] == ("run.skipped", "overlap")  # now it runs: skipped
    [done] = host_a.finish_many(OWNER_A, [RunEnd(first.run_id, SUCCESS, first.job)], SLOT + timedelta(seconds=40))
    assert not done.fenced
    [second] = claim(host_b, SLOT + timedelta(minutes=2), OWNER_B)
    assert one(conn_b, "SELECT array_agg(host_id || ':' || state ORDER BY fence) FROM cronctl_runs") == [
        "host-a:success", "host-b:claimed"]
    assert second.slot == SLOT + timedelta(minutes=2)


def test_an_overlap_allow_job_may_run_on_two_hosts_at_once(connections: Callable[[], Connection]) -> None:
    conn_a, conn_b = connections(), connections()
    define(conn_a, "sync", overlap=Overlap.ALLOW)
    claim(store(conn_a, "host-a"), SLOT)
    claim(store(conn_b, "host-b"), SLOT + timedelta(minutes=1), OWNER_B)
    assert one(conn_a, "SELECT array_agg(host_id ORDER BY fence) FROM cronctl_runs WHERE state = 'claimed'") == [
        "host-a", "host-b"]


# --- the gate restarts the lease (store/pg/lease_fence.py) -------------------------------------------


def _lease_until(leases: PgLeaseStore, job: str, run_id: str) -> datetime | None:
    found = leases.find_run(job, run_id)
    assert found is not None and found.dispatched
    return from_iso(found.lease_until)


def test_the_gate_restarts_the_lease_for_as_long_as_the_claim_granted_it(conn: Connection) -> None:
    leases = store(conn)
    define(conn, "now")
    define(conn, "ahead", next_run_at=SLOT + timedelta(seconds=2))
    [new] = claim(leases, SLOT)  # lease: 60 s from the claim
    late_gate = SLOT + timedelta(seconds=90)  # a loop stopped between its claim and its gate
    leases.mark_dispatched(OWNER_A, [Dispatched("now", new.run_id, 40_000, 1.0, 5_000.0)], late_gate)
    assert _lease_until(leases, "now", new.run_id) == late_gate + timedelta(seconds=60)

    [held] = leases.claim_ahead(SLOT, SLOT + timedelta(seconds=2), OWNER_A, lease(SLOT)).claims
    child = Dispatched("ahead", held.run_id, 40_001, 1.0, 5_000.0)
    gate = HeldGate("ahead", held.run_id, held.spec, to_iso(held.slot) or "", held.advanced_to, child,
                    SLOT + timedelta(seconds=2))
    assert leases.release_held(OWNER_A, [gate], lateness=[]) == [held.run_id]
    assert _lease_until(leases, "ahead", held.run_id) == SLOT + timedelta(seconds=62)


def test_a_gate_on_time_never_shortens_the_lease(conn: Connection) -> None:
    leases = store(conn)
    define(conn, "now")
    [new] = claim(leases, SLOT)
    renewed = Lease(10_000.0, SLOT + timedelta(minutes=10))
    assert leases.renew(OWNER_A, {new.run_id: "now"}, renewed) == []
    leases.mark_dispatched(OWNER_A, [Dispatched("now", new.run_id, 40_000, 1.0, 5_000.0)], SLOT)
    assert _lease_until(leases, "now", new.run_id) == SLOT + timedelta(minutes=10)


# --- a decision and its audit rows commit together --------------------------------------------------


def test_audit_rows_roll_back_with_the_decision(connections: Callable[[], Connection]) -> None:
    conn = connections()
    define(conn, "backup")
    with pytest.raises(RuntimeError), conn.transaction():
        assert len(claim(store(conn), SLOT)) == 1
        raise RuntimeError("the claim's transaction is abandoned before COMMIT")
    assert one(conn, "SELECT count(*) FROM cronctl_audit WHERE event = 'run.claimed'") == 0
    assert one(conn, "SELECT count(*) FROM cronctl_runs") == 0
    assert one(conn, "SELECT next_run_at FROM cronctl_jobs WHERE name = 'backup'") == SLOT
    assert len(claim(store(connections()), SLOT)) == 1
