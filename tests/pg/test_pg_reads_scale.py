"""The PostgreSQL reads that must not grow with the store (issue 21): each read reads its own rows.

- `list NAME-PREFIX` reads only the jobs whose name starts with the prefix (a range of the
  name index), the prefix taken literally;
- `status --stale` judges only the jobs that may be stale (store/pg/stale.py), and says
  exactly what judging every job says;
- the due scan of a claim and the idle beat walk the index on `wake_at`, never the jobs.

The plans are checked on 20,000 rows (as bench/pg_claim.py fills them: every job due in a
year), ANALYZEd, so the planner chooses as it would at scale.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from psycopg.types.json import Jsonb

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import FAILED_STATUSES, JobSpec
from cronctl.ops import definitions as ops
from cronctl.ops.status import status, status_json
from cronctl.store.pg import loops, stale
from cronctl.store.pg import unit as pg_unit
from cronctl.store.pg.connect import Connection, parse_store_url
from cronctl.store.pg.document import load_jobs
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.schema import ODD_JOB
from cronctl.timefmt import to_iso

ROWS = 20_000
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def fill(conn: Connection, rows: int = ROWS) -> None:
    """`rows` jobs `job1`... due in a year, as the benches fill them, then ANALYZE."""
    spec = JobSpec(name="template", command="true", every=60.0).to_dict()
    with conn.transaction():
        conn.execute(
            """INSERT INTO cronctl_jobs (name, spec, overlap, next_run_at, wake_at, state)
               SELECT 'job' || i, jsonb_set(%s::jsonb, '{name}', to_jsonb('job' || i)), 'skip', at, at,
                      jsonb_build_object('next_run_at', to_char(at AT TIME ZONE 'UTC',
                                                                'YYYY-MM-DD"T"HH24:MI:SS.MS"+00:00"'))
                 FROM (SELECT i, clock_timestamp() + interval '365 days' + i * interval '1 second' AS at
                         FROM generate_series(1, %s) AS i) AS rows""", (Jsonb(spec), rows))
    conn.execute("ANALYZE cronctl_jobs")
    conn.commit()


def plan(conn: Connection, query: str, params: dict[str, Any], analyze: bool = False) -> dict[str, Any]:
    """The plan (EXPLAIN ... FORMAT JSON) of `query`."""
    with conn.transaction():
        options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
        row = conn.execute(f"EXPLAIN ({options}) {query}", params).fetchone()
        assert row is not None
    found: dict[str, Any] = row[0][0]["Plan"]
    return found


def scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every node of a plan that reads a relation."""
    if "Relation Name" in node:
        yield node
    for child in node.get("Plans", []):
        yield from scans(child)


def job_scans(node: dict[str, Any]) -> list[tuple[str, str | None, float]]:
    """(node type, index, rows read in all loops) of each scan of cronctl_jobs."""
    return [(n["Node Type"], n.get("Index Name"), n.get("Actual Rows", 0) * n.get("Actual Loops", 1)
             + n.get("Rows Removed by Filter", 0))
            for n in scans(node) if n["Relation Name"] == "cronctl_jobs"]


# --- the run path -------------------------------------------------------------------------------


@pytest.mark.parametrize("now", [NOW + timedelta(days=2), None], ids=["caller", "database"])
def test_the_due_scan_reads_the_due_rows_alone_at_20000_jobs(conn: Connection, now: datetime | None) -> None:
    fill(conn)
    query = f"SELECT name FROM cronctl_jobs WHERE {pg_unit._DUE} ORDER BY name FOR UPDATE SKIP LOCKED"
    found = job_scans(plan(conn, query, {"now": now}, analyze=True))
    assert [(kind, index) for kind, index, _ in found] == [("Index Scan", "cronctl_jobs_wake")], found
    assert sum(read for _, _, read in found) == 0, found  # nothing is due: nothing read


def test_the_idle_beat_reads_a_few_rows_at_20000_jobs(conn: Connection) -> None:
    fill(conn)
    params = {"loop": uuid.uuid4(), "skew": 0.0, "host": "h", "pid": "1", "margin": 60.0}
    found = job_scans(plan(conn, loops._BEAT, params, analyze=True))
    assert found and all(index == "cronctl_jobs_wake" for _, index, _ in found), found
    assert sum(read for _, _, read in found) <= 5, found  # the first row of each walk


# --- list NAME-PREFIX ---------------------------------------------------------------------------


