"""A loop starting while its connection is cut (pg_terminate_backend, as the chaos bench does):
before it announces itself that is the plain "cannot reach" error, exit 1; after, its first
heal waits for the next tick. Never `internal error: AdminShutdown` (found by bench/pg_chaos.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, cast

import pytest

from cronctl.clock import SystemClock
from cronctl.context import Context
from cronctl.loop.cluster import ClusterMember
from cronctl.loop.cluster_life import check_store_at_start, first_heal, refused_start_on_outage
from cronctl.store.pg import connect as pgconnect
from cronctl.store.pg.cluster import PgCluster
from cronctl.store.pg.connect import Connection, StoreUnreachableError
from cronctl.store.pg.leases import PgLeaseStore
from cronctl.store.pg.session import PgSession


class _Ctx:
    def __init__(self, leases: PgLeaseStore) -> None:
        self.leases = leases


def _cut(connections: Callable[[], Connection]) -> PgLeaseStore:
    """A lease store whose backend the server has just terminated."""
    conn, admin = connections(), connections()
    leases = PgLeaseStore(conn, "host-a")
    assert not leases.has_job("nothing")  # it works before the cut
    with admin.transaction():
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    return leases


def test_a_connection_cut_before_the_loop_announces_itself_is_the_plain_cannot_reach_error(
        connections: Callable[[], Connection]) -> None:
    leases = _cut(connections)
    said = r"^cannot reach the PostgreSQL store: .*the loop did not start$"
    with pytest.raises(StoreUnreachableError, match=said) as err:
        check_store_at_start(cast(Context, _Ctx(leases)), 20.0)
    assert err.value.exit_code == 1


def test_a_connection_cut_during_the_first_heal_leaves_it_to_the_next_tick(
        connections: Callable[[], Connection], capsys: pytest.CaptureFixture[str]) -> None:
    leases = _cut(connections)
    first_heal(lambda: leases.has_job(""))
    said = capsys.readouterr().err
    assert said.startswith("cronctl: warning: the PostgreSQL store is out of reach (") and "Traceback" not in said
    assert said.rstrip().endswith("the first heal waits for the next tick")


def test_a_first_heal_that_fails_otherwise_still_fails() -> None:
    def broken() -> Any:
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        first_heal(broken)


def test_a_connection_cut_as_soon_as_opened_is_the_plain_cannot_reach_error(
        store_url: str, connections: Callable[[], Connection], monkeypatch: pytest.MonkeyPatch) -> None:
    """The schema check of a fresh connection is its first query: a backend terminated before
    it (every command and every loop start opens one) is StoreUnreachableError, exit 1."""
    admin = connections()
    opened = pgconnect.connect

    def cut_at_once(*args: Any, **kwargs: Any) -> Connection:
        conn = opened(*args, **kwargs)
        with admin.transaction():
            admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
        time.sleep(0.2)  # the backend's exit is asynchronous
        return conn

    monkeypatch.setattr(pgconnect, "connect", cut_at_once)
    with pytest.raises(StoreUnreachableError, match=r"^cannot reach the PostgreSQL store postgresql://.*: ") as err:
        PgSession(pgconnect.parse_store_url(store_url)).conn()
    assert "terminating connection" in str(err.value) or "closed the connection" in str(err.value)


def test_a_connection_cut_as_the_loop_registers_is_the_plain_cannot_reach_error(
        connections: Callable[[], Connection]) -> None:
    leases = _cut(connections)
    member = ClusterMember(PgCluster.of(leases), SystemClock(), "host-a", "boot-a", 4242, 1.0, "/home")
    with pytest.raises(StoreUnreachableError, match=r"^cannot reach the PostgreSQL store: .*the loop did not start$"):
        with refused_start_on_outage():  # as the scheduler wraps its registration
            member.register()
