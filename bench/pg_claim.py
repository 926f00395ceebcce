"""The PostgreSQL store's run path: database time of claim + dispatch + finish of one run.

With 1,000 and 100,000 job rows present (inserted in one INSERT ... SELECT
generate_series, all due far in the future but one), each round makes that one job due
again (not timed), then times on the client, over loopback, through `PgLeaseStore` (what
`--store` and the loops use: the job rows locked, the pure claim functions, a
`cronctl_runs` row per run): `claim_due` (which scans the due index and claims),
`mark_dispatched` (the gate) and `finish_many`, each one transaction. Prints the median
and p90 of each step and of the three together, per size; then of an idle loop's beat
(`beat`: one registered loop, nothing due).

The server is $CRONCTL_TEST_PG_URL when set, else a throwaway one (tests/helpers/pgserver.py),
stopped at the end; `--fsync` makes that one flush its WAL at every commit, as a
production server does. `--api lease` is the only API (and the default); the option stays
so that command lines written for it keep working.

`--chained N` adds N jobs that run after `job1` (job chains, SPEC §10; no chain running): what
the chain rows' plans cost the run path of a job outside any chain (every claim write and
every unit of a job with dependants reads the chained jobs, by the index on `after`).

`--server-time` also prints the server's time of the three steps per round: the planning
and execution time pg_stat_statements records for their statements (COMMIT included; the
protocol's parse and the network are not in it), reset before each claim. The server must
load the module (`shared_preload_libraries = 'pg_stat_statements'`, `track_planning = on`).

`--runs N` measures each size N times on one database; `--keep` keeps each size's database
for the next invocation (a million rows are filled once), `--drop-kept` drops them. Each
run ends with the targets of issue 21 (server <= 1 ms, client <= 10 ms per round, flat: the
largest size within 1.5x of the smallest) and met/missed.

Usage: python bench/pg_claim.py [--sizes 1000,100000] [--rounds 200] [--runs 1] [--keep] [--drop-kept]
                                [--fsync] [--api lease] [--chained N] [--server-time]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import pgserver  # noqa: E402
import psycopg  # noqa: E402

from cronctl.jobs.state import entry_from, new_state  # noqa: E402
from cronctl.models import JobSpec, RunStatus  # noqa: E402
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner  # noqa: E402
from cronctl.store.leases import RunEnd  # noqa: E402
from cronctl.store.pg.connect import Connection, connect, parse_store_url  # noqa: E402
from cronctl.store.pg.jobs import put_entry  # noqa: E402
from cronctl.store.pg.leases import PgLeaseStore  # noqa: E402
from cronctl.store.pg.loops import LoopIdentity, beat, register  # noqa: E402
from cronctl.store.pg.schema import ensure_schema  # noqa: E402

LEASE = 60.0
KEPT_PREFIX = "cronctl_bench_claim_"
# Issue 21: per round, server time <= 1 ms and client time <= 10 ms; flat from the smallest
# size to the largest (read here as: the largest size's median within 1.5x of the smallest's,
# the ratio issue 21 gives a command); the idle beat flat too.
TARGETS = {"total": 10.0, "server": 1.0}
FLAT = 1.5
SUCCESS = Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=0.01, output_tail="ok\n")


@contextmanager
def server_url(fsync: bool = False) -> Iterator[str]:
    """CRONCTL_TEST_PG_URL's server, else a throwaway one (stopped at the end)."""
    given = os.environ.get("CRONCTL_TEST_PG_URL")
    if given:
        yield given
        return
    server = pgserver.start(fsync=fsync)
    try:
        yield server.url
    finally:
        pgserver.stop(server.data_dir)


@contextmanager
def fresh_database(url: str) -> Iterator[str]:
    name = f"cronctl_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@contextmanager
def kept_database(url: str, name: str | None, fill: Callable[[str], None]) -> Iterator[str]:
    """A fresh database filled by `fill`, dropped at the end; or, with `name` (`--keep`), the
    database of that name: filled once, then reused as it is by the next runs (a million
    rows take minutes to insert on a shared machine). `--drop-kept` drops the kept ones."""
    if name is None:
        with fresh_database(url) as db_url:
            fill(db_url)
            yield db_url
        return
    db_url = url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(url, autocommit=True) as admin:
        filled = admin.execute("SELECT shobj_description(oid, 'pg_database') = 'filled' FROM pg_database"
                               " WHERE datname = %s", (name,)).fetchone()
    if not (filled and filled[0]):  # none yet, or one whose filling was cut short
        drop_database(url, name)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        fill(db_url)
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'COMMENT ON DATABASE "{name}" IS \'filled\'')
    yield db_url


def drop_database(url: str, name: str) -> None:
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_kept(url: str, prefix: str) -> list[str]:
    """Drop every kept database whose name starts with `prefix`; their names."""
    with psycopg.connect(url, autocommit=True) as admin:
        names = [row[0] for row in admin.execute("SELECT datname FROM pg_database WHERE starts_with(datname, %s)",
                                                 (prefix,)).fetchall()]
    for name in names:
        drop_database(url, name)
    return names


