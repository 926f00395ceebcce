"""The schema: created and upgraded by cronctl, versioned, under a transaction-scoped lock."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timezone

import psycopg
import pytest

from cronctl.store.pg.connect import Connection, connect, parse_store_url
from cronctl.store.pg.schema import (
    MIGRATIONS,
    ODD_JOB,
    SCHEMA_VERSION,
    MigrationError,
    SchemaTooNewError,
    ensure_schema,
    schema_version,
)

TABLES = {"cronctl_schema", "cronctl_jobs", "cronctl_loops", "cronctl_runs", "cronctl_audit", "cronctl_requests",
          "cronctl_meta", "cronctl_chains"}


@pytest.fixture
def conn(pg_url: str) -> Iterator[Connection]:
    with connect(parse_store_url(pg_url)) as connection:
        yield connection


def _tables(conn: Connection) -> set[str]:
    with conn.transaction():
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'").fetchall()
    return {row[0] for row in rows}


def _versions(conn: Connection) -> list[int]:
    with conn.transaction():
        return [row[0] for row in conn.execute("SELECT version FROM cronctl_schema ORDER BY version")]


def test_a_fresh_database_gets_every_table_and_the_current_version(conn: Connection) -> None:
    assert ensure_schema(conn) == SCHEMA_VERSION
    assert _tables(conn) == TABLES
    assert _versions(conn) == list(range(1, SCHEMA_VERSION + 1))
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_migrating_again_changes_nothing(conn: Connection) -> None:
    ensure_schema(conn)
    assert ensure_schema(conn) == SCHEMA_VERSION
    assert _versions(conn) == list(range(1, SCHEMA_VERSION + 1))


def test_a_version_1_database_gains_the_lease_store_columns_and_keeps_its_rows(conn: Connection) -> None:
    assert ensure_schema(conn, MIGRATIONS[:1]) == 1
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_jobs (name, spec, overlap) VALUES ('kept', '{}', 'skip')")
    assert ensure_schema(conn) == SCHEMA_VERSION
    with conn.transaction():
        assert conn.execute("SELECT name FROM cronctl_jobs").fetchall() == [("kept",)]
        assert conn.execute("SELECT key, value FROM cronctl_meta ORDER BY key").fetchall() == [
            ("counters", {}), ("metrics", {})]
        conn.execute("SELECT claim, record FROM cronctl_runs")


def test_an_older_database_is_upgraded_one_version_at_a_time(conn: Connection) -> None:
    ensure_schema(conn)
    upgraded = (*MIGRATIONS, ("ALTER TABLE cronctl_jobs ADD COLUMN note text",))
    assert ensure_schema(conn, upgraded) == SCHEMA_VERSION + 1
    with conn.transaction():
        conn.execute("SELECT note FROM cronctl_jobs")
    assert _versions(conn)[-1] == SCHEMA_VERSION + 1


def test_a_failed_upgrade_leaves_the_database_as_it_was(conn: Connection) -> None:
    ensure_schema(conn)
    broken = (*MIGRATIONS, ("CREATE TABLE cronctl_half (x int)", "ALTER TABLE cronctl_nowhere ADD COLUMN y int"))
    with pytest.raises(MigrationError, match=rf"from version {SCHEMA_VERSION} to {SCHEMA_VERSION + 1} failed"):
        ensure_schema(conn, broken)
    assert "cronctl_half" not in _tables(conn)
    with conn.transaction():
        assert schema_version(conn) == SCHEMA_VERSION


def test_a_schema_newer_than_the_code_is_refused_with_a_clear_error(conn: Connection) -> None:
    ensure_schema(conn)
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_schema (version) VALUES (%s)", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaTooNewError) as caught:
        ensure_schema(conn)
    assert f"version {SCHEMA_VERSION + 1}, newer than this cronctl knows ({SCHEMA_VERSION})" in str(caught.value)
    assert "upgrade cronctl" in str(caught.value)


def test_processes_migrating_at_once_apply_each_version_once(pg_url: str) -> None:
    """Eight connections start migrating the same empty database at the same instant."""
    url = parse_store_url(pg_url)
    start = threading.Barrier(8)
    results: list[int | BaseException] = []

    def migrate() -> None:
        try:
            with connect(url) as own:
                start.wait()
                results.append(ensure_schema(own))
        except BaseException as exc:  # collected: the assertion below names it
            results.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert results == [SCHEMA_VERSION] * 8
    with connect(url) as conn:
        assert _versions(conn) == list(range(1, SCHEMA_VERSION + 1))
        assert _tables(conn) == TABLES


def test_the_schema_lock_is_gone_with_the_transaction(conn: Connection) -> None:
    ensure_schema(conn, (*MIGRATIONS, ("SELECT 1",)))
    with conn.transaction():
        held = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                            " AND pid = pg_backend_pid()").fetchone()
    assert held == (0,)


def test_version_5_upgrades_a_version_4_database_to_chain_runs(conn: Connection) -> None:
    """A database of the schema before chains: its runs table refused the `chain` trigger and
    the `skipped` state (what `store import-json` of a home with chain history hit)."""
    assert ensure_schema(conn, MIGRATIONS[:4]) == 4
    insert = ("INSERT INTO cronctl_runs (run_id, job, slot, trigger, exclusive, state)"
              " VALUES ('r1', 'b', now(), 'chain', false, 'skipped')")
    with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
        conn.execute(insert)
    assert ensure_schema(conn, MIGRATIONS[:5]) == 5
    with conn.transaction():
        conn.execute(insert)
    assert "cronctl_chains" in _tables(conn)


def _upgraded_with_jobs(conn: Connection, version: int, state_of_a: str) -> None:
    """A database of the version before `version` holding jobs `a` (of state `state_of_a`) and
    `b`, upgraded to `version`."""
    assert ensure_schema(conn, MIGRATIONS[:version - 1]) == version - 1
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_jobs (name, spec, overlap, state)"
                     " VALUES ('a', '{}', 'skip', %s), ('b', '{}', 'skip', '{}')", (state_of_a,))
    assert ensure_schema(conn, MIGRATIONS[:version]) == version


def test_version_6_adds_the_read_indexes_to_a_version_5_database_with_its_rows(conn: Connection) -> None:
    """Issue 21: `list NAME-PREFIX` and `status --stale` read by index; a filled store gains them."""
    _upgraded_with_jobs(conn, 6, '{"last_status": "error"}')
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        odd = conn.execute("SELECT name FROM cronctl_jobs WHERE " + ODD_JOB).fetchall()
        indexes = {row[0] for row in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'cronctl_jobs'")}
    assert odd == [("a",)] and {"cronctl_jobs_prefix", "cronctl_jobs_odd"} <= indexes


def test_version_7_adds_the_loop_read_index_to_a_version_6_database_with_its_rows(conn: Connection) -> None:
    """Issue 21: the notify worker's read of the jobs owing a notification is a range of an index."""
    from cronctl.store.pg.schema import OWES_NOTIFY

    _upgraded_with_jobs(conn, 7, '{"notify_owed": {"k": {}}}')
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        owed = conn.execute("SELECT name FROM cronctl_jobs WHERE " + OWES_NOTIFY).fetchall()
        used = conn.execute("EXPLAIN SELECT name FROM cronctl_jobs WHERE " + OWES_NOTIFY).fetchall()
    assert owed == [("a",)] and "cronctl_jobs_owed" in " ".join(row[0] for row in used)


