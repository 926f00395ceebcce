"""Kill and force-run requests across hosts: rows in `cronctl_requests`, served by a loop (SPEC §9).

A CLI on any host cannot signal a process on another, nor start a run there; it leaves
a request, and a loop takes it: a force-run by any loop, a kill only by a loop on the
host the run's child lives on (pids mean nothing elsewhere). `take` marks the requests
it returns served in the same transaction, with FOR UPDATE SKIP LOCKED, so two loops
never serve one request; `answer` records what came of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from cronctl.errors import ConflictError, no_job_named
from cronctl.models import AuditEvent
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.transaction import short_transaction

FORCE_RUN = "force_run"
KILL = "kill"


@dataclass(frozen=True)
class Request:
    id: int
    kind: str  # FORCE_RUN or KILL
    job: str
    run_id: str | None  # the run to kill; None for a force-run
    requested_by: str | None


def request_force(conn: Connection, job: str, requested_by: str) -> int:
    """Ask any loop to fire `job` now, once; returns the request's id."""
    with short_transaction(conn):
        if conn.execute("SELECT 1 FROM cronctl_jobs WHERE name = %s", (job,)).fetchone() is None:
            raise no_job_named(job)
        request_id = _insert(conn, FORCE_RUN, job, None, requested_by)
        write_audit(conn, [AuditRow(AuditEvent.FORCE_RUN_REQUESTED, job=job,
                                    details={"request": request_id, "requested_by": requested_by})], None, None)
    return request_id


def request_kill(conn: Connection, job: str, run_id: str, requested_by: str) -> int:
    """Ask the loop on the run's host to end it; asking again returns the open request's id."""
    with short_transaction(conn):
        run = conn.execute("SELECT state FROM cronctl_runs WHERE job = %s AND run_id = %s FOR UPDATE",
                           (job, run_id)).fetchone()
        if run is None or run[0] not in ("claimed", "running"):
            raise ConflictError(f"job '{job}' has no run {run_id} in flight to kill")
        conn.execute("UPDATE cronctl_runs SET kill_requested = true WHERE run_id = %s", (run_id,))
        open_one = conn.execute("SELECT id FROM cronctl_requests WHERE kind = %s AND run_id = %s"
                                " AND served_at IS NULL", (KILL, run_id)).fetchone()
        if open_one is not None:
            return int(open_one[0])
        return _insert(conn, KILL, job, run_id, requested_by)


def _insert(conn: Connection, kind: str, job: str, run_id: str | None, requested_by: str) -> int:
    row = conn.execute("INSERT INTO cronctl_requests (kind, job, run_id, requested_by) VALUES (%s, %s, %s, %s)"
                       " RETURNING id", (kind, job, run_id, requested_by)).fetchone()
    assert row is not None
    return int(row[0])


# Force-runs for anyone; kills only of runs whose child is on this host.
_TAKE = """UPDATE cronctl_requests AS q SET served_at = clock_timestamp(), served_by = %(loop)s
            FROM (SELECT q2.id FROM cronctl_requests AS q2
                    LEFT JOIN cronctl_runs AS r ON r.run_id = q2.run_id
                   WHERE q2.served_at IS NULL
                     AND (q2.kind = 'force_run' OR (q2.kind = 'kill' AND r.host_id = %(host)s))
                   ORDER BY q2.id LIMIT %(limit)s FOR UPDATE OF q2 SKIP LOCKED) AS picked
           WHERE q.id = picked.id
           RETURNING q.id, q.kind, q.job, q.run_id, q.requested_by"""


def take(conn: Connection, host_id: str, loop_id: UUID | None = None, limit: int = 100) -> list[Request]:
    """The open requests this loop may serve, oldest first, now marked served by it."""
    params: dict[str, Any] = {"loop": loop_id, "host": host_id, "limit": limit}
    with short_transaction(conn):
        rows = conn.execute(_TAKE, params).fetchall()
    return sorted((Request(int(i), kind, job, run_id, by) for i, kind, job, run_id, by in rows),
                  key=lambda request: request.id)


def answer(conn: Connection, request_id: int, outcome: str) -> None:
    """What came of a served request (`cronctl` shows it to whoever asked)."""
    with short_transaction(conn):
        conn.execute("UPDATE cronctl_requests SET outcome = %s WHERE id = %s", (outcome, request_id))


def withdraw(conn: Connection, request_id: int) -> bool:
    """Take back a request no loop has taken (its asker gave up); False when one took it already."""
    with short_transaction(conn):
        row = conn.execute("UPDATE cronctl_requests SET served_at = clock_timestamp(), outcome = 'withdrawn'"
                           " WHERE id = %s AND served_at IS NULL RETURNING id", (request_id,)).fetchone()
    return row is not None


def outcome_of(conn: Connection, request_id: int) -> tuple[bool, str | None]:
    """(served, outcome) of one request."""
    with conn.transaction():
        row = conn.execute("SELECT served_at IS NOT NULL, outcome FROM cronctl_requests WHERE id = %s",
                           (request_id,)).fetchone()
    if row is None:
        raise LookupError(f"no request {request_id}")
    return bool(row[0]), row[1]
