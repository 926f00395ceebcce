"""The loops' periodic reads on PostgreSQL read only the rows that can match (issue 21, schema V7).

Every loop asks, besides its beat: what notifications are owed (every 2 s, `notify_view`), the
healer's suspects (a live run or a failed last run), and the next instants after each of its
writes. Each of these read every job row (35, 57 and 24 ms at 100,000 jobs) and, while an
`apply -f` of 100,000 jobs was writing, each of its uncommitted rows too: the loops' lateness
during that apply was 1.7x the quiet one. Now each is a range of a partial index, checked here on
20,000 rows (ANALYZEd, as at scale) and beside an open transaction of 20,000 more; and each
still says what the read of every row said.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cronctl.models import FAILED_STATUSES
from cronctl.store.pg import loops
from cronctl.store.pg import unit as pg_unit
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.document import load_jobs
from cronctl.store.pg.schema import OWING_ROW
from tests.pg.test_pg_reads_scale import ROWS, fill, job_scans, plan, put, varied_store

FAILED = sorted(str(status.value) for status in FAILED_STATUSES)
SUSPECTS = f"SELECT name, spec, state FROM cronctl_jobs WHERE {pg_unit._SUSPECT} ORDER BY name"
OWED = f"SELECT name, spec, state FROM cronctl_jobs WHERE {OWING_ROW} ORDER BY name"
# What the suspects read was before: one OR over every row (its answer is the reference).
SUSPECTS_BEFORE = ("name IN (SELECT job FROM cronctl_runs WHERE state = ANY(%(live)s))"
                   " OR state ->> 'last_status' = ANY(%(failed)s)")
OWING = {"notify_owed": {"failure:r1:0": {"event": "failure", "target": {"url": "http://127.0.0.1:9/"},
                                          "owed_at": "2026-03-01T12:00:00+00:00", "attempts": 0}}}

READS: dict[str, tuple[str, dict[str, Any]]] = {
    "notify_view": (OWED, {}),
    "suspects": (SUSPECTS, {"failed": FAILED}),
    "next_instants": (loops._NEXT, {}),
}


def odd_store(conn: Connection, healthy: int = 0) -> None:
    """varied_store's jobs (200 healthy, one of every odd kind, one live run) and two owing a
    notification, one of them healthy; a job whose chain failed but whose own run succeeded;
    `healthy` more healthy jobs (due in a year), then ANALYZE."""
    varied_store(conn)
    with conn.transaction():
        conn.execute("""INSERT INTO cronctl_jobs (name, spec, overlap, next_run_at, wake_at, state)
                        SELECT 'more' || i, spec, overlap, next_run_at, wake_at, state
                          FROM cronctl_jobs, generate_series(1, %s) AS i WHERE name = 'job1'""", (healthy,))
    put(conn, "owing", {**OWING, "last_status": "error"})
    put(conn, "owing-healthy", {**OWING, "last_status": "success"})
    put(conn, "chain-failed", {"last_status": "success", "chain_failed": {"chain_id": "c1"}})
    conn.execute("ANALYZE cronctl_jobs")
    conn.commit()


def test_the_suspects_read_finds_what_reading_every_job_found(conn: Connection) -> None:
    odd_store(conn)
    with conn.transaction():
        now = sorted(load_jobs(conn, pg_unit._SUSPECT, {"failed": FAILED}, None))
        before = sorted(load_jobs(conn, SUSPECTS_BEFORE, {"live": ["claimed", "running"], "failed": FAILED}, None))
    assert now == before == ["failed", "failing-once", "job7", "never-rearmed", "owing"]


def test_the_owed_read_finds_the_jobs_owing_a_notification(conn: Connection) -> None:
    odd_store(conn)
    with conn.transaction():
        assert sorted(load_jobs(conn, OWING_ROW, {}, None)) == ["owing", "owing-healthy"]


@pytest.mark.parametrize("read", list(READS))
def test_a_loop_read_reads_only_its_rows_at_20000_jobs(conn: Connection, read: str) -> None:
    odd_store(conn, ROWS)
    query, params = READS[read]
    found = job_scans(plan(conn, query, params, analyze=True))
    assert found and all(kind != "Seq Scan" for kind, _, _ in found), found
    # the rows it answers (2 owing; 5 suspects, each read twice: found by index, then by name;
    # the first row of each walk of the instants) and the few odd ones its index holds beside
    # them, never the 20,000 others
    assert sum(rows for _, _, rows in found) <= 15, found


def test_no_loop_read_visits_the_rows_of_an_apply_not_yet_committed(conn: Connection,
                                                                    connections: Callable[[], Connection]) -> None:
    """20,000 jobs committed and 20,000 more inserted by a transaction left open (as `apply -f`
    writes them): each loop read visits a few pages, not the open transaction's rows."""
    odd_store(conn, ROWS)
    applier = connections()
    applier.execute("""INSERT INTO cronctl_jobs (name, spec, overlap, next_run_at, wake_at, state)
                       SELECT 'new' || i, '{}'::jsonb, 'skip', at, at, '{}'::jsonb
                         FROM (SELECT i, clock_timestamp() + interval '200 days' AS at
                                 FROM generate_series(1, 20000) AS i) AS rows""")  # left uncommitted
    try:
        for name, (query, params) in READS.items():
            with conn.transaction():
                row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}", params).fetchone()
            assert row is not None
            top = row[0][0]["Plan"]
            assert all(kind != "Seq Scan" for kind, _, _ in job_scans(top)), (name, top)
            blocks = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
            assert blocks < 100, (name, blocks, top)  # a read of every row: 400 pages here
    finally:
        applier.rollback()


def test_the_instants_after_a_write_count_no_job(conn: Connection) -> None:
    """The count of every job is the service manager's status line's alone (loops.job_count)."""
    fill(conn, 50)
    assert "count(*) FROM cronctl_jobs)" not in loops._NEXT
    assert loops.job_count(conn) == 50
    assert len(loops.next_instants(conn)) == 3
