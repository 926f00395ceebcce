"""Job definitions in the PostgreSQL store: one row per job, the spec as jsonb.

Putting a definition with its next slot (`put_job`), or with its whole state as the JSON
store holds it (`put_entry`), and pausing. A changed
spec bumps `spec_version`; `last_slot` (the high-water mark, raised when a scheduled run
is dispatched: functions._END_UNIT) is never written here, so a redefinition cannot make an
already fired slot, or an earlier one, fire again (store/pg/fired.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from cronctl.models import AuditEvent, JobSpec
from cronctl.store import claims as claims_mod
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.connect import Connection
from cronctl.timefmt import from_iso, to_iso


def put_job(conn: Connection, spec: JobSpec, next_run_at: datetime | None) -> bool:
    """Insert or replace one definition in its own transaction; True when it was new."""
    with conn.transaction():
        row = conn.execute(
            """INSERT INTO cronctl_jobs (name, spec, overlap, paused, next_run_at)
               VALUES (%(name)s, %(spec)s, %(overlap)s, %(paused)s, %(next)s)
               ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, overlap = EXCLUDED.overlap,
                   paused = EXCLUDED.paused, next_run_at = EXCLUDED.next_run_at,
                   spec_version = cronctl_jobs.spec_version + 1, updated_at = clock_timestamp()
               RETURNING (xmax = 0) AS inserted""",
            {"name": spec.name, "spec": Jsonb(spec.to_dict()), "overlap": spec.overlap.value,
             "paused": spec.paused, "next": next_run_at}).fetchone()
        added = bool(row and row[0])
        event = AuditEvent.JOB_ADDED if added else AuditEvent.JOB_UPDATED
        write_audit(conn, [AuditRow(event, job=spec.name, details={"next_run_at": next_run_at})], None, None)
    return added


def put_entry(conn: Connection, entry: dict[str, Any]) -> None:
    """One job as the JSON store holds it (`{**spec, "state": state}`), inside the caller's transaction.

    Its claims, if any, are not definitions: the lease store writes those as runs.
    """
    state = {key: {} if key == "claims" else value for key, value in entry["state"].items()}
    spec = JobSpec.from_dict(entry)
    conn.execute(
        """INSERT INTO cronctl_jobs (name, spec, overlap, paused, next_run_at, wake_at, state)
           VALUES (%(name)s, %(spec)s, %(overlap)s, %(paused)s, %(next)s, %(wake)s, %(state)s)
           ON CONFLICT (name) DO UPDATE SET spec = EXCLUDED.spec, overlap = EXCLUDED.overlap,
               paused = EXCLUDED.paused, next_run_at = EXCLUDED.next_run_at, wake_at = EXCLUDED.wake_at,
               state = EXCLUDED.state,
               spec_version = cronctl_jobs.spec_version + 1, updated_at = clock_timestamp()""",
        {"name": spec.name, "spec": Jsonb(spec.to_dict()), "overlap": spec.overlap.value,
         "paused": bool(spec.paused or state.get("paused")), "next": from_iso(state.get("next_run_at")),
         "wake": claims_mod.wake_at({**entry, "state": state}), "state": Jsonb(state)})


def set_paused(conn: Connection, name: str, paused: bool, now: datetime) -> bool:
    """Pause or resume one job in its own transaction; False when it already was so (or is unknown)."""
    with conn.transaction():
        row = conn.execute(
            """UPDATE cronctl_jobs SET paused = %(paused)s, updated_at = clock_timestamp(),
                   state = state || jsonb_build_object('paused', %(paused)s, 'updated_at', %(now)s::text)
               WHERE name = %(name)s AND coalesce((state->>'paused')::boolean, false) <> %(paused)s
               RETURNING 1""", {"paused": paused, "now": to_iso(now), "name": name}).fetchone()
        if row is not None:
            write_audit(conn, [AuditRow(AuditEvent.JOB_PAUSED if paused else AuditEvent.JOB_RESUMED, job=name)],
                        None, None)
    return row is not None
