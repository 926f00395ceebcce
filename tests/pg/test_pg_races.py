"""Two hosts racing on `PgLeaseStore`, scripted step by step: exactly one winner each (MULTIHOST §7, T10).

Host A (`host-a`, its loop `OWNER_A`) and host B (`host-b`, `OWNER_B`, another boot) each
have a store on their own connection; a third connection observes. A step "holds" its
decision: the real store method runs inside an outer transaction the test controls (its
own transaction becomes a savepoint), so the job row's lock is held until the test
leaves the block. The other host's call then either skips the row at once (the claims'
SKIP LOCKED), or waits for it in a thread; `wait_until_blocked` confirms from the
observer that its backend really waits on a lock before the first one commits.

The stores judge at the instants given (`judge_by="caller"`): the slot fires at 12:01,
each claim's lease is 60 s, and a healer on B judges at 12:03 that A's lease ran out.
Every test ends by reading back the rows of `cronctl_runs` and `cronctl_audit`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import Any, TypeVar

import pytest

from cronctl.clock import FakeClock
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec, Overlap, RunStatus
from cronctl.store.claims import Dispatched, Lease, NewClaim, Outcome, Owner
from cronctl.store.leases import RunEnd
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.leases import PgLeaseStore
from cronctl.timefmt import from_iso
from tests.pg.pghelp import wait_until_blocked

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
SLOT = T0 + timedelta(minutes=1)
JUDGED = SLOT + timedelta(minutes=2)  # A's 60 s lease ran out a minute ago: B's healer finds it expired
OWNER_A = Owner("gen-a", 1001, 111.0, "boot-a")
OWNER_B = Owner("gen-b", 2002, 222.0, "boot-b")
SUCCESS = Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=1.0)
T = TypeVar("T")


def lease(now: datetime, seconds: float = 60.0) -> Lease:
    return Lease(10_000.0, now + timedelta(seconds=seconds))


def child(new: NewClaim) -> Dispatched:
    return Dispatched(new.job, new.run_id, 40_000, 1.0, 5_000.0)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


class Race:
    """Host A and host B, each a store on its own connection, and an observer."""

    def __init__(self, connections: Callable[[], Connection], pool: ThreadPoolExecutor) -> None:
        self.conn_a, self.conn_b, self.observer = connections(), connections(), connections()
        self.a = PgLeaseStore(self.conn_a, "host-a", judge_by="caller", clock=FakeClock(T0))
        self.b = PgLeaseStore(self.conn_b, "host-b", judge_by="caller", clock=FakeClock(T0))
        self.pool = pool

    def define(self, overlap: str = "skip", name: str = "job") -> None:
        """An every-minute job whose next slot is SLOT."""
        spec = JobSpec(name=name, command="true", every=60.0, overlap=Overlap(overlap))
        with self.observer.transaction():
            put_entry(self.observer, entry_from(spec, new_state(T0, SLOT)))

    def blocked(self, conn: Connection, step: Callable[[], T]) -> Future[T]:
        """Start `step` in a thread and return once its connection waits on a row lock."""
        future = self.pool.submit(step)
        wait_until_blocked(self.observer, conn)
        return future

    def claimed(self) -> NewClaim:
        """A claims the slot (lease until SLOT + 60 s) and commits."""
        [new] = self.a.claim_due(SLOT, OWNER_A, lease(SLOT)).claims
        return new

    def started(self) -> NewClaim:
        """... and passes its gate at the slot: the child runs."""
        new = self.claimed()
        assert self.a.mark_dispatched(OWNER_A, [child(new)], SLOT) == [child(new)]
        return new

    def judged_broken(self, new: NewClaim) -> Owner:
        """B's healer reads the run (committed rows, no lock) and judges its lease expired: the owner it saw."""
        [seen] = self.b.claims_of(new.job)
        assert seen.run_id == new.run_id and seen.owner == OWNER_A and seen.owner_host == "host-a"
        assert seen.lease_until is not None and from_iso(seen.lease_until) < JUDGED
        return seen.owner

    def runs(self) -> list[tuple[Any, ...]]:
        """(run_id, host, state, reason) of every run row."""
        return self._rows("SELECT run_id, host_id, state, reason FROM cronctl_runs ORDER BY fence")

    def audit(self) -> list[tuple[Any, ...]]:
        """(event, run_id, host, reason) of every audit row, oldest first."""
        return self._rows("SELECT event, run_id, host_id, reason FROM cronctl_audit ORDER BY id")

    def _rows(self, query: str) -> list[tuple[Any, ...]]:
        with self.observer.transaction():
            return [tuple(row) for row in self.observer.execute(query).fetchall()]


