"""The loops' reads of cronctl_jobs while an `apply -f` of N new jobs is open (issue 21, v7idx).

One fresh database of $CRONCTL_TEST_PG_URL's server; `tick` (every 1 s) defined by `cronctl apply`;
then a second connection inserts N rows shaped as `apply` writes them (tick's spec, a yearly slot)
and keeps its transaction open. Each loop read: EXPLAIN (ANALYZE, BUFFERS) once and the median/max
of 20 runs, with the transaction open, then again after it commits (the steady state at N jobs).

Usage: python open_apply_reads.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import psycopg  # noqa: E402
from pg_claim import fresh_database, server_url  # noqa: E402

from cronctl.models import FAILED_STATUSES  # noqa: E402
from cronctl.store.pg import loops, unit  # noqa: E402
from tests.pg.clusterhelp import seed  # noqa: E402

READS = {
    "notify_view": ("SELECT name, spec, state FROM cronctl_jobs WHERE state ? 'notify_owed' ORDER BY name", {}),
    "suspects": (f"SELECT name, spec, state FROM cronctl_jobs WHERE {unit._SUSPECT} ORDER BY name",
                 {"failed": sorted(str(s.value) for s in FAILED_STATUSES)}),
    "may_be_late": (f"SELECT name, spec, state FROM cronctl_jobs WHERE {unit._MAY_BE_LATE} ORDER BY name",
                    {"late_by": "now"}),
    "due": (f"SELECT name, spec, state FROM cronctl_jobs WHERE {unit._DUE} ORDER BY name FOR UPDATE SKIP LOCKED",
            {"now": None}),
    "next_instants": (loops._NEXT, {}),
    "job_count": ("SELECT count(*) FROM cronctl_jobs", {}),
}

FILL = """INSERT INTO cronctl_jobs (name, spec, overlap, paused, next_run_at, wake_at, state)
SELECT 'job-' || i, jsonb_set(spec, '{name}', to_jsonb('job-' || i)) || '{"cron": "0 3 1 1 *"}',
       overlap, false, '2027-01-01 03:00+00', '2027-01-01 03:00+00', '{}'
  FROM cronctl_jobs, generate_series(1, %s) AS i WHERE name = 'tick'"""
AUDIT = """INSERT INTO cronctl_audit (event, job, details)
SELECT 'job.added', 'job-' || i, '{"source": "big.yaml"}' FROM generate_series(1, %s) AS i"""


def measure(conn: psycopg.Connection, label: str) -> None:
    print(f"== {label}")
    for name, (sql, params) in READS.items():
        with conn.transaction():
            plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params).fetchall()
            times = []
            for _ in range(20):
                began = time.perf_counter()
                conn.execute(sql, params).fetchall()
                times.append((time.perf_counter() - began) * 1000)
        print(f"-- {name}: median {statistics.median(times):.2f} ms, max {max(times):.2f} ms")
        print("\n".join("   " + row[0] for row in plan))


def main() -> int:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    with server_url() as url, fresh_database(url) as db_url:
        seed(db_url, Path(tempfile.mkdtemp(prefix="cronctl-open-apply-")),
             "jobs:\n  - name: tick\n    every: 1s\n    command: /bin/true\n")
        with psycopg.connect(db_url, autocommit=True) as reader, psycopg.connect(db_url) as writer:
            measure(reader, "1 job, nothing open")
            writer.execute(FILL, (jobs,))
            writer.execute(AUDIT, (jobs,))
            measure(reader, f"1 job committed, {jobs} inserted by a transaction still open")
            writer.commit()
            reader.execute("ANALYZE cronctl_jobs")
            measure(reader, f"{jobs + 1} jobs committed (analyzed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