def test_list_of_a_prefix_reads_only_the_names_that_start_with_it(conn: Connection) -> None:
    fill(conn)
    query = "SELECT name FROM cronctl_jobs WHERE name LIKE %(pattern)s ORDER BY name"
    found = job_scans(plan(conn, query, {"pattern": pg_unit.like_prefix("job1999")}, analyze=True))
    assert [kind for kind, _, _ in found] in (["Index Scan"], ["Index Only Scan"], ["Bitmap Heap Scan"]), found
    assert sum(read for _, _, read in found) <= 11, found  # job1999 and job19990..job19999


def test_list_of_a_prefix_on_postgresql_gives_the_json_stores_answer(store_url: str, tmp_path: Path) -> None:
    ctx = Context.open(tmp_path / "home", store_url=parse_store_url(store_url))
    for name in ("backup-db", "backup-home", "backup_x", "backupxy", "report", "back", "backz"):
        ops.add_job(ctx, ops.spec_from_options(name, {"every": "1h", "command": "true"}))

    def listed(prefix: str | None) -> list[str]:
        return [view.spec.name for view in ops.list_jobs(ctx, prefix)]

    assert listed("backup-") == ["backup-db", "backup-home"]
    assert listed("backup_") == ["backup_x"]  # `_` is no wildcard
    assert listed("back") == ["back", "backup-db", "backup-home", "backup_x", "backupxy", "backz"]
    assert listed("b%") == [] and listed("zzz") == []
    assert listed("") == listed(None) == sorted(["back", "backup-db", "backup-home", "backup_x", "backupxy",
                                                  "backz", "report"])
    assert pg_unit.like_prefix("a\\b%c_") == "a\\\\b\\%c\\_%"


# --- status --stale -----------------------------------------------------------------------------


def test_the_odd_job_index_names_every_failed_status() -> None:
    for failed in FAILED_STATUSES:
        assert f"'{failed.value}'" in ODD_JOB


def put(conn: Connection, name: str, state: dict[str, Any], **fields: Any) -> None:
    spec = JobSpec(name=name, command="true", every=3600.0, **fields)
    with conn.transaction():
        put_entry(conn, {**entry_from(spec, new_state(NOW, NOW + timedelta(minutes=30))),
                         "state": {**new_state(NOW, NOW + timedelta(minutes=30)), **state}})


def varied_store(conn: Connection) -> None:
    """Healthy jobs beside one of every kind of stale or odd job."""
    fill(conn, 200)
    long_ago = to_iso(NOW - timedelta(days=3))
    put(conn, "late", {"next_run_at": to_iso(NOW - timedelta(hours=2))})
    put(conn, "late-paused", {"next_run_at": to_iso(NOW - timedelta(hours=2)), "paused": True})
    put(conn, "due-now", {"next_run_at": to_iso(NOW - timedelta(seconds=1))})
    put(conn, "failed", {"last_status": "error", "last_exit_code": 2, "consecutive_failures": 1,
                         "last_run_at": to_iso(NOW - timedelta(minutes=10))})
    put(conn, "failing-once", {"last_status": "timeout", "consecutive_failures": 1,
                               "last_run_at": to_iso(NOW - timedelta(minutes=10))}, alert_after=3)
    put(conn, "never-rearmed", {"last_status": "lost", "consecutive_failures": 1, "last_run_at": long_ago,
                                "next_run_at": to_iso(NOW + timedelta(days=30))})
    put(conn, "blocked", {"last_not_started": {"reason": "blocked_config", "run_id": "r1", "ended_at": long_ago},
                          "blocked": "its working directory /nowhere does not exist"})
    put(conn, "succeeded", {"last_status": "success", "last_run_at": long_ago})
    with conn.transaction():  # a run of this host whose owner is long dead: wedged
        conn.execute(
            """INSERT INTO cronctl_runs (run_id, job, slot, trigger, exclusive, state, host_id, boot_id, claim,
                                         lease_expires_at)
               VALUES ('dead-run', 'job7', %s, 'schedule', true, 'running', 'elsewhere', 'b', %s, %s)""",
            (NOW, Jsonb({"run_id": "dead-run", "slot": to_iso(NOW), "trigger": "schedule", "attempt": 1,
                         "dispatched": True, "owner": {"pid": 1, "start_time": 1.0, "generation": "g"},
                         "lease_until": long_ago}), NOW - timedelta(days=3)))


def test_status_stale_judges_only_the_jobs_that_may_be_stale_and_says_the_same(
        store_url: str, conn: Connection, tmp_path: Path) -> None:
    varied_store(conn)
    ctx = Context.open(tmp_path / "home", store_url=parse_store_url(store_url), clock=FakeClock(NOW))
    with conn.transaction():
        read = sorted(load_jobs(conn, stale.MAY_BE_STALE, {"now": NOW, "live": ["claimed", "running"]}, None))
    assert read == ["blocked", "due-now", "failed", "failing-once", "job7", "late", "never-rearmed"]
    whole, judged = status(ctx), status(ctx, only_stale=True)
    assert json.dumps(status_json(judged, True)) == json.dumps(status_json(whole, True))
    assert [job.view.spec.name for job in judged.stale_jobs] == ["blocked", "failed", "job7", "late",
                                                                "never-rearmed"]
    assert judged.stale == whole.stale is True and judged.has_jobs


