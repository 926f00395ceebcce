"""Audit rows of the PostgreSQL store, written in the transaction of the decision they record.

A row carries what SPEC §8 names (event, job, run_id, slot, reason, details) plus who
decided it across hosts: the claim's fence, the loop and its host.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import msgspec
from psycopg.types.json import Jsonb

from cronctl.models import AuditEvent
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.copy_text import write_lines
from cronctl.timefmt import to_iso


@dataclass(frozen=True)
class AuditRow:
    event: AuditEvent
    job: str | None = None
    run_id: str | None = None
    slot: datetime | None = None
    fence: int | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def write_audit(conn: Connection, rows: list[AuditRow], loop_id: UUID | None, host_id: str | None) -> None:
    """Insert `rows` inside the caller's transaction: they commit or vanish with its decision."""
    if rows:
        conn.execute(_INSERT, (loop_id, host_id, *audit_columns(rows)))


def audit_columns(rows: list[AuditRow]) -> list[list[Any]]:
    """`rows` as the columns (event, job, run_id, slot, fence, reason, details as Jsonb) one
    statement inserts (here, or the lease units' `cronctl_end_unit`: store/pg/functions.py)."""
    values = [(row.event.value, row.job, row.run_id, row.slot, row.fence, row.reason,
               Jsonb({k: v for k, v in row.details.items() if v is not None}, dumps=dumps)) for row in rows]
    return [list(column) for column in zip(*values, strict=True)]


# One statement, never a pipeline (executemany): PostgreSQL times nothing between a pipeline's
# messages, and a stall there kept the transaction's row locks for ever (issue 20). The rows
# keep their order (ids rise as the list goes).
_INSERT = """INSERT INTO cronctl_audit (event, job, run_id, slot, fence, reason, details, loop_id, host_id)
             SELECT u.event, u.job, u.run_id, u.slot, u.fence, u.reason, u.details, %s::uuid, %s::text
               FROM unnest(%s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::bigint[], %s::text[], %s::jsonb[])
                    WITH ORDINALITY AS u(event, job, run_id, slot, fence, reason, details, n)
              ORDER BY u.n"""


# A NUL escape not itself escaped (an even run of backslashes before it).
_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def dumps(value: Any) -> str:
    """JSON with instants as the ISO text every other audit row uses, and NUL as U+FFFD:
    jsonb refuses \\u0000, and a job that prints a NUL must not make its run unrecordable."""
    text = json.dumps(value, default=lambda v: to_iso(v) if isinstance(v, datetime) else str(v))
    return _NUL.sub(r"\1\\ufffd", text) if "\\u0000" in text else text


_PLAIN = (str, int, float, bool, type(None))
_encode = msgspec.json.Encoder().encode


def json_text(value: dict[str, Any], plain: bool = False) -> str:
    """`dumps(value)` as the same JSON value, several times faster for plain data (a burst of
    100,000 audit rows, or as many specs and states): msgspec's encoding where `value` holds
    only strings, numbers, booleans, nulls, lists and objects of them; `dumps` for anything
    else (an instant, which `dumps` writes as every other row does) and for a NUL. `plain`:
    the caller knows it is plain data (a spec's `to_dict`, a state), so it is not walked."""
    if not plain and not _plain(value):
        return dumps(value)
    try:
        text = _encode(value).decode()
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return dumps(value)
    return dumps(value) if "\\u0000" in text else text


def _plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain(item) for key, item in value.items())
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return False


def insert_audit_rows(conn: Connection, lines: list[bytes]) -> None:
    """`PgAuditLog.prepare`'s rows (auditlog.py), COPY lines, inside the caller's transaction: one
    COPY stream, whatever their number (`apply -f` of 100,000 jobs writes 100,000 rows)."""
    if not lines:
        return
    with conn.cursor() as cur, cur.copy("COPY cronctl_audit (event, job, run_id, slot, reason, host_id, details)"
                                        " FROM STDIN") as copy:
        write_lines(copy, lines, conn.info.encoding)
