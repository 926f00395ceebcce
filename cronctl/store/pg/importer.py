"""Copy a JSON store (its document and history records) into a PostgreSQL store, in one transaction.

Either everything is copied or nothing is: a failure rolls back, and the JSON store is
only read. Without `replace`, jobs already in the database are refused by name, so an
import never overwrites a definition silently; with it, the database's jobs, runs, chains
and counters are replaced (its audit rows are kept: they record what happened). The
chains (`doc["chains"]`) become chain rows, their runs (trigger `chain`, skipped nodes
included) runs rows, as the lease store writes them (store/pg/chain_rows.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.types.json import Jsonb

from cronctl.errors import ConflictError
from cronctl.models import AuditEvent
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.chain_rows import save_chains
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.definitions import DEFINITIONS_LOCK_KEY
from cronctl.store.pg.document import dump
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.transaction import Limits, short_transaction
from cronctl.store.pg.writes import WriteStage, take_xact_lock
from cronctl.timefmt import from_iso

# An import writes a whole store: more time than a lease operation, still bounded.
IMPORT_LIMITS = Limits(idle_s=30.0, lock_s=30.0, statement_s=300.0)


@dataclass(frozen=True)
class Imported:
    jobs: int
    records: int
    duplicates: int  # history records whose (job, slot, attempt) was already there: not copied


def import_document(conn: Connection, doc: dict[str, Any], records: Sequence[dict[str, Any]], host_id: str,
                    replace: bool, stage: WriteStage | None = None) -> Imported:
    """`stage` is told when COMMIT is next (writes.told_failures words a failure by it)."""
    stage = stage or WriteStage()
    jobs: dict[str, Any] = doc.get("jobs") or {}
    with short_transaction(conn, IMPORT_LIMITS):
        # Exclusive, where every definitions writer takes it shared: an `add` meanwhile lands before
        # or after, never across.
        take_xact_lock(conn, DEFINITIONS_LOCK_KEY, IMPORT_LIMITS.lock_s, "store import-json")
        if replace:
            conn.execute("DELETE FROM cronctl_runs")
            conn.execute("DELETE FROM cronctl_jobs")
            conn.execute("DELETE FROM cronctl_chains")
            conn.execute("UPDATE cronctl_meta SET value = '{}'::jsonb")
        else:
            _refuse_existing(conn, sorted(jobs))
        for name in sorted(jobs):
            put_entry(conn, jobs[name])
        copied = sum(_insert_record(conn, record, host_id) for record in records)
        save_chains(conn, {}, dict(doc.get("chains") or {}), dump)
        _merge_meta(conn, doc)
        write_audit(conn, [AuditRow(AuditEvent.JOB_ADDED, job=name, details={"source": "import-json"})
                           for name in sorted(jobs)], None, host_id)
        stage.committing = True
    return Imported(len(jobs), copied, len(records) - copied)


def _refuse_existing(conn: Connection, names: list[str]) -> None:
    rows = conn.execute("SELECT name FROM cronctl_jobs WHERE name = ANY(%s) ORDER BY name", (names,)).fetchall()
    if rows:
        listed = ", ".join(row[0] for row in rows)
        raise ConflictError(f"already in the PostgreSQL store: {listed}; nothing was imported "
                            "(--replace replaces the store's jobs, runs and counters)")


def _insert_record(conn: Connection, record: dict[str, Any], host_id: str) -> int:
    """One ended run as a runs row with its record; 0 when that run (or its slot's attempt) is there."""
    row = conn.execute(
        """INSERT INTO cronctl_runs (run_id, job, slot, trigger, attempt, exclusive, state, reason, fault, late,
               host_id, exit_code, signal, duration_s, output_tail, claimed_at, dispatched_at, ended_at, record)
           VALUES (%s, %s, %s, %s, %s, false, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT DO NOTHING RETURNING 1""",
        (record["run_id"], record["job"], from_iso(record.get("slot")), record.get("trigger") or "schedule",
         int(record.get("attempt") or 1), record["status"], record.get("reason"), record.get("fault"),
         bool(record.get("late")), host_id, record.get("exit_code"), record.get("signal"), record.get("duration"),
         record.get("output_tail"), from_iso(record.get("claimed_at")) or from_iso(record["ended_at"]),
         from_iso(record.get("started_at")), from_iso(record["ended_at"]), Jsonb(record))).fetchone()
    return 0 if row is None else 1


def _merge_meta(conn: Connection, doc: dict[str, Any]) -> None:
    """Counters add up; the lateness histogram is taken over when the database has none yet."""
    for key, value in (doc.get("counters") or {}).items():
        conn.execute("""UPDATE cronctl_meta SET value = value || jsonb_build_object(%(key)s::text,
                            coalesce((value->>%(key)s)::bigint, 0) + %(add)s) WHERE key = 'counters'""",
                     {"key": key, "add": int(value)})
    if doc.get("metrics"):
        conn.execute("UPDATE cronctl_meta SET value = %s WHERE key = 'metrics' AND value = '{}'::jsonb",
                     (Jsonb(doc["metrics"]),))
