"""Claims held ahead by a silent loop (store/pg/takeover.py), judged on the database clock.

Loop A claims a slot ahead and goes silent before dispatching it; loop B neither skips
the job as `overlap` meanwhile nor loses the slot: it takes the claim over after 3 ticks
and fires the slot, and A's late dispatch is refused, so its gate never opens.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

from cronctl.clock import SystemClock
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec
from cronctl.store.claims import Dispatched, Lease, Owner
from cronctl.store.leases import HeldGate
from cronctl.store.pg import loops, takeover
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.leases import PgLeaseStore
from tests.pg.pghelp import audit_events, db_now, one

OWNER_A = Owner("gen-a", 1001, 111.0, "boot-a")
OWNER_B = Owner("gen-b", 2002, 222.0, "boot-b")


def _loop(conn: Connection, owner: Owner, host: str) -> loops.LoopIdentity:
    me = loops.LoopIdentity(uuid.uuid4(), host, owner.boot_id, owner.pid, owner.start_time)
    loops.register(conn, me, "/home")
    return me


def _silence(conn: Connection, me: loops.LoopIdentity) -> None:
    with conn.transaction():
        conn.execute("UPDATE cronctl_loops SET heartbeat_at = clock_timestamp() - interval '10 seconds'"
                     " WHERE loop_id = %s", (me.loop_id,))


def _lease() -> Lease:
    clock = SystemClock()
    return Lease(clock.monotonic() + 60, clock.now() + timedelta(seconds=60))


def _define(conn: Connection, name: str, in_s: float, every_s: float) -> None:
    spec = JobSpec(name=name, command="true", every=every_s)
    start = db_now(conn) + timedelta(seconds=in_s)
    with conn.transaction():
        put_entry(conn, entry_from(spec, new_state(start, start)))


def _held_by_a(conn: Connection, a: PgLeaseStore, name: str) -> tuple[str, str, str | None]:
    now = SystemClock().now()
    batch = a.claim_ahead(now, now + timedelta(seconds=2), OWNER_A, _lease())
    [new] = batch.claims
    return new.run_id, str(one(conn, "SELECT claim ->> 'slot' FROM cronctl_runs WHERE run_id = %s", new.run_id)), \
        new.advanced_to


def test_a_held_claim_of_a_silent_loop_is_taken_over_and_its_slot_fires_elsewhere(
        connections: object) -> None:
    conn_a, conn_b = connections(), connections()  # type: ignore[operator]
    a, b = PgLeaseStore(conn_a, "host-a"), PgLeaseStore(conn_b, "host-b")
    loop_a, _ = _loop(conn_a, OWNER_A, "host-a"), _loop(conn_b, OWNER_B, "host-b")
    _define(conn_a, "report", in_s=0.5, every_s=60)
    run_id, slot, advanced_to = _held_by_a(conn_a, a, "report")
    assert b.take_over_held() == []  # A beats, its gate opens in the future: nothing to take
    _silence(conn_a, loop_a)
    assert b.take_over_held() == [run_id]
    assert one(conn_b, "SELECT count(*) FROM cronctl_runs WHERE run_id = %s", run_id) == 0  # as handed back
    assert ("claim.reclaimed", takeover.OWNER_UNREACHABLE) in audit_events(conn_b, "report")
    time.sleep(max(0.0, 0.6 - 0.0))  # the slot's instant passes
    [fired] = b.claim_due(SystemClock().now(), OWNER_B, _lease()).claims
    assert fired.slot.isoformat().replace("+00:00", "Z")[:19] == slot[:19]  # the held slot itself, on B
    # A wakes up and tries to open its gate: its claim is gone, so nothing of its copy runs.
    gate = HeldGate("report", run_id, fired.spec, slot, advanced_to,
                    Dispatched("report", run_id, 40_000, 1.0, 5_000.0), SystemClock().now())
    assert a.release_held(OWNER_A, [gate], []) == []
    assert one(conn_b, "SELECT count(*) FROM cronctl_runs WHERE job = 'report' AND state = 'claimed'") == 1


def test_a_job_held_by_a_claim_not_yet_dispatched_is_left_due_not_skipped_as_overlap(
        connections: object) -> None:
    conn_a, conn_b = connections(), connections()  # type: ignore[operator]
    a, b = PgLeaseStore(conn_a, "host-a"), PgLeaseStore(conn_b, "host-b")
    _loop(conn_a, OWNER_A, "host-a")
    _define(conn_a, "tick", in_s=0.3, every_s=1)
    _held_by_a(conn_a, a, "tick")
    time.sleep(1.5)  # the next slot is due while A's claim is still held
    batch = b.claim_due(SystemClock().now(), OWNER_B, _lease())
    assert batch.claims == []
    assert ("run.skipped", "overlap") not in audit_events(conn_b, "tick")
    assert one(conn_b, "SELECT wake_at <= clock_timestamp() FROM cronctl_jobs WHERE name = 'tick'")  # still due


def test_the_takeover_counts_silence_in_the_same_ticks_as_status() -> None:
    assert takeover.UNREACHABLE_AFTER_S == loops.UNREACHABLE_AFTER_S


def test_a_forced_run_of_a_silent_loop_taken_over_is_recorded_not_started(connections: object) -> None:
    conn_a, conn_b = connections(), connections()  # type: ignore[operator]
    a, b = PgLeaseStore(conn_a, "host-a"), PgLeaseStore(conn_b, "host-b")
    loop_a = _loop(conn_a, OWNER_A, "host-a")
    _define(conn_a, "adhoc", in_s=3600, every_s=3600)
    [new] = a.claim_force("adhoc", SystemClock().now(), OWNER_A, _lease()).claims
    _silence(conn_a, loop_a)
    assert b.take_over_held() == [new.run_id]
    assert one(conn_b, "SELECT state FROM cronctl_runs WHERE run_id = %s", new.run_id) == "not_started"
    assert ("claim.reclaimed", takeover.OWNER_UNREACHABLE) in audit_events(conn_b, "adhoc")
