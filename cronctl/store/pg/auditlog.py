"""The audit log of a PostgreSQL store: the `cronctl_audit` table (`PgAuditLog`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from datetime import timezone
from pathlib import Path
from typing import Any

from cronctl.clock import Clock
from cronctl.errors import CronctlError
from cronctl.store.audit import AuditLog, tell_listeners
from cronctl.store.pg.copy_text import Ahead
from cronctl.store.pg.session import PgSession
from cronctl.timefmt import from_iso, to_iso


class PgAuditLog(AuditLog):
    """The audit log in `cronctl_audit`: what `cronctl audit` reads and every row is written to.

    Rows read back in the file log's shape: `ts` (the database's time of the write, as for every
    row of the lease store), `event`, then the row's fields flat, plus
    `fence` and `host` where the database knows them.
    """

    def __init__(self, session: PgSession, path: Path, clock: Clock) -> None:
        super().__init__(path, clock=clock)
        self.session = session
        self._ahead: Ahead[tuple[dict[str, Any], bytes]] = Ahead()

    def append(self, event: str, **details: Any) -> dict[str, Any]:
        """One row in its own transaction; as the file log, a failed write is said on stderr, not raised."""
        return self.append_many([(event, details)])[0]

    def append_many(self, rows: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every row of a burst (`apply -f` of 10,000 jobs) in one transaction, one round trip per batch."""
        written, params = self.prepare(rows)
        try:
            conn = self.session.conn()
            with self.session.lock, conn.transaction():
                from cronctl.store.pg.audit import insert_audit_rows

                insert_audit_rows(conn, params)
        except (CronctlError, psycopg_error()) as exc:
            print(f"cronctl: cannot write audit row(s) to {self.session.url.shown}: {exc}", file=sys.stderr)
        self.tell(written)
        return written

    def prepare(self, rows: list[tuple[str, dict[str, Any]]]) -> tuple[list[dict[str, Any]], list[bytes]]:
        """The rows as `append_many` tells them, and their COPY lines for `insert_audit_rows`:
        a write that must commit with its audit rows (store/pg/definitions.py) inserts them itself.
        A row `prepare_ahead` encoded (the very same tuple) is taken as it was made, stamped now."""
        from cronctl.store.audit import now_ms_iso
        from cronctl.store.pg.identity import host_id

        host = host_id()  # which host decided it, as the lease store's rows say (SPEC §9)
        stamp = now_ms_iso(self.clock)  # once for the burst: the table keeps its own `at`
        written, lines = [], []
        for row in rows:
            made = self._ahead.take(id(row), row) or self._encode(row, host)
            if "ts" not in row[1]:  # a row's own `ts` stands, as it always did
                made[0]["ts"] = stamp
            written.append(made[0])
            lines.append(made[1])
        return written, lines

    def prepare_ahead(self, rows: list[tuple[str, dict[str, Any]]]) -> None:
        """Rows a write may insert, encoded now, before its transaction (issue 21: `apply -f`
        encodes its `job.added` rows on an idle thread); `prepare` takes them."""
        from cronctl.store.pg.identity import host_id

        host = host_id()
        for row in rows:
            self._ahead.keep(id(row), row, self._encode(row, host))

    def forget_ahead(self) -> None:
        self._ahead.clear()

    def _encode(self, row: tuple[str, dict[str, Any]], host: str) -> tuple[dict[str, Any], bytes]:
        """The row as told (its `ts` set by `prepare`) and its COPY line."""
        from cronctl.store.pg.audit import json_text
        from cronctl.store.pg.copy_text import copy_line

        event, details = row
        shown = {**self._row(event, {"ts": "-", **details}), "host": host}
        rest = {k: v for k, v in shown.items() if k not in ("ts", "event", "job", "run_id", "reason", "slot", "host")}
        slot = shown.get("slot")
        line = copy_line((shown["event"], shown.get("job"), shown.get("run_id"),
                          from_iso(slot) if isinstance(slot, str) else slot, shown.get("reason"), host,
                          json_text(rest)))  # COPY's text of a jsonb value
        return shown, line

    def tell(self, written: list[dict[str, Any]]) -> None:
        """The listeners hear each row once it is written."""
        for row in written:
            tell_listeners(self.listeners, row)

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