def populate_lease(conn: Connection, jobs: int) -> None:
    """`jobs - 1` rows `job1`... of an every-60s job due in a year, with the state and `wake_at`
    the lease store reads; `hot`, the one the rounds fire, is put by each round: `jobs` in all."""
    spec = JobSpec(name="template", command="true", every=60.0).to_dict()
    with conn.transaction():
        conn.execute(
            """INSERT INTO cronctl_jobs (name, spec, overlap, next_run_at, wake_at, state)
               SELECT 'job' || i, jsonb_set(%s::jsonb, '{name}', to_jsonb('job' || i)), 'skip', at, at,
                      jsonb_build_object('next_run_at', to_char(at AT TIME ZONE 'UTC',
                                                                'YYYY-MM-DD"T"HH24:MI:SS.MS"+00:00"'))
                 FROM (SELECT i, clock_timestamp() + interval '365 days' + i * interval '1 second' AS at
                         FROM generate_series(1, %s) AS i) AS rows""", (psycopg.types.json.Jsonb(spec), jobs - 1))
    conn.execute("ANALYZE cronctl_jobs")
    conn.commit()


def populate_chained(conn: Connection, count: int) -> None:
    """`count` rows `dep1`... of jobs after `job1`, as `add --after job1` makes them."""
    spec = JobSpec(name="template", command="true", after=("job1",)).to_dict()
    with conn.transaction():
        conn.execute(
            """INSERT INTO cronctl_jobs (name, spec, overlap, state)
               SELECT 'dep' || i, jsonb_set(%s::jsonb, '{name}', to_jsonb('dep' || i)), 'skip', '{}'::jsonb
                 FROM generate_series(1, %s) AS i""", (psycopg.types.json.Jsonb(spec), count))
    conn.execute("ANALYZE cronctl_jobs")
    conn.commit()


HOT = JobSpec(name="hot", command="true", every=60.0)
OWNER = Owner("bench", os.getpid(), 1.0, "bench-boot")


def one_lease_round(conn: Connection, leases: PgLeaseStore,
                    before_claim: Callable[[], object] | None = None) -> tuple[float, float, float]:
    now = leases.db_now()
    with conn.transaction():
        put_entry(conn, entry_from(HOT, new_state(now, now - timedelta(seconds=1))))
    if before_claim is not None:
        before_claim()
    lease = Lease(time.monotonic() + LEASE, now + timedelta(seconds=LEASE))
    started = time.perf_counter()
    batch = leases.claim_due(now, OWNER, lease)
    claimed = time.perf_counter()
    [run] = batch.claims
    child = Dispatched(run.job, run.run_id, 4242, 1.0, time.monotonic())
    assert leases.mark_dispatched(OWNER, [child], now) == [child]
    dispatched = time.perf_counter()
    [done] = leases.finish_many(OWNER, [RunEnd(run.run_id, SUCCESS, run.job)], now)
    assert not done.fenced
    finished = time.perf_counter()
    return claimed - started, dispatched - claimed, finished - dispatched


class ServerClock:
    """The server's planning + execution milliseconds of one database's statements since the last reset."""

    SUM = """SELECT coalesce(sum(total_plan_time + total_exec_time), 0) FROM pg_stat_statements
              WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                AND query NOT LIKE '%%pg_stat_statements%%'"""

    def __init__(self, db_url: str) -> None:
        self.conn = psycopg.connect(db_url, autocommit=True)
        try:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            self.conn.execute("SELECT pg_stat_statements_reset()")
        except psycopg.Error as error:
            raise SystemExit(f"bench/pg_claim.py --server-time: the server must load pg_stat_statements "
                             f"(shared_preload_libraries): {error}") from None

    def reset(self) -> None:
        self.conn.execute("SELECT pg_stat_statements_reset()")

    def elapsed_ms(self) -> float:
        row = self.conn.execute(self.SUM).fetchone()
        return float(row[0]) if row else 0.0


def measure(url: str, jobs: int, rounds: int, api: str = "lease", chained: int = 0,
            server_time: bool = False, keep: bool = False, runs: int = 1) -> list[dict[str, list[float]]]:
    """Milliseconds of each step over `rounds` rounds at `jobs` rows, `runs` times on one database
    (one dict per run); `api` must be "lease"; `keep`: the database is kept for the next call."""
    if api != "lease":
        raise ValueError(f"bench/pg_claim.py: unknown --api {api!r}: the run path is PgLeaseStore ('lease')")

    def fill(db_url: str) -> None:
        with connect(parse_store_url(db_url)) as conn:
            ensure_schema(conn)
            conn.commit()
        # a plain connection: the store's own has a 5 s deadline on each wait, shorter than
        # the insert of a million rows
        with psycopg.connect(db_url) as filler:
            populate_lease(filler, jobs)
            if chained:
                populate_chained(filler, chained)

    name = f"{KEPT_PREFIX}{jobs}_{chained}" if keep else None
    with kept_database(url, name, fill) as db_url, connect(parse_store_url(db_url)) as conn:
        ensure_schema(conn)  # a kept database of an older schema is brought up to date
        conn.commit()
        leases = PgLeaseStore(conn, "bench-host")
        clock = ServerClock(db_url) if server_time else None
        try:
            return [one_run(conn, leases, rounds, clock) for _ in range(runs)]
        finally:
            if clock is not None:
                clock.conn.close()


