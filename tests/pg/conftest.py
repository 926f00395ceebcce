"""Fixtures of the PostgreSQL tests: the server and fresh databases of tests/helpers/pgfixtures.py, and connections."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from cronctl.store.pg.connect import Connection, connect, parse_store_url
from tests.helpers import pgfixtures, pgserver

# The shared PostgreSQL fixtures (a fresh database per test), registered by name here.
pg_server_url = pgfixtures.pg_server_url
pg_url = pgfixtures.pg_url
store_url = pgfixtures.store_url


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


@pytest.fixture
def own_server() -> Iterator[pgserver.Server]:
    """A server of this test alone, for tests that stop or restart it; deleted afterwards."""
    try:
        server = pgserver.start()
    except pgserver.ServerUnavailable as exc:
        pgfixtures._unavailable(str(exc))
        raise AssertionError("unreachable: skip or fail raised") from exc
    try:
        yield server
    finally:
        pgserver.stop(server.data_dir)