@pytest.fixture
def race(connections: Callable[[], Connection], pool: ThreadPoolExecutor) -> Race:
    return Race(connections, pool)


# --- claim / claim ---------------------------------------------------------------------------


def test_claim_claim_the_second_host_skips_the_row_being_claimed_then_finds_nothing_due(race: Race) -> None:
    race.define()
    with race.conn_a.transaction():
        [won] = race.a.claim_due(SLOT, OWNER_A, lease(SLOT)).claims
        # B skips the locked row at once: had it waited, its lock_timeout would raise here.
        assert race.b.claim_due(SLOT, OWNER_B, lease(SLOT)).claims == []
        assert race.runs() == []  # A's claim is not committed yet
    assert race.b.claim_due(SLOT + timedelta(seconds=1), OWNER_B, lease(SLOT)).claims == []
    assert race.runs() == [(won.run_id, "host-a", "claimed", None)]
    assert race.audit() == [("run.claimed", won.run_id, "host-a", None)]


def test_claim_claim_the_first_to_lock_wins_whichever_host_it_is(race: Race) -> None:
    race.define()
    with race.conn_b.transaction():
        [won] = race.b.claim_due(SLOT, OWNER_B, lease(SLOT)).claims
        assert race.a.claim_due(SLOT, OWNER_A, lease(SLOT)).claims == []
    assert race.a.claim_due(SLOT, OWNER_A, lease(SLOT)).claims == []
    assert race.runs() == [(won.run_id, "host-b", "claimed", None)]
    assert race.audit() == [("run.claimed", won.run_id, "host-b", None)]


def test_claim_claim_many_loops_at_once_claim_every_slot_exactly_once(
        connections: Callable[[], Connection], pool: ThreadPoolExecutor) -> None:
    setup = connections()
    names = [f"job{index:02d}" for index in range(30)]
    spec = JobSpec(name="template", command="true", every=60.0)
    with setup.transaction():
        for name in names:
            put_entry(setup, entry_from(JobSpec.from_dict({**spec.to_dict(), "name": name}), new_state(T0, SLOT)))
    hosts = [f"host-{n}" for n in range(4)]
    stores = [PgLeaseStore(connections(), host, judge_by="caller", clock=FakeClock(T0)) for host in hosts]
    owners = [Owner(f"gen-{n}", 3000 + n, 1.0, f"boot-{n}") for n in range(len(hosts))]
    start = threading.Barrier(len(stores))

    def claim(index: int) -> list[str]:
        start.wait()
        return [new.job for new in stores[index].claim_due(SLOT, owners[index], lease(SLOT)).claims]

    claimed = [pool.submit(claim, index) for index in range(len(stores))]
    by_host = {host: future.result(timeout=60) for host, future in zip(hosts, claimed, strict=True)}
    assert sorted(job for jobs in by_host.values() for job in jobs) == names  # every slot, once
    with setup.transaction():
        rows = setup.execute("SELECT job, host_id FROM cronctl_runs WHERE slot = %s", (SLOT,)).fetchall()
        audited = setup.execute("SELECT job, host_id FROM cronctl_audit WHERE event = 'run.claimed'").fetchall()
    assert sorted(rows) == sorted(audited) == sorted((job, host) for host, jobs in by_host.items() for job in jobs)


# --- gate / reclaim --------------------------------------------------------------------------


