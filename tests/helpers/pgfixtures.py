"""The PostgreSQL fixtures shared by tests/pg and tests/contract: one server per session, one fresh database per test.

The server is the one `.ci/run` (or the developer one-liner in tests/helpers/pgserver.py) started,
named by $CRONCTL_TEST_PG_URL; else the first test that needs one starts it the same way
and it is stopped when the session's process exits. Both directories' conftests import
these fixtures, and the server is memoised here, so a session running both starts one.
When no server can be started the tests are skipped with the reason, except under
CI=true, where a missing server is a failure: CI must never pass by skipping them.
"""

from __future__ import annotations

import atexit
import os
import uuid
from collections.abc import Iterator

from tests.helpers import pgserver
import psycopg
import pytest

from cronctl.store.pg.connect import connect, parse_store_url

_STARTED: list[pgserver.Server] = []


def _unavailable(reason: str) -> None:
    message = f"PostgreSQL tests need a server and none could be started: {reason}"
    if pgserver.must_fail_without_server(os.environ):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _session_server() -> str:
    if not _STARTED:
        _STARTED.append(pgserver.start())
        atexit.register(pgserver.stop, _STARTED[0].data_dir)
    return str(_STARTED[0].url)


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    """A libpq URL of a database on the session's server, usable to create more databases."""
    given = os.environ.get("CRONCTL_TEST_PG_URL")
    if given:
        return given
    try:
        return str(_session_server())
    except pgserver.ServerUnavailable as exc:
        _unavailable(str(exc))
        raise AssertionError("unreachable: skip or fail raised") from exc


def _with_database(url: str, database: str) -> str:
    base, _, query = url.partition("?")
    head, _, _ = base.rpartition("/")
    return f"{head}/{database}" + (f"?{query}" if query else "")


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty database for this test alone; dropped afterwards."""
    name = f"cronctl_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        yield _with_database(pg_server_url, name)
    finally:
        with psycopg.connect(pg_server_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def store_url(pg_url: str) -> str:
    """A fresh database with cronctl's schema in place."""
    from cronctl.store.pg.schema import ensure_schema

    with connect(parse_store_url(pg_url)) as conn:
        ensure_schema(conn)
    return pg_url