def test_version_10_opens_a_version_9_databases_units_in_one_call(conn: Connection) -> None:
    """Issue 21: V10 adds the one-call openings; a filled V9 store's rows are found by them."""
    from cronctl.store.pg import functions

    _upgraded_with_jobs(conn, 10, '{"last_status": "success"}')
    with conn.transaction():
        opened = functions.open_named(conn, ["a", "b"], [])
    assert opened is not None and [row[0] for row in opened.rows] == ["a", "b"]
    assert opened.rows[0][2] == {"last_status": "success"}


def test_version_9_keeps_a_version_8_databases_live_and_ended_runs_and_odd_jobs(conn: Connection) -> None:
    """Issue 21: V9 moves what the partial indexes read into stored columns computed from `state`
    (a run's `live`, a job's `odd` and `owes`). A filled V8 store keeps every row and finds each
    again by the new indexes; one live run of an exclusive job is still all the database allows."""
    from cronctl.store.pg import functions, stale
    from cronctl.store.pg.schema import ODD_ROW, OWING_ROW

    assert ensure_schema(conn, MIGRATIONS[:8]) == 8
    run = ("INSERT INTO cronctl_runs (run_id, job, slot, trigger, exclusive, state, claim, lease_expires_at)"
           " VALUES (%s, %s, clock_timestamp(), 'schedule', %s, %s, %s, now())")
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_jobs (name, spec, overlap, state) VALUES"
                     " ('failed', '{}', 'skip', '{\"last_status\": \"error\"}'),"
                     " ('owing', '{}', 'skip', '{\"notify_owed\": {\"k\": {}}}'),"
                     " ('busy', '{}', 'skip', '{\"last_status\": \"success\"}'),"
                     " ('plain', '{}', 'allow', '{\"last_status\": \"success\"}')")
        conn.execute(run, ("claimed-1", "busy", True, "claimed", '{"run_id": "claimed-1"}'))
        conn.execute(run, ("running-1", "plain", False, "running", '{"run_id": "running-1"}'))
        conn.execute(run, ("ended-1", "busy", True, "success", None))
    assert ensure_schema(conn, MIGRATIONS[:9]) == 9
    with conn.transaction():
        conn.execute("SET LOCAL enable_seqscan = off")
        live = conn.execute("SELECT run_id FROM cronctl_runs WHERE live ORDER BY run_id").fetchall()
        odd = conn.execute(f"SELECT name FROM cronctl_jobs WHERE {ODD_ROW}").fetchall()
        owing = conn.execute(f"SELECT name FROM cronctl_jobs WHERE {OWING_ROW}").fetchall()
        used = " ".join(row[0] for query in (f"SELECT name FROM cronctl_jobs WHERE {ODD_ROW}",
                                             f"SELECT name FROM cronctl_jobs WHERE {OWING_ROW}",
                                             "SELECT job FROM cronctl_runs WHERE live")
                        for row in conn.execute(f"EXPLAIN {query}").fetchall())
        claims = [(row[0], row[3]) for row in functions.lock_named(conn, ["busy", "plain"]) if row[3]]
        options = dict(conn.execute("SELECT relname, reloptions FROM pg_class"
                                    " WHERE relname IN ('cronctl_jobs', 'cronctl_runs')").fetchall())
        analyzed = conn.execute("SELECT attname FROM pg_stats WHERE attname IN ('live', 'odd', 'owes')"
                                " ORDER BY attname").fetchall()
    assert live == [("claimed-1",), ("running-1",)] and odd == [("failed",)] and owing == [("owing",)]
    assert {"cronctl_jobs_odd", "cronctl_jobs_owed", "cronctl_runs_live"} <= set(used.replace("(", " ").split())
    assert claims == [("busy", "claimed-1"), ("plain", "running-1")]
    assert options == {"cronctl_jobs": ["fillfactor=80"], "cronctl_runs": ["fillfactor=90"]}
    assert analyzed == [("live",), ("odd",), ("owes",)]  # the planner knows the new columns at once
    with conn.transaction():
        entries, _ = stale.may_be_stale(conn, datetime.now(timezone.utc))
    assert sorted(entries) == ["busy", "failed", "plain"]
    # exclusivity: a second live run of `busy` is refused while its claimed one lives, not after
    with pytest.raises(psycopg.errors.UniqueViolation, match="cronctl_runs_alone"), conn.transaction():
        conn.execute(run, ("claimed-2", "busy", True, "running", '{}'))
    with conn.transaction():
        conn.execute("UPDATE cronctl_runs SET state = 'running' WHERE run_id = 'claimed-1'")  # still live
    with pytest.raises(psycopg.errors.UniqueViolation, match="cronctl_runs_alone"), conn.transaction():
        conn.execute(run, ("claimed-2", "busy", True, "claimed", '{}'))
    with conn.transaction():
        conn.execute("UPDATE cronctl_runs SET state = 'lost' WHERE run_id = 'claimed-1'")
        conn.execute(run, ("claimed-2", "busy", True, "claimed", '{}'))
    with pytest.raises(psycopg.errors.GeneratedAlways), conn.transaction():
        conn.execute("UPDATE cronctl_runs SET live = false WHERE run_id = 'claimed-2'")  # no writer can forge it


def test_an_upgrade_longer_than_the_round_trip_deadline_completes_and_the_deadline_returns(pg_url: str) -> None:
    """V9 rewrites the jobs and runs tables: 6 s at a million jobs, past the 5 s deadline of a
    round trip. The upgrade's round trips get deadline.MIGRATION_DEADLINE_S; the others keep theirs."""
    from cronctl.store.pg.deadline import StoreDeadlineError

    with connect(parse_store_url(pg_url), deadline_s=0.5) as short:
        assert ensure_schema(short, (*MIGRATIONS, ("SELECT pg_sleep(1)",))) == SCHEMA_VERSION + 1
        with pytest.raises(StoreDeadlineError), short.transaction():
            short.execute("SELECT pg_sleep(1)")
