"""Two-connection races, scripted step by step: exactly one winner each (MULTIHOST §7, T10).

A step "holds" a lease operation's row locks by running the real function inside an
outer transaction (its own transaction becomes a savepoint) and committing only when
the script says so. The other connection either skips the locked row at once (SKIP
LOCKED) or waits for it in a thread; `wait_until_blocked` confirms from a third
connection that it really waits before the first one commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import pytest

from cronctl.models import RunStatus
from cronctl.store.claims import Outcome
from cronctl.store.pg.claims import (
    Claimed,
    Gate,
    LoopIdentity,
    claim_due,
    claim_read,
    finish,
    mark_dispatched,
    read_due,
    reclaim_expired,
    renew,
)
from cronctl.store.pg.connect import Connection
from tests.pg.pghelp import make_due_again, make_loop, one, put_due_job, wait_until_blocked

LEASE = 60.0
EXPIRED = -10.0
MARGIN = 5.0
SUCCESS = Outcome(RunStatus.SUCCESS, None, exit_code=0)
T = TypeVar("T")


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as executor:
        yield executor


class Race:
    """Owner A and another loop B, each on its own connection, and an observer."""

    def __init__(self, connections: Callable[[], Connection], pool: ThreadPoolExecutor) -> None:
        self.a, self.b, self.observer = connections(), connections(), connections()
        self.owner, self.other = make_loop("host-a"), make_loop("host-b")
        self.pool = pool

    def blocked(self, conn: Connection, step: Callable[[], T]) -> Future[T]:
        """Start `step` in a thread and return once its connection waits on a row lock."""
        future = self.pool.submit(step)
        wait_until_blocked(self.observer, conn)
        return future

    def state(self, fence: int) -> str:
        return str(one(self.observer, "SELECT state FROM cronctl_runs WHERE fence = %s", fence))

    def claimed(self, lease_s: float = LEASE, running: bool = False, gate_lease_s: float = LEASE) -> Claimed:
        put_due_job(self.a, "job")
        claimed = claim_due(self.a, self.owner, lease_s).claimed[0]
        if running:
            mark_dispatched(self.a, self.owner, [Gate(claimed.fence, 777, 1.0)], gate_lease_s)
        return claimed


@pytest.fixture
def race(connections: Callable[[], Connection], pool: ThreadPoolExecutor) -> Race:
    return Race(connections, pool)


def _runs(race: Race) -> int:
    return int(one(race.observer, "SELECT count(*) FROM cronctl_runs"))


# --- claim / claim ---------------------------------------------------------------------------


def test_claim_claim_the_second_loop_skips_the_row_the_first_is_claiming(race: Race) -> None:
    put_due_job(race.a, "job")
    with race.a.transaction():
        due = read_due(race.a)  # A holds the job row
        assert claim_due(race.b, race.other, LEASE).claimed == []  # B skips it without waiting
        won = claim_read(race.a, race.owner, due, LEASE).claimed
    assert [c.job for c in won] == ["job"]
    assert claim_due(race.b, race.other, LEASE).claimed == []
    assert _runs(race) == 1


def test_claim_claim_a_loop_reading_without_locks_loses_on_the_high_water_mark(race: Race) -> None:
    put_due_job(race.a, "job")
    with race.b.transaction():
        stale = read_due(race.b, lock=False)  # B reads the due row and is slow
        assert len(claim_due(race.a, race.owner, LEASE).claimed) == 1  # A claims and commits
        assert claim_read(race.b, race.other, stale, LEASE).claimed == []
    assert _runs(race) == 1
    # B lost at the compare-and-set, before trying a run row: it has nothing to audit.
    assert one(race.observer, "SELECT count(*) FROM cronctl_audit WHERE loop_id = %s", race.other.loop_id) == 0


def test_claim_claim_a_compare_and_set_waiting_behind_the_winner_finds_the_row_moved(race: Race) -> None:
    put_due_job(race.a, "job")
    with race.a.transaction():
        won = claim_read(race.a, race.owner, read_due(race.a, lock=False), LEASE).claimed

        def b_claims() -> list[Claimed]:
            with race.b.transaction():
                return claim_read(race.b, race.other, read_due(race.b, lock=False), LEASE).claimed

        lost = race.blocked(race.b, b_claims)  # B's compare-and-set waits for A's row lock
    assert len(won) == 1 and lost.result(timeout=30) == []
    assert _runs(race) == 1
    assert one(race.observer, "SELECT count(*) FROM cronctl_audit WHERE loop_id = %s", race.other.loop_id) == 0


def test_claim_claim_many_loops_at_once_claim_every_slot_exactly_once(
        connections: Callable[[], Connection], pool: ThreadPoolExecutor) -> None:
    setup = connections()
    for index in range(30):
        put_due_job(setup, f"job{index:02d}")
    loops = [(connections(), make_loop(f"host-{n}")) for n in range(4)]
    start = threading.Barrier(len(loops))

    def claim(conn: Connection, me: LoopIdentity) -> list[str]:
        start.wait()
        return [c.job for c in claim_due(conn, me, LEASE).claimed]

    claimed = [job for future in [pool.submit(claim, c, me) for c, me in loops] for job in future.result(timeout=30)]
    assert sorted(claimed) == [f"job{index:02d}" for index in range(30)]
    assert one(setup, "SELECT count(DISTINCT (job, slot)) = count(*) FROM cronctl_runs") is True


# --- gate / reclaim --------------------------------------------------------------------------


def test_gate_reclaim_the_gate_first_restarts_the_lease_and_the_reclaim_finds_nothing(race: Race) -> None:
    run = race.claimed(lease_s=EXPIRED)
    with race.a.transaction():
        released = mark_dispatched(race.a, race.owner, [Gate(run.fence, 777, 1.0)], LEASE)
        assert reclaim_expired(race.b, race.other, MARGIN) == []  # the locked row is skipped
    assert released == {run.fence}
    assert reclaim_expired(race.b, race.other, MARGIN) == []  # and after the commit the lease is fresh
    assert race.state(run.fence) == "running"


def test_gate_reclaim_the_reclaim_first_keeps_the_child_from_ever_starting(race: Race) -> None:
    run = race.claimed(lease_s=EXPIRED)
    with race.b.transaction():
        [reclaimed] = reclaim_expired(race.b, race.other, MARGIN)
        gate = race.blocked(race.a, lambda: mark_dispatched(race.a, race.owner, [Gate(run.fence, 777, 1.0)], LEASE))
    assert reclaimed.status is RunStatus.NOT_STARTED
    assert gate.result(timeout=30) == set()  # the child is killed at its gate: nothing ran
    assert race.state(run.fence) == "not_started"


# --- renew / reclaim -------------------------------------------------------------------------


def test_renew_reclaim_the_renewal_first_keeps_the_run(race: Race) -> None:
    run = race.claimed(running=True, gate_lease_s=EXPIRED)
    with race.a.transaction():
        renewal = renew(race.a, race.owner, [run.fence], LEASE)
        assert reclaim_expired(race.b, race.other, MARGIN) == []
    assert renewal.held == {run.fence}
    assert reclaim_expired(race.b, race.other, MARGIN) == []
    assert race.state(run.fence) == "running"


def test_renew_reclaim_the_reclaim_first_and_the_owner_learns_its_run_is_lost(race: Race) -> None:
    run = race.claimed(running=True, gate_lease_s=EXPIRED)
    with race.b.transaction():
        [reclaimed] = reclaim_expired(race.b, race.other, MARGIN)
        renewal = race.blocked(race.a, lambda: renew(race.a, race.owner, [run.fence], LEASE))
    assert reclaimed.status is RunStatus.LOST
    assert renewal.result(timeout=30).lost == {run.fence}
    assert race.state(run.fence) == "lost"


# --- finish / reclaim ------------------------------------------------------------------------


def test_finish_reclaim_the_finish_first_stands(race: Race) -> None:
    run = race.claimed(running=True, gate_lease_s=EXPIRED)
    with race.a.transaction():
        done = finish(race.a, race.owner, run.fence, SUCCESS)
        assert reclaim_expired(race.b, race.other, MARGIN) == []
    assert not done.fenced
    assert reclaim_expired(race.b, race.other, MARGIN) == []
    assert race.state(run.fence) == "success"


def test_finish_reclaim_the_reclaim_first_fences_the_late_finish(race: Race) -> None:
    run = race.claimed(running=True, gate_lease_s=EXPIRED)
    with race.b.transaction():
        reclaim_expired(race.b, race.other, MARGIN)
        done = race.blocked(race.a, lambda: finish(race.a, race.owner, run.fence, SUCCESS))
    assert done.result(timeout=30).fenced
    assert race.state(run.fence) == "lost"
    assert one(race.observer, "SELECT count(*) FROM cronctl_audit WHERE event = 'run.fenced'") == 1


# --- replace / finish ------------------------------------------------------------------------


def _replace_claim(race: Race) -> list[Claimed]:
    return claim_due(race.b, race.other, LEASE).claimed


def test_replace_finish_the_old_run_finishing_first_is_not_marked_killed(race: Race) -> None:
    put_due_job(race.a, "job", overlap="replace")
    old = claim_due(race.a, race.owner, LEASE).claimed[0]
    make_due_again(race.a, "job")
    with race.a.transaction():
        assert not finish(race.a, race.owner, old.fence, SUCCESS).fenced
        # The finish holds the job's row (it records the last run there): claims skip the job meanwhile.
        assert _replace_claim(race) == []
    [claimed] = _replace_claim(race)
    assert claimed.replaced == ()
    assert race.state(old.fence) == "success"


def test_replace_finish_the_replacement_first_fences_the_old_finish(race: Race) -> None:
    put_due_job(race.a, "job", overlap="replace")
    old = claim_due(race.a, race.owner, LEASE).claimed[0]
    make_due_again(race.a, "job")
    with race.b.transaction():
        [claimed] = _replace_claim(race)
        done = race.blocked(race.a, lambda: finish(race.a, race.owner, old.fence, SUCCESS))
    assert claimed.replaced == (old.fence,)
    assert done.result(timeout=30).fenced
    assert race.state(old.fence) == "killed"
