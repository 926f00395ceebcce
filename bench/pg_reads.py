"""The read commands on the PostgreSQL store at N jobs: `status --stale`, `list`, `show`, `history`.

A fresh database gets `--jobs` job rows (`job-1`..., one INSERT ... SELECT, each row as
`apply` writes it: bench/pg_definitions.py's `populate`), then the job `hot` gets
`--runs` finished runs through `PgLeaseStore` (claim, dispatch, finish: what the loops
write; bench/pg_claim.py's round), so `history hot` reads real run rows. Each command is
then run as a user runs it (a new process, `--store URL`), `--rounds` times after one
warm-up, beside `cronctl --version` (the floor: the interpreter and the CLI, no store).
Prints the median and p90 of each, and the median over the floor's.

`list NAME-PREFIX` lists `job-1999` and `job-19990`...`job-19999` (11 jobs); `list` (every
job) is measured beside it, with no target. Each run ends with issue 21's target (each of
`status --stale`, `list NAME-PREFIX`, `show`, `history` <= 500 ms) and met/missed.

`--repeat N` measures N times on one database; `--keep` keeps the database for the next
invocation (`--drop-kept` drops it), as bench/pg_claim.py does.

The server is $CRONCTL_TEST_PG_URL when set, else a throwaway one (tests/helpers/pgserver.py).

Usage: python bench/pg_reads.py [--jobs 100000] [--rounds 5] [--runs 20] [--repeat 1] [--keep] [--drop-kept]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pg_claim import drop_kept, kept_database, one_lease_round  # noqa: E402
from pg_definitions import cronctl_bin, median, p90, populate, server_url  # noqa: E402

from cronctl.store.pg.connect import connect, parse_store_url  # noqa: E402
from cronctl.store.pg.leases import PgLeaseStore  # noqa: E402


def add_runs(db_url: str, runs: int) -> None:
    """`runs` finished runs of the job `hot`, written as a loop writes them."""
    with connect(parse_store_url(db_url)) as conn:
        leases = PgLeaseStore(conn, "bench-host")
        for _ in range(runs):
            one_lease_round(conn, leases)


def cronctl(args: list[str], env: dict[str, str]) -> float:
    """Milliseconds of one command; exit 0, or 3 (something stale: no loop runs here)."""
    started = time.perf_counter()
    done = subprocess.run([*cronctl_bin(), *args], env=env, capture_output=True, text=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode not in (0, 3):
        raise SystemExit(f"cronctl {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return elapsed


def time_commands(db_url: str, jobs: int, rounds: int) -> dict[str, list[float]]:
    env = {**os.environ, "CRONCTL_HOME": tempfile.mkdtemp(prefix="cronctl-bench-reads-"), "NO_COLOR": "1",
           "COLUMNS": "120"}
    env.pop("CRONCTL_STORE", None)
    # as an installed cronctl runs: its modules' bytecode cached (the warm-up round writes it),
    # not compiled from source at every command
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    store = ["--store", db_url]
    steps = {
        "--version (floor)": ["--version"],
        "status --stale": [*store, "status", "--stale"],
        "list job-1999": [*store, "list", "job-1999"],
        "show job-1": [*store, "show", "job-1"],
        "history hot": [*store, "history", "hot"],
        f"list ({jobs} jobs)": [*store, "list"],
    }
    times: dict[str, list[float]] = {step: [] for step in steps}
    for index in range(rounds + 1):
        for step, args in steps.items():
            elapsed = cronctl(args, env)
            if index:  # the first round warms the page cache and the server's buffers
                times[step].append(elapsed)
    return times


KEPT_PREFIX = "cronctl_bench_reads_"
TARGET_MS = 500.0  # issue 21: each read command at 100,000 jobs on PostgreSQL
TARGETED = ("status --stale", "list job-1999", "show job-1", "history hot")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20, help="finished runs of `hot` for `history`")
    parser.add_argument("--repeat", type=int, default=1, help="measure this many times, one database")
    parser.add_argument("--keep", action="store_true", help=f"keep the database ({KEPT_PREFIX}N) for the next run")
    parser.add_argument("--drop-kept", action="store_true", help="drop the kept databases and exit")
    args = parser.parse_args()

    def fill(db_url: str) -> None:
        populate(db_url, args.jobs)
        add_runs(db_url, args.runs)

    with server_url() as url:
        if args.drop_kept:
            print("dropped:", ", ".join(drop_kept(url, KEPT_PREFIX)) or "none")
            return 0
        name = f"{KEPT_PREFIX}{args.jobs}" if args.keep else None
        with kept_database(url, name, fill) as db_url:
            runs = [time_commands(db_url, args.jobs, args.rounds) for _ in range(args.repeat)]
    for index, times in enumerate(runs, 1):
        floor = median(times["--version (floor)"])
        print(f"\nrun {index} of {args.repeat}: {args.jobs} jobs on PostgreSQL, {args.rounds} rounds, "
              "each command a new process")
        print(f"{'command':>22} {'median ms':>10} {'p90 ms':>8} {'x floor':>8}")
        for step, values in times.items():
            print(f"{step:>22} {median(values):>10.1f} {p90(values):>8.1f} {median(values) / floor:>8.2f}")
        for step in TARGETED:
            value = median(times[step])
            print(f"{step} at {args.jobs}: {value:.0f} ms, target <= {TARGET_MS:.0f} ms: "
                  f"{'met' if value <= TARGET_MS else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
