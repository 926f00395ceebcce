"""Which store a cronctl invocation uses: the JSON document of its home, or PostgreSQL.

`--store URL` (or $CRONCTL_STORE) names a PostgreSQL database; neither means the JSON
store of the home, as always. The URL's password is shown nowhere (`StoreUrl`).

With PostgreSQL selected, the run path and the read views go through `PgLeaseStore`,
what works on the document (defining and editing jobs, doctor, metrics) through
`PgDocStore` (store/pg/docstore.py), and the audit log is the database's (`PgAuditLog`),
all over one connection (`PgSession`). The home keeps this host's files only (run logs).
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator, Mapping
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from cronctl.clock import Clock
from cronctl.errors import CronctlError
from cronctl.paths import Paths
from cronctl.store.audit import AuditLog, tell_listeners
from cronctl.timefmt import from_iso, to_iso

if TYPE_CHECKING:
    from cronctl.store.pg.connect import Connection, StoreUrl
    from cronctl.store.pg.docstore import PgDocStore
    from cronctl.store.pg.leases import PgLeaseStore

STORE_ENV = "CRONCTL_STORE"


DRIVER_HINT = "install the PostgreSQL driver: pip install 'cronctl[postgres]'"
_warned_about_argv = False


def selected_url(option: str | None, env: Mapping[str, str]) -> StoreUrl | None:
    """`--store` wins over $CRONCTL_STORE; None: the JSON store of the home."""
    if not (option or env.get(STORE_ENV)):
        return None  # the common case imports nothing of PostgreSQL
    try:
        from cronctl.store.pg.connect import store_url_from
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "psycopg":
            raise
        raise CronctlError(f"--store: {DRIVER_HINT}") from None
    url = store_url_from(option, env)
    if option and url is not None and url.password:
        warn_password_in_argv()
    return url


def warn_password_in_argv() -> None:
    """Once per process: a password given with --store is in the command line, which `ps`
    shows every user of the host."""
    global _warned_about_argv
    if _warned_about_argv:
        return
    _warned_about_argv = True
    print(f"cronctl: warning: --store carries a password, which any user of this host sees with 'ps'; "
          f"put the URL in ${STORE_ENV} or the password in ~/.pgpass instead", file=sys.stderr)


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


def open_pg_document_store(session: PgSession, paths: Paths) -> PgDocStore:
    """The JSON store's document API over the database's rows."""
    from cronctl.store.pg.docstore import PgDocStore
    from cronctl.store.pg.identity import host_id

    return PgDocStore(paths, session, host_id())


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
        return self.append_many([(event, details)])[0]

    def append_many(self, rows: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every row of a burst (`apply -f` of 10,000 jobs) in one transaction and one statement."""
        from psycopg.types.json import Jsonb

        from cronctl.store.pg.audit import dumps, insert_audit
        from cronctl.store.pg.identity import host_id

        host = host_id()  # which host decided it, as the lease store's rows say (SPEC §9)
        written = [{**self._row(event, dict(details)), "host": host} for event, details in rows]
        params = []
        for row in written:
            rest = {k: v for k, v in row.items()
                    if k not in ("ts", "event", "job", "run_id", "reason", "slot", "host")}
            slot = row.get("slot")
            params.append((row["event"], row.get("job"), row.get("run_id"),
                           from_iso(slot) if isinstance(slot, str) else slot, None, row.get("reason"),
                           Jsonb(rest, dumps=dumps)))
        try:
            conn = self.session.conn()
            with self.session.lock, conn.transaction():
                insert_audit(conn, params, None, host)  # one statement: no pipeline (store/pg/audit.py)
        except (CronctlError, psycopg_error()) as exc:
            print(f"cronctl: cannot write audit row(s) to {self.session.url.shown}: {exc}", file=sys.stderr)
        for row in written:
            tell_listeners(self.listeners, row)
        return written

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