def test_status_stale_of_an_empty_store_and_of_a_healthy_one(store_url: str, conn: Connection,
                                                             tmp_path: Path) -> None:
    ctx = Context.open(tmp_path / "home", store_url=parse_store_url(store_url), clock=FakeClock(NOW))
    empty = status(ctx, only_stale=True)
    assert (empty.jobs, empty.has_jobs, empty.stale) == ([], False, False)
    fill(conn, 50)
    healthy = status(ctx, only_stale=True)
    # no job is judged, yet the store has jobs: with no loop alive, that is stale (the loop side)
    assert (healthy.jobs, healthy.has_jobs) == ([], True)
    assert status_json(healthy, True)["loop_stale"] is status_json(status(ctx), True)["loop_stale"] is True


def test_status_stale_reads_no_healthy_row_at_20000_jobs(conn: Connection) -> None:
    fill(conn)
    query = f"SELECT name FROM cronctl_jobs WHERE {stale.MAY_BE_STALE} ORDER BY name"
    found = job_scans(plan(conn, query, {"now": NOW, "live": ["claimed", "running"]}, analyze=True))
    assert all(kind != "Seq Scan" for kind, _, _ in found), found
    assert sum(read for _, _, read in found) == 0, found


def test_status_stale_needs_no_index_it_lacks(conn: Connection) -> None:
    with conn.transaction():
        indexes = {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'cronctl_jobs'")}
    assert {"cronctl_jobs_odd", "cronctl_jobs_due", "cronctl_jobs_prefix"} <= indexes


def _insert_due_in(conn: Connection, name: str, delay: timedelta) -> None:
    at = datetime.now(timezone.utc) + delay
    put_entry(conn, entry_from(JobSpec(name=name, command="true", every=60.0), new_state(at, at)))


def test_the_next_slot_to_claim_ahead_is_looked_for_within_the_horizon(conn: Connection) -> None:
    with conn.transaction():
        _insert_due_in(conn, "far", loops.AHEAD_HORIZON + timedelta(minutes=5))
    _, ahead, count = loops.next_instants(conn)
    assert (ahead, count) == (None, 0)  # found once it is within the horizon
    with conn.transaction():
        _insert_due_in(conn, "near", timedelta(minutes=1))
    _, ahead, count = loops.next_instants(conn)
    assert ahead is not None and count == 1
    assert timedelta(0) < ahead - datetime.now(timezone.utc) <= timedelta(minutes=1)


def test_a_beat_does_not_walk_the_rows_of_an_apply_not_yet_committed(conn: Connection,
                                                                     connections: Any) -> None:
    """An `apply -f` of 20,000 jobs due in a month, its transaction open: the beat's walk for the
    next slot to claim ahead stops at the horizon instead of visiting each of their rows (issue 21:
    17 ms per beat on average, 360 ms at worst, while an apply of 100,000 jobs was writing)."""
    applier = connections()
    fill(applier)  # 20,000 jobs due in a year, committed and ANALYZEd
    # A job due in a minute that may not be claimed ahead (a retry pending; as the bench's job while
    # its run is live): the next instant is found at once, the walk for one to claim ahead goes on.
    applier.execute("""INSERT INTO cronctl_jobs (name, spec, overlap, next_run_at, wake_at, state)
                       SELECT 'retrying', '{}'::jsonb, 'skip', at, at, '{"retry": {"attempt": 2}}'::jsonb
                         FROM (SELECT clock_timestamp() + interval '1 minute' AS at) AS t""")
    applier.commit()
    applier.execute("""INSERT INTO cronctl_jobs (name, spec, overlap, next_run_at, wake_at, state)
                       SELECT 'new' || i, '{}'::jsonb, 'skip', at, at, '{}'::jsonb
                         FROM (SELECT i, clock_timestamp() + interval '30 days' AS at
                                 FROM generate_series(1, 20000) AS i) AS rows""")  # left uncommitted
    try:
        params = {"loop": uuid.uuid4(), "skew": 0.0, "host": "h", "pid": "1", "margin": 60.0}
        with conn.transaction():
            row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {loops._BEAT}", params).fetchone()
        assert row is not None
        top = row[0][0]["Plan"]
        blocks = top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0)
        assert blocks < 200, top  # 12 here; unbounded, the walk visited 3,325 pages
    finally:
        applier.rollback()