def test_gate_reclaim_the_gate_first_restarts_the_lease_and_the_reclaim_does_nothing(race: Race) -> None:
    race.define()
    new = race.claimed()
    seen = race.judged_broken(new)
    gate_at = JUDGED - timedelta(seconds=1)  # A wakes (a stopped loop) and opens its gate
    with race.conn_a.transaction():
        assert race.a.mark_dispatched(OWNER_A, [child(new)], gate_at) == [child(new)]
        reclaim = race.blocked(race.conn_b, lambda: race.b.reclaim("job", new.run_id, seen, "lease_expired",
                                                                  JUDGED, 0))
    assert reclaim.result(timeout=30) is False  # under the lock the lease is fresh again: the run stands
    [run] = race.a.claims_of("job")
    assert run.dispatched and run.lease_until is not None
    assert from_iso(run.lease_until) == gate_at + timedelta(seconds=60)
    assert race.runs() == [(new.run_id, "host-a", "running", None)]
    assert race.audit() == [("run.claimed", new.run_id, "host-a", None),
                            ("run.started", new.run_id, "host-a", None)]


def test_gate_reclaim_the_reclaim_first_keeps_the_child_from_ever_starting(race: Race) -> None:
    race.define()
    new = race.claimed()
    seen = race.judged_broken(new)
    with race.conn_b.transaction():
        assert race.b.reclaim("job", new.run_id, seen, "lease_expired", JUDGED, 0)
        gate = race.blocked(race.conn_a, lambda: race.a.mark_dispatched(OWNER_A, [child(new)], JUDGED))
    assert gate.result(timeout=30) == []  # the child is killed at its gate: nothing of the job ran
    assert race.runs() == [(new.run_id, "host-a", "not_started", "run_claimed_without_dispatch")]
    assert race.audit() == [("run.claimed", new.run_id, "host-a", None),
                            ("claim.reclaimed", new.run_id, "host-b", "lease_expired"),
                            ("run.finished", new.run_id, "host-b", "run_claimed_without_dispatch")]


# --- renew / reclaim -------------------------------------------------------------------------


def test_renew_reclaim_the_renewal_first_keeps_the_run(race: Race) -> None:
    race.define()
    new = race.started()
    seen = race.judged_broken(new)
    with race.conn_a.transaction():
        assert race.a.renew(OWNER_A, {new.run_id: "job"}, lease(JUDGED)) == []
        reclaim = race.blocked(race.conn_b, lambda: race.b.reclaim("job", new.run_id, seen, "lease_expired",
                                                                  JUDGED, 0))
    assert reclaim.result(timeout=30) is False
    assert race.a.renew(OWNER_A, {new.run_id: "job"}, lease(JUDGED)) == []  # still A's
    assert race.runs() == [(new.run_id, "host-a", "running", None)]
    assert race.audit() == [("run.claimed", new.run_id, "host-a", None),
                            ("run.started", new.run_id, "host-a", None)]


def test_renew_reclaim_the_reclaim_first_and_the_owner_learns_its_run_is_lost(race: Race) -> None:
    race.define()
    new = race.started()
    seen = race.judged_broken(new)
    with race.conn_b.transaction():
        assert race.b.reclaim("job", new.run_id, seen, "lease_expired", JUDGED, 0)
        renewal = race.blocked(race.conn_a, lambda: race.a.renew(OWNER_A, {new.run_id: "job"}, lease(JUDGED)))
    assert renewal.result(timeout=30) == [new.run_id]  # lost: A kills its child
    assert race.runs() == [(new.run_id, "host-a", "lost", "executor_lost_mid_run")]
    assert race.audit() == [("run.claimed", new.run_id, "host-a", None),
                            ("run.started", new.run_id, "host-a", None),
                            ("claim.reclaimed", new.run_id, "host-b", "lease_expired"),
                            ("run.finished", new.run_id, "host-b", "executor_lost_mid_run")]


# --- finish / reclaim ------------------------------------------------------------------------


def test_finish_reclaim_the_finish_first_stands(race: Race) -> None:
    race.define()
    new = race.started()
    seen = race.judged_broken(new)
    with race.conn_a.transaction():
        [done] = race.a.finish_many(OWNER_A, [RunEnd(new.run_id, SUCCESS, "job")], JUDGED)
        reclaim = race.blocked(race.conn_b, lambda: race.b.reclaim("job", new.run_id, seen, "lease_expired",
                                                                  JUDGED, 0))
    assert not done.fenced and reclaim.result(timeout=30) is False  # the claim is gone: nothing to reclaim
    assert race.runs() == [(new.run_id, "host-a", "success", None)]
    assert race.audit() == [("run.claimed", new.run_id, "host-a", None),
                            ("run.started", new.run_id, "host-a", None),
                            ("run.finished", new.run_id, "host-a", None)]
    [record] = race.b.history("job")
    assert (record["status"], record["host"]) == ("success", "host-a")