def one_run(conn: Connection, leases: PgLeaseStore, rounds: int, clock: ServerClock | None) -> dict[str, list[float]]:
    for _ in range(10):  # warm the caches and the connection
        one_lease_round(conn, leases)
    times: dict[str, list[float]] = {"claim": [], "dispatch": [], "finish": [], "total": []}
    if clock is not None:
        times["server"] = []
    for _ in range(rounds):
        claim, dispatch, end = one_lease_round(conn, leases, clock.reset if clock else None)
        for key, value in (("claim", claim), ("dispatch", dispatch), ("finish", end),
                           ("total", claim + dispatch + end)):
            times[key].append(value * 1000)
        if clock is not None:
            times["server"].append(clock.elapsed_ms())
    times.update(idle_beats(conn, rounds, clock))
    return times


def idle_beats(conn: Connection, rounds: int, clock: ServerClock | None) -> dict[str, list[float]]:
    """Milliseconds of an idle loop's beat (loops.beat: the heartbeat and the next instants, one
    statement), nothing due: the client's, and the server's when `clock` is given."""
    me = LoopIdentity(uuid.uuid4(), "bench-host", "bench-boot", os.getpid(), 1.0)
    register(conn, me, "bench-home")
    for _ in range(10):
        beat(conn, me, 0.0, LEASE)
    times: dict[str, list[float]] = {"beat": [], "beat server": []} if clock else {"beat": []}
    for _ in range(rounds):
        if clock is not None:
            clock.reset()
        started = time.perf_counter()
        beat(conn, me, 0.0, LEASE)
        times["beat"].append((time.perf_counter() - started) * 1000)
        if clock is not None:
            times["beat server"].append(clock.elapsed_ms())
    return times


def verdicts(medians: dict[int, dict[str, float]]) -> list[str]:
    """Each target of issue 21 with the figure and met/missed, from the medians per size."""
    sizes = sorted(medians)
    lines = []
    for step, limit in TARGETS.items():
        for size in sizes:
            if step in medians[size]:
                value = medians[size][step]
                lines.append(f"{step} at {size}: {value:.2f} ms, target <= {limit:g} ms: "
                             f"{'met' if value <= limit else 'missed'}")
    low, high = sizes[0], sizes[-1]
    for step in ("total", "server", "beat", "beat server"):
        if high != low and step in medians[low]:
            ratio = medians[high][step] / medians[low][step]
            lines.append(f"{step} flat {low} -> {high}: {ratio:.2f}x, target <= {FLAT:g}x: "
                         f"{'met' if ratio <= FLAT else 'missed'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--runs", type=int, default=1, help="measure each size this many times, one database")
    parser.add_argument("--fsync", action="store_true", help="a throwaway server that flushes its WAL to disk")
    parser.add_argument("--api", choices=("lease",), default="lease", help="PgLeaseStore, the run path")
    parser.add_argument("--chained", type=int, default=0, help="jobs after job1 beside the others (job chains)")
    parser.add_argument("--server-time", action="store_true", help="also the server's time per round "
                        "(pg_stat_statements, which the server must load)")
    parser.add_argument("--keep", action="store_true", help=f"keep each size's database ({KEPT_PREFIX}...) and "
                        "reuse it in the next run (with $CRONCTL_TEST_PG_URL: a server that outlives this one)")
    parser.add_argument("--drop-kept", action="store_true", help="drop the kept databases and exit")
    args = parser.parse_args()
    with server_url(args.fsync) as url:
        if args.drop_kept:
            print("dropped:", ", ".join(drop_kept(url, KEPT_PREFIX)) or "none")
            return 0
        sizes = [int(s) for s in args.sizes.split(",")]
        results = {size: measure(url, size, args.rounds, args.api, args.chained, args.server_time, args.keep,
                                 args.runs) for size in sizes}
    for run in range(args.runs):
        print(f"\nrun {run + 1} of {args.runs}")
        print(f"{'jobs':>8} {'step':>11} {'median ms':>10} {'p90 ms':>8}")
        medians: dict[int, dict[str, float]] = {}
        for size in sizes:
            times = results[size][run]
            medians[size] = {step: statistics.median(values) for step, values in times.items()}
            for step, values in times.items():
                p90 = statistics.quantiles(values, n=10)[-1]
                print(f"{size:>8} {step:>11} {medians[size][step]:>10.2f} {p90:>8.2f}")
        print("\n".join(verdicts(medians)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
