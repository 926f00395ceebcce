"""Job definitions in the PostgreSQL store: one row per job, the spec as jsonb.

Only what claiming needs so far: putting a definition with its next slot. A changed
spec bumps `spec_version`; `last_slot` (the high-water mark) is never moved back, so a
redefinition cannot make an already fired slot fire again.
"""

from __future__ import annotations

from datetime import datetime

from psycopg.types.json import Jsonb

from cronctl.models import AuditEvent, JobSpec
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.connect import Connection


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