def test_finish_reclaim_the_reclaim_first_fences_the_late_finish(race: Race) -> None:
    race.define()
    new = race.started()
    seen = race.judged_broken(new)
    with race.conn_b.transaction():
        assert race.b.reclaim("job", new.run_id, seen, "lease_expired", JUDGED, 0)
        finish = race.blocked(race.conn_a, lambda: race.a.finish_many(
            OWNER_A, [RunEnd(new.run_id, SUCCESS, "job")], JUDGED))
    [late] = finish.result(timeout=30)
    assert late.fenced and late.record is None
    assert race.runs() == [(new.run_id, "host-a", "lost", "executor_lost_mid_run")]  # the record stays the reclaim's
    assert race.audit() == [("run.claimed", new.run_id, "host-a", None),
                            ("run.started", new.run_id, "host-a", None),
                            ("claim.reclaimed", new.run_id, "host-b", "lease_expired"),
                            ("run.finished", new.run_id, "host-b", "executor_lost_mid_run"),
                            ("run.fenced", new.run_id, "host-a", "claim_gone")]
    [record] = race.a.history("job")
    assert record["status"] == "lost"


# --- replace: the replacement claim / the old run's finish -----------------------------------


def _old_run_and_next_slot(race: Race) -> NewClaim:
    """An `overlap: replace` job: A's run of SLOT is running when the next slot comes due."""
    race.define(overlap="replace")
    return race.started()


NEXT = SLOT + timedelta(minutes=1)


def test_replace_the_old_run_finishing_first_leaves_nothing_to_replace(race: Race) -> None:
    old = _old_run_and_next_slot(race)
    with race.conn_a.transaction():
        [done] = race.a.finish_many(OWNER_A, [RunEnd(old.run_id, SUCCESS, "job")], NEXT)
        # The finish holds the job's row: B's claim skips the job meanwhile.
        assert race.b.claim_due(NEXT, OWNER_B, lease(NEXT)).claims == []
    [new] = race.b.claim_due(NEXT, OWNER_B, lease(NEXT)).claims
    assert not done.fenced and new.replaces == []
    assert race.runs() == [(old.run_id, "host-a", "success", None), (new.run_id, "host-b", "claimed", None)]
    assert race.audit() == [("run.claimed", old.run_id, "host-a", None),
                            ("run.started", old.run_id, "host-a", None),
                            ("run.finished", old.run_id, "host-a", None),
                            ("run.claimed", new.run_id, "host-b", None)]


def test_replace_the_replacement_first_names_the_old_run_and_its_finish_waits_then_lands_once(
        race: Race) -> None:
    old = _old_run_and_next_slot(race)
    with race.conn_b.transaction():
        [new] = race.b.claim_due(NEXT, OWNER_B, lease(NEXT)).claims
        finish = race.blocked(race.conn_a, lambda: race.a.finish_many(
            OWNER_A, [RunEnd(old.run_id, SUCCESS, "job")], NEXT))
    # The replacement stands and names the run it replaces; the old run's owner still held it
    # (the replacer ends it by a kill, recorded by that owner), so its own end is its record.
    [done] = finish.result(timeout=30)
    assert new.replaces == [old.run_id] and not done.fenced
    assert race.runs() == [(old.run_id, "host-a", "success", None), (new.run_id, "host-b", "claimed", None)]
    assert race.audit() == [("run.claimed", old.run_id, "host-a", None),
                            ("run.started", old.run_id, "host-a", None),
                            ("run.claimed", new.run_id, "host-b", None),
                            ("run.finished", old.run_id, "host-a", None)]
    [again] = race.a.finish_many(OWNER_A, [RunEnd(old.run_id, SUCCESS, "job")], NEXT)
    assert again.fenced  # one record per run, whoever tries again
