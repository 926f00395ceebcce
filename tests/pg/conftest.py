"""Fixtures of the PostgreSQL tests: one server per session, one fresh database per test.

The server is the one `.ci/run` (or the developer one-liner in tests/pgserver.py) started,
named by $CRONCTL_TEST_PG_URL; else this session starts its own the same way and stops it
at the end. When no server can be started the tests are skipped with the reason, except
under CI=true, where a missing server is a failure: CI must never pass by skipping them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pgserver
import psycopg
import pytest

from cronctl.store.pg.connect import Connection, connect, parse_store_url


def _unavailable(reason: str) -> None:
    message = f"PostgreSQL tests need a server and none could be started: {reason}"
    if pgserver.must_fail_without_server(os.environ):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A libpq URL of a database on the session's server, usable to create more databases."""
    given = os.environ.get("CRONCTL_TEST_PG_URL")
    if given:
        yield given
        return
    try:
        server = pgserver.start()
    except pgserver.ServerUnavailable as exc:
        _unavailable(str(exc))
        return
    try:
        yield server.url
    finally:
        pgserver.stop(server.data_dir)


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


@pytest.fixture
def connections(store_url: str) -> Iterator[Callable[[], Connection]]:
    """Open as many connections to the migrated database as a test needs; all closed after it."""
    opened: list[Connection] = []

    def open_one() -> Connection:
        opened.append(connect(parse_store_url(store_url)))
        return opened[-1]

    yield open_one
    for conn in opened:
        conn.close()


@pytest.fixture
def conn(connections: Callable[[], Connection]) -> Connection:
    return connections()
