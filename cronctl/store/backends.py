"""Which store a cronctl invocation uses: the JSON document of its home, or PostgreSQL.

`--store URL` (or $CRONCTL_STORE) names a PostgreSQL database; neither means the JSON
store of the home, as always. The URL's password is shown nowhere (`StoreUrl`).

With PostgreSQL selected, the run path and the read views go through `PgLeaseStore`,
and the audit log is the database's (`PgAuditLog`), over one connection (`PgSession`).
What still reads or writes the home's JSON document directly (defining and editing
jobs, doctor, the loop) is refused with a message instead of silently using another
store than the one asked for: `RefusingStore` stands in for the document.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from cronctl.clock import Clock
from cronctl.errors import CronctlError, StoreError
from cronctl.paths import Paths
from cronctl.store.audit import AuditLog, now_ms_iso, tell_listeners
from cronctl.store.jsonstore import Document, Store
from cronctl.timefmt import from_iso, to_iso

if TYPE_CHECKING:
    from cronctl.store.pg.connect import Connection, StoreUrl
    from cronctl.store.pg.leases import PgLeaseStore

STORE_ENV = "CRONCTL_STORE"


def selected_url(option: str | None, env: Mapping[str, str]) -> StoreUrl | None:
    """`--store` wins over $CRONCTL_STORE; None: the JSON store of the home."""
    if not (option or env.get(STORE_ENV)):
        return None  # the common case imports nothing of PostgreSQL
    from cronctl.store.pg.connect import store_url_from

    return store_url_from(option, env)


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
            from cronctl.store.pg.connect import connect
            from cronctl.store.pg.schema import ensure_schema

            if self._conn is not None:
                self._conn.close()
            self._conn = None
            conn = connect(self.url)
            ensure_schema(conn)
            self._conn = conn
        return self._conn


def open_pg_lease_store(session: PgSession, paths: Paths, clock: Clock) -> PgLeaseStore:
    """The lease store of this invocation, judging by the database clock."""
    from cronctl.store.pg.identity import host_id
    from cronctl.store.pg.leases import PgLeaseStore

    return PgLeaseStore(session.conn(), host_id(), clock=clock, paths=paths, lock=session.lock,
                        connect_again=session.conn)


class PgAuditLog(AuditLog):
    """The audit log in `cronctl_audit`: what `cronctl audit` reads and every row is written to.

    Rows read back in the file log's shape: `ts` (the database's time of the write, as for every
    row of the lease store), `event`, then the row's fields flat, plus
    `fence` and `host` where the database knows them.
    """

    def __init__(self, session: PgSession, path: Path, clock: Clock) -> None:
        super().__init__(path, clock=clock)
        self.session = session

    def append(self, event: str, **details: Any) -> dict[str, Any]:
        """One row in its own transaction; as the file log, a failed write is said on stderr, not raised."""
        from psycopg.types.json import Jsonb

        from cronctl.store.pg.audit import dumps

        row: dict[str, Any] = {"ts": details.pop("ts", None) or now_ms_iso(self.clock), "event": str(event)}
        row.update({k: v for k, v in details.items() if v is not None})
        rest = {k: v for k, v in row.items() if k not in ("ts", "event", "job", "run_id", "reason", "slot")}
        slot = row.get("slot")
        try:
            conn = self.session.conn()
            with self.session.lock, conn.transaction():
                conn.execute("INSERT INTO cronctl_audit (event, job, run_id, slot, reason, details)"
                             " VALUES (%s, %s, %s, %s, %s, %s)",
                             (row["event"], row.get("job"), row.get("run_id"),
                              from_iso(slot) if isinstance(slot, str) else slot, row.get("reason"),
                              Jsonb(rest, dumps=dumps)))
        except (CronctlError, psycopg_error()) as exc:
            print(f"cronctl: cannot write audit row to {self.session.url.shown}: {exc}", file=sys.stderr)
        tell_listeners(self.listeners, row)
        return row

    def rows(self) -> Iterator[dict[str, Any]]:
        conn = self.session.conn()
        with self.session.lock, conn.transaction():
            found = conn.execute("SELECT at, event, job, run_id, slot, reason, fence, host_id, details"
                                 " FROM cronctl_audit ORDER BY id").fetchall()
        for at, event, job, run_id, slot, reason, fence, host, details in found:
            fields = {"job": job, "run_id": run_id, "slot": to_iso(slot), "reason": reason, "fence": fence,
                      "host": host, **details}
            yield {"ts": at.astimezone(timezone.utc).isoformat(timespec="milliseconds"), "event": event,
                   **{key: value for key, value in fields.items() if value is not None}}


def psycopg_error() -> type[Exception]:
    import psycopg

    return psycopg.Error


class RefusingStore(Store):
    """The home's JSON document, refused: this invocation's store is PostgreSQL."""

    def __init__(self, paths: Paths, url: StoreUrl) -> None:
        super().__init__(paths)
        self.url = url

    def read(self) -> Document:
        self._refuse()

    def read_if_changed(self, since: Any) -> NoReturn:
        self._refuse()

    @contextmanager
    def transaction(self) -> Iterator[Document]:
        self._refuse()
        yield  # pragma: no cover - never reached

    def restore_backup(self) -> NoReturn:  # doctor --repair: never touch the home's files instead
        self._refuse()

    def _refuse(self) -> NoReturn:
        raise StoreError(f"this command does not work on the PostgreSQL store ({self.url.shown}) yet; "
                         "run it without --store and $CRONCTL_STORE to use the JSON store of the home "
                         "(list, show, status and history read PostgreSQL; "
                         "'cronctl store import-json' fills it)")
