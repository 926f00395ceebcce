"""Round trips through a proxy that stalls (sockets open, nothing answers): each ends at its deadline.

The stalling proxy (tests/pg/stallproxy.py) is checked first: what it forwards arrives,
and while stalled nothing does, until it resumes.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import psycopg
import pytest

from cronctl.clock import FakeClock
from cronctl.store.pg.connect import connect, parse_store_url
from cronctl.store.pg.deadline import StoreDeadlineError, deadline, deadline_for
from tests.pg.stallproxy import stall_proxy

pytestmark = pytest.mark.slow


def test_the_proxy_forwards_stalls_with_sockets_open_and_resumes(store_url: str) -> None:
    with stall_proxy(store_url) as (proxy, url), psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
        proxy.stall()
        answered: list[object] = []
        worker = threading.Thread(target=lambda: answered.append(conn.execute("SELECT 2").fetchone()), daemon=True)
        worker.start()
        worker.join(timeout=2.0)
        assert worker.is_alive() and not answered  # no answer, and no error either: the socket is open
        proxy.resume()
        worker.join(timeout=10)
        assert answered == [(2,)]


def test_a_stalled_round_trip_ends_at_its_deadline_and_abandons_the_connection(store_url: str) -> None:
    with stall_proxy(store_url) as (proxy, url):
        conn = connect(parse_store_url(url), deadline_s=1.0)
        with conn.transaction():
            assert conn.execute("SELECT 1").fetchone() == (1,)
        proxy.stall()
        began = time.monotonic()
        with pytest.raises(StoreDeadlineError, match=r"did not answer within 1 s"):
            with conn.transaction():
                conn.execute("SELECT 2")
        took = time.monotonic() - began
        assert 0.9 <= took < 5.0  # generous: a busy machine
        assert conn.broken or conn.closed
        proxy.resume()
        again = connect(parse_store_url(url))  # the store is usable again once it answers
        with again.transaction():
            assert again.execute("SELECT 3").fetchone() == (3,)
        again.close()


def test_a_shorter_deadline_holds_inside_its_block_only(store_url: str) -> None:
    with stall_proxy(store_url) as (proxy, url):
        conn = connect(parse_store_url(url), deadline_s=4.0)
        proxy.stall()
        began = time.monotonic()
        with pytest.raises(StoreDeadlineError, match="0.5 s"), deadline(conn, 0.5):
            conn.execute("SELECT 1")
        assert time.monotonic() - began < 3.0
        assert conn.deadline_s == 4.0


def test_a_fast_answer_is_untouched_by_the_deadline(conn: psycopg.Connection) -> None:
    for _ in range(200):  # arming and disarming leaves nothing behind
        with conn.transaction():
            assert conn.execute("SELECT 1").fetchone() == (1,)
    assert not conn.broken


def test_the_deadline_is_five_seconds_at_most_a_quarter_of_the_lease() -> None:
    assert deadline_for(None) == 5.0
    assert deadline_for(60.0) == 5.0
    assert deadline_for(12.0) == 3.0


class _SlowRoundTrips(FakeClock):
    """Each monotonic reading is 3 s after the last: every round trip looks 3 s long (a stall that ended)."""

    def monotonic(self) -> float:
        self.advance(3.0)
        return super().monotonic()


def test_a_slow_round_trip_never_feeds_the_skew(conn: psycopg.Connection) -> None:
    from cronctl.loop.cluster import ClusterMember
    from cronctl.store.pg.cluster import PgCluster
    from cronctl.store.pg.leases import PgLeaseStore

    clock = _SlowRoundTrips(datetime.now(timezone.utc))
    store = PgCluster.of(PgLeaseStore(conn, "host-a", clock=clock))
    member = ClusterMember(store, clock, "host-a", "boot-a", 4242, 1.0, "/h")
    member.register()
    assert member.beat()
    assert member.skew_s == 0.0  # not measured: a 3 s round trip says nothing about the clocks
    with conn.transaction():
        skewed = conn.execute("SELECT count(*) FROM cronctl_audit WHERE event = 'cluster.clock_skew'").fetchone()
    assert skewed == (0,)
