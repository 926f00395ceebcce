"""Lease transactions carry their own limits, and the loop refuses a server that may lose commits."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from cronctl.store.pg.connect import Connection
from cronctl.store.pg.server import UnsafeServerError, check_durability
from cronctl.store.pg.transaction import Limits, short_transaction
from tests.pg.pghelp import one, put_due_job

SETTINGS = ("SELECT current_setting('idle_in_transaction_session_timeout'), current_setting('lock_timeout'),"
            " current_setting('statement_timeout')")


def test_the_limits_hold_inside_the_transaction_and_leave_nothing_on_the_session(conn: Connection) -> None:
    with short_transaction(conn, Limits(idle_s=2, lock_s=3, statement_s=4.5)):
        assert conn.execute(SETTINGS).fetchone() == ("2s", "3s", "4500ms")
    assert one(conn, SETTINGS) == ("0", "0", "0")


def _can_lock_the_job(conn: Connection) -> bool:
    try:
        with conn.transaction():
            conn.execute("SELECT 1 FROM cronctl_jobs FOR UPDATE NOWAIT")
        return True
    except psycopg.errors.LockNotAvailable:
        return False


def test_a_loop_stalled_inside_a_transaction_loses_its_session_and_its_row_locks(
        connections: Callable[[], Connection]) -> None:
    stalled, other = connections(), connections()
    put_due_job(stalled, "job")
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout), short_transaction(stalled, Limits(idle_s=0.2)):
        stalled.execute("SELECT 1 FROM cronctl_jobs FOR UPDATE")
        assert not _can_lock_the_job(other)
        deadline = time.monotonic() + 15  # the server ends the idle session on its own
        while not _can_lock_the_job(other):
            assert time.monotonic() < deadline, "the stalled transaction kept its row lock"
            time.sleep(0.05)
        stalled.execute("SELECT 1")


def test_a_server_that_may_lose_acknowledged_commits_is_refused(conn: Connection) -> None:
    check_durability(conn)
    with conn.transaction():
        conn.execute("SET LOCAL synchronous_commit = off")
        with pytest.raises(UnsafeServerError, match="synchronous_commit=off"):
            check_durability(conn)
