"""What `PgLeaseStore` adds to the contract suite (tests/contract): the database clock, row locks, rows."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from cronctl.clock import FakeClock
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec, RunStatus
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.leases import RunEnd
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.leases import PgLeaseStore
from tests.pg.pghelp import db_now, one

OWNER = Owner("gen-a", 1001, 111.0, "boot-1")
LONG_AGO = datetime(1990, 1, 1, tzinfo=timezone.utc)


def define(conn: Connection, name: str, next_run_at: datetime) -> None:
    spec = JobSpec(name=name, command="true", every=3600.0)
    with conn.transaction():
        put_entry(conn, entry_from(spec, new_state(next_run_at, next_run_at)))


def store(conn: Connection, clock: FakeClock | None = None) -> PgLeaseStore:
    return PgLeaseStore(conn, "host-a", clock=clock or FakeClock(LONG_AGO))


def lease_from(clock: FakeClock, seconds: float = 60.0) -> Lease:
    return Lease(1_000.0, clock.now() + timedelta(seconds=seconds))


def test_by_default_the_database_clock_judges_what_is_due(conn: Connection) -> None:
    now = db_now(conn)
    define(conn, "due", now - timedelta(seconds=1))
    define(conn, "later", now + timedelta(hours=1))
    clock = FakeClock(LONG_AGO)  # this host's clock is decades behind: it must not matter
    batch = store(conn, clock).claim_due(clock.now(), OWNER, lease_from(clock))
    assert [new.job for new in batch.claims] == ["due"]
    ahead = FakeClock(datetime(2100, 1, 1, tzinfo=timezone.utc))  # nor a clock far ahead
    assert store(conn, ahead).claim_due(ahead.now(), OWNER, lease_from(ahead)).claims == []


def test_a_lease_is_moved_onto_the_database_clock(conn: Connection) -> None:
    define(conn, "due", db_now(conn) - timedelta(seconds=1))
    clock = FakeClock(LONG_AGO)
    [new] = store(conn, clock).claim_due(clock.now(), OWNER, lease_from(clock, 60.0)).claims
    left = one(conn, "SELECT extract(epoch FROM lease_expires_at - clock_timestamp()) FROM cronctl_runs"
                     " WHERE run_id = %s", new.run_id)
    assert 30.0 < float(left) <= 60.0


def test_a_job_another_loop_is_deciding_on_is_skipped_not_waited_for(
        connections: Callable[[], Connection]) -> None:
    first, second = connections(), connections()
    define(first, "due", db_now(first) - timedelta(seconds=1))
    clock = FakeClock(LONG_AGO)
    with first.transaction():
        first.execute("SELECT 1 FROM cronctl_jobs WHERE name = 'due' FOR UPDATE")  # a loop mid-claim
        assert store(second).claim_due(clock.now(), OWNER, lease_from(clock)).claims == []
    [new] = store(second).claim_due(clock.now(), OWNER, lease_from(clock)).claims
    assert new.job == "due"
    assert store(first).claim_due(clock.now(), OWNER, lease_from(clock)).claims == []


def test_a_run_is_one_row_from_claim_to_record(conn: Connection) -> None:
    define(conn, "due", db_now(conn) - timedelta(seconds=1))
    clock = FakeClock(LONG_AGO)
    leases = store(conn, clock)
    [new] = leases.claim_due(clock.now(), OWNER, lease_from(clock)).claims
    row = "SELECT state, host_id, pid, record IS NULL FROM cronctl_runs WHERE run_id = %s"
    assert one(conn, row, new.run_id) == ("claimed", "host-a", None, True)
    leases.mark_dispatched(OWNER, [Dispatched("due", new.run_id, 4242, 1.0, 2.0)], clock.now())
    assert one(conn, row, new.run_id) == ("running", "host-a", 4242, True)
    leases.finish_many(OWNER, [RunEnd(new.run_id, Outcome(RunStatus.SUCCESS, None, exit_code=0))], clock.now())
    assert one(conn, row, new.run_id) == ("success", "host-a", 4242, False)
    [record] = leases.history("due")
    assert (record["run_id"], record["status"]) == (new.run_id, "success")
    with conn.transaction():
        events = conn.execute("SELECT event, host_id FROM cronctl_audit WHERE run_id = %s ORDER BY id",
                              (new.run_id,)).fetchall()
    # The JSON store's rows, + the host; run.started written with the mark, as run.finished with the end.
    assert events == [("run.claimed", "host-a"), ("run.started", "host-a"), ("run.finished", "host-a")]


def test_two_loops_claiming_at_once_claim_each_slot_once(connections: Callable[[], Connection]) -> None:
    setup = connections()
    now = db_now(setup)
    names = [f"job{i:02}" for i in range(20)]
    for name in names:
        define(setup, name, now - timedelta(seconds=1))
    loops = [store(connections()), store(connections())]
    start = threading.Barrier(2)
    claimed: list[list[str]] = [[], []]

    def claim(index: int) -> None:
        start.wait()
        for _ in range(3):
            clock = FakeClock(LONG_AGO)
            batch = loops[index].claim_due(clock.now(), OWNER, lease_from(clock))
            claimed[index].extend(new.job for new in batch.claims)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(claimed[0] + claimed[1]) == names  # every due slot once, whichever loop got it
    assert one(setup, "SELECT count(*) FROM cronctl_runs") == len(names)


def test_threads_sharing_one_store_take_turns_on_its_connection(conn: Connection) -> None:
    now = db_now(conn)
    for i in range(10):
        define(conn, f"job{i}", now - timedelta(seconds=1))
    shared = store(conn)
    errors: list[BaseException] = []
    claimed: list[str] = []
    start = threading.Barrier(3)

    def work(claims: bool) -> None:
        start.wait()
        try:
            for _ in range(30):
                if claims:
                    clock = FakeClock(LONG_AGO)
                    claimed.extend(new.job for new in shared.claim_due(clock.now(), OWNER, lease_from(clock)).claims)
                else:
                    shared.jobs()
                    shared.history(None)
        except BaseException as exc:  # collected: the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i == 0,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and sorted(claimed) == [f"job{i}" for i in range(10)]


def test_each_host_counts_in_its_own_row_and_the_counters_add_them_up(conn: Connection) -> None:
    clock = FakeClock(LONG_AGO)
    for job, host in (("a", "host-a"), ("b", "host-b")):
        define(conn, job, db_now(conn) - timedelta(seconds=1))
        leases = PgLeaseStore(conn, host, clock=clock)
        [new] = leases.claim_due(clock.now(), OWNER, lease_from(clock)).claims
        assert leases.reclaim(job, new.run_id, OWNER, "owner_dead", clock.now(), 0)
    with conn.transaction():
        rows = conn.execute("SELECT key, value FROM cronctl_meta WHERE key LIKE 'counters@%' ORDER BY key").fetchall()
    assert rows == [("counters@host-a", {"owner_dead": 1}), ("counters@host-b", {"owner_dead": 1})]
    assert store(conn).counters() == {"owner_dead": 2}
