"""A loop's membership on PostgreSQL, in process: its clock's skew to the database is measured
at every beat and audited once when it passes 2 s (SPEC §9)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cronctl.clock import FakeClock
from cronctl.loop.cluster import ClusterMember
from cronctl.store.pg.cluster import PgCluster
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.leases import PgLeaseStore


def _member(conn: Connection, clock: FakeClock) -> ClusterMember:
    store = PgCluster.of(PgLeaseStore(conn, "host-a", clock=clock))
    member = ClusterMember(store, clock, "host-a", "boot-a", 4242, 1.0, "/home")
    member.register()
    return member


def _skew_rows(conn: Connection) -> list[tuple[object, ...]]:
    with conn.transaction():
        return conn.execute("SELECT host_id, details FROM cronctl_audit WHERE event = 'cluster.clock_skew'").fetchall()


def test_a_loop_whose_clock_is_behind_the_databases_audits_its_skew_once(conn: Connection) -> None:
    behind = FakeClock(datetime.now(timezone.utc) - timedelta(seconds=30))  # this host's clock, 30 s slow
    member = _member(conn, behind)
    assert member.beat() and member.beat()
    assert 29 < member.skew_s < 31
    [(host, details)] = _skew_rows(conn)  # once, not at every beat
    assert host == "host-a" and 29 < details["skew_s"] < 31 and details["pid"] == 4242
    with conn.transaction():
        shown = conn.execute("SELECT skew_s FROM cronctl_loops").fetchone()
    assert shown is not None and 29 < shown[0] < 31  # what `status` shows
    assert member.db_now() - datetime.now(timezone.utc) < timedelta(seconds=1)  # judged on the database clock


def test_a_loop_in_step_with_the_database_audits_nothing(conn: Connection) -> None:
    member = _member(conn, FakeClock(datetime.now(timezone.utc)))
    assert member.beat()
    assert abs(member.skew_s) < 1 and _skew_rows(conn) == []
