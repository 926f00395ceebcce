"""Helpers of the PostgreSQL tests: jobs due on the database clock, rows read back, lock waits seen."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from cronctl.models import JobSpec, Overlap
from cronctl.store.pg import functions
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_job


def db_now(conn: Connection) -> datetime:
    with conn.transaction():
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    when: datetime = row[0]
    return when


def put_due_job(conn: Connection, name: str, overlap: str = "skip", ago_s: float = 1.0, every_s: float = 60.0,
                **fields: Any) -> JobSpec:
    """A job whose next slot passed `ago_s` seconds ago on the database clock."""
    spec = JobSpec(name=name, command="true", every=every_s, overlap=Overlap(overlap), **fields)
    put_job(conn, spec, db_now(conn) - timedelta(seconds=ago_s))
    return spec


def one(conn: Connection, query: str, *params: Any) -> Any:
    with conn.transaction():
        row = conn.execute(query, params).fetchone()
    return None if row is None else (row[0] if len(row) == 1 else row)


def audit_events(conn: Connection, job: str | None = None) -> list[tuple[str, str | None]]:
    """(event, reason) of the audit rows, oldest first, of one job or all."""
    with conn.transaction():
        rows = conn.execute("SELECT event, reason FROM cronctl_audit WHERE %s::text IS NULL OR job = %s ORDER BY id",
                            (job, job)).fetchall()
    return [(event, reason) for event, reason in rows]


def wait_until_blocked(observer: Connection, blocked: Connection, timeout_s: float = 15.0) -> None:
    """Wait (polling a real server) until `blocked`'s backend waits on a lock held by another."""
    pid = blocked.info.backend_pid
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if one(observer, "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", pid) == "Lock":
            return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited on a lock")


def insert_live_run(conn: Connection, job: str, run_id: str) -> None:
    """A running run of `job` on host-a, its claim owned by pid 1."""
    conn.execute("INSERT INTO cronctl_runs (run_id, job, slot, trigger, exclusive, state, claim, host_id)"
                 " VALUES (%s, %s, clock_timestamp(), 'schedule', true, 'running', %s, 'host-a')",
                 (run_id, job, Jsonb({"run_id": run_id, "owner": {"pid": 1}})))


def open_named_rows(conn: Connection, names: list[str]) -> list[functions.LIVE_ROWS]:
    """`functions.open_named`'s rows, as `functions.lock_named` returns them (no chain to plan)."""
    opened = functions.open_named(conn, names, [])
    assert opened is not None
    return opened.rows


def waited_for_row(connections: Callable[[], Connection], job: str, waiter_does: Callable[[Connection], Any],
                   holder_does: Callable[[Connection], Any]) -> tuple[Any, Any]:
    """`waiter_does` in a transaction of its own while another holds `job`'s row lock; the holder
    does `holder_does` once the waiter waits, then commits. What each returned."""
    holder, waiter, observer = connections(), connections(), connections()
    result: dict[str, Any] = {}
    with holder.transaction():
        holder.execute("SELECT 1 FROM cronctl_jobs WHERE name = %s FOR UPDATE", (job,))

        def wait() -> None:
            with waiter.transaction():
                result["waiter"] = waiter_does(waiter)

        thread = threading.Thread(target=wait)
        thread.start()
        wait_until_blocked(observer, waiter)
        held = holder_does(holder)
    thread.join(timeout=15)
    return result["waiter"], held
