"""The one PostgreSQL connection of an invocation (`PgSession`), shared by its lease store,
definitions, document view, audit log and cluster operations (store/pg/backend.py)."""

from __future__ import annotations

import json
import threading
from typing import Any

import msgspec

from cronctl.store.pg.connect import Connection, StoreUrl


class PgSession:
    """One connection of this invocation, opened on first use with the schema brought up to date."""

    def __init__(self, url: StoreUrl) -> None:
        self.url = url
        self._conn: Connection | None = None
        self.lock = threading.RLock()  # whoever uses the connection holds it for a whole transaction

    def conn(self) -> Connection:
        """The connection, opened again when the last one broke (a restarted database, a
        terminated backend): a loop outlives those; StoreUnreachableError while it cannot."""
        if self._conn is None or self._conn.broken or self._conn.closed:
            import psycopg

            from cronctl.store.pg.connect import StoreUnreachableError, connect
            from cronctl.store.pg.schema import ensure_schema

            if self._conn is not None:
                self._conn.close()
            self._conn = None
            conn = connect(self.url)
            _fast_json_loads(conn)
            try:
                ensure_schema(conn)
            except psycopg.OperationalError as exc:  # lost as soon as opened (a terminated backend, a restart)
                conn.close()
                words = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise StoreUnreachableError(f"cannot reach the PostgreSQL store {self.url.shown}: "
                                            f"{self.url.redact(words)}") from None
            self._conn = conn
        return self._conn


def _fast_json_loads(conn: Connection) -> None:
    """jsonb values parsed by msgspec (a read of 10,000 jobs parses 20,000 of them)."""
    from psycopg.types.json import set_json_loads

    set_json_loads(_json_loads, conn)


_decode_json = msgspec.json.Decoder().decode


def _json_loads(data: str | bytes) -> Any:
    """msgspec's parse (a module function: psycopg keeps one per connection); what msgspec
    refuses, json.loads parses as psycopg always did."""
    try:
        return _decode_json(data)
    except msgspec.DecodeError:
        return json.loads(data)


