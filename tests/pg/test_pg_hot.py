"""Schema V9 (issue 21): the run path's updates write no index they need not (HOT), and a job's
live runs are read without visiting the versions its ended runs left behind.

PostgreSQL writes a row version without index entries (a HOT update) only when no column an
index reads (key, expression or partial-index predicate) changes value and the version fits
on its page. Before V9 no update of the run path was HOT: the partial indexes read `state`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from psycopg.types.json import Jsonb

from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec, RunStatus
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.leases import RunEnd
from cronctl.store.pg import functions
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.leases import PgLeaseStore
from tests.pg.pghelp import db_now, one, open_named_rows

OWNER = Owner("hot", 4001, 1.0, "boot-hot")
JOB = JobSpec(name="hot", command="true", every=60.0)
SUCCESS = Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=0.01, output_tail="ok\n")
TABLES = ("cronctl_jobs", "cronctl_runs")


def _updates(conn: Connection) -> dict[str, tuple[int, int]]:
    """(updated, HOT-updated) rows of the jobs and runs tables, as the statistics hold them."""
    with conn.transaction():
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute("SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                            " WHERE relname = ANY(%s)", (list(TABLES),)).fetchall()
    return {name: (int(updated), int(hot)) for name, updated, hot in rows}


def _one_run(conn: Connection, leases: PgLeaseStore) -> None:
    """What the loop writes for one run: its claim, its dispatch, its finish (three units)."""
    now = db_now(conn)
    with conn.transaction():
        put_entry(conn, entry_from(JOB, new_state(now, now - timedelta(seconds=1))))
    lease = Lease(time.monotonic() + 60, now + timedelta(seconds=60))
    [run] = leases.claim_due(now, OWNER, lease).claims
    child = Dispatched(run.job, run.run_id, 4242, 1.0, time.monotonic())
    assert leases.mark_dispatched(OWNER, [child], now) == [child]
    assert leases.renew(OWNER, {run.run_id: run.job}, Lease(time.monotonic() + 90, now + timedelta(seconds=90))) == []
    [done] = leases.finish_many(OWNER, [RunEnd(run.run_id, SUCCESS, run.job)], now)
    assert not done.fenced


def _flushed(writer: Connection, reader: Connection, before: dict[str, tuple[int, int]],
             updated: int) -> dict[str, tuple[int, int]]:
    """The statistics once the writer's updates reached them (a backend reports them when idle)."""
    writer.execute("SELECT pg_stat_force_next_flush()")
    writer.commit()
    deadline = time.monotonic() + 10
    while True:
        now = _updates(reader)
        if sum(now[t][0] - before.get(t, (0, 0))[0] for t in TABLES) >= updated or time.monotonic() > deadline:
            return now
        time.sleep(0.1)


def test_a_dispatch_a_renewal_and_a_finish_write_no_index_they_need_not(
        connections: Callable[[], Connection]) -> None:
    """Of one run's writes, only the claim's job row (its next slot moves: the due index must
    follow it) and the finish's run row (it leaves the live indexes, joins the ended one) are
    not HOT. Before V9 none was."""
    writer, reader = connections(), connections()
    leases = PgLeaseStore(writer, "host-a")
    _one_run(writer, leases)  # the job row exists; its first runs's writes are the same
    before = _flushed(writer, reader, {}, 0)
    for _ in range(3):
        _one_run(writer, leases)
    after = _flushed(writer, reader, before, 3 * 7)
    jobs = (after["cronctl_jobs"][0] - before["cronctl_jobs"][0], after["cronctl_jobs"][1] - before["cronctl_jobs"][1])
    runs = (after["cronctl_runs"][0] - before["cronctl_runs"][0], after["cronctl_runs"][1] - before["cronctl_runs"][1])
    # A version that does not fit on its page is never HOT (fillfactor makes it rare, not
    # impossible: the table here is a few pages): so "at most one miss" below, where V8 had
    # every update of these tables written to every index.
    # jobs: per run, the test's own re-arm (put_entry) and the claim move the next slot; the
    # dispatch and the finish are HOT
    assert jobs[1] >= 3 * 2 - 1 and jobs[0] - jobs[1] <= 3 * 2 + 1, jobs
    # runs: per run, the dispatch and the renewal are HOT, the finish is not
    assert runs[0] == 3 * 3 and 3 * 2 - 1 <= runs[1] <= 3 * 2, runs


def churn(conn: Connection, others: int = 200, ended: int = 300) -> None:
    """`others` jobs with a live run each; job `j` with `ended` runs claimed and ended one after
    the other (about 600 bytes a row, as a real run's), no VACUUM since; then ANALYZE."""
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_jobs (name, spec, overlap) VALUES ('j', %s, 'skip')",
                     (Jsonb({"name": "j", "command": "true"}),))
    claim = Jsonb({"owner": {"pid": 1}, "padding": "x" * 400})
    insert = ("INSERT INTO cronctl_runs (run_id, job, slot, trigger, exclusive, state, claim)"
              " VALUES (%s, %s, clock_timestamp(), 'schedule', true, 'running', %s)")
    with conn.transaction():
        for n in range(others):
            conn.execute(insert, (f"other{n}", f"other{n}", claim))
    for n in range(ended):
        with conn.transaction():
            conn.execute(insert, (f"r{n}", "j", claim))
        with conn.transaction():
            conn.execute("UPDATE cronctl_runs SET state = 'success', record = claim, claim = NULL WHERE run_id = %s",
                         (f"r{n}",))
    conn.execute("ANALYZE cronctl_runs")
    conn.commit()


@pytest.mark.parametrize("lock_named", [functions.lock_named, open_named_rows], ids=["steps", "in-one"])
def test_a_jobs_live_runs_are_read_without_visiting_other_runs(
        conn: Connection, lock_named: Callable[[Connection, list[str]], list[functions.LIVE_ROWS]]) -> None:
    """The run path's read of a job's live runs (every unit) visits a page or two: not the live
    runs of the other jobs (V8's index of live runs was keyed by a column no writer sets), nor
    the versions its own ended runs left (the index holds an entry of each until VACUUM; a plain
    index scan marks them dead as it passes, a bitmap scan visited each at every read), nor the
    whole table (V10: a generic plan of a small table read it whole)."""
    churn(conn)
    visited = []
    # A read marks the dead entries it passes once no transaction could still see them (another
    # test's open transaction may hold that back a moment): the next read then skips them.
    for _ in range(20):
        with conn.transaction():
            seen = one(conn, "SELECT pg_stat_get_xact_blocks_fetched('cronctl_runs'::regclass)")
            rows = lock_named(conn, ["j"])
            visited.append(one(conn, "SELECT pg_stat_get_xact_blocks_fetched('cronctl_runs'::regclass)") - seen)
        if visited[-1] <= 3:
            break
        time.sleep(0.1)
    assert [row[0] for row in rows] == ["j"]
    assert visited[-1] <= 3, visited  # 500 runs fill about 90 pages of the table
