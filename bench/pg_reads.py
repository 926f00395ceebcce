"""The read commands on the PostgreSQL store at N jobs: `status --stale`, `list`, `show`, `history`.

A fresh database gets `--jobs` job rows (`job-1`..., one INSERT ... SELECT, each row as
`apply` writes it: bench/pg_definitions.py's `populate`), then the job `hot` gets
`--runs` finished runs through `PgLeaseStore` (claim, dispatch, finish: what the loops
write; bench/pg_claim.py's round), so `history hot` reads real run rows. Each command is
then run as a user runs it (a new process, `--store URL`), `--rounds` times after one
warm-up, beside `cronctl --version` (the floor: the interpreter and the CLI, no store).
Prints the median and p90 of each, and the median over the floor's.

`list NAME-PREFIX` (issue 21) is measured as `list`: the command takes no name argument,
so it lists every job.

The server is $CRONCTL_TEST_PG_URL when set, else a throwaway one (tests/helpers/pgserver.py).

Usage: python bench/pg_reads.py [--jobs 100000] [--rounds 5] [--runs 20]
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

from pg_claim import one_lease_round  # noqa: E402
from pg_definitions import cronctl_bin, fresh_database, median, p90, populate, server_url  # noqa: E402

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
        f"list ({jobs} jobs)": [*store, "list"],
        "show job-1": [*store, "show", "job-1"],
        "history hot": [*store, "history", "hot"],
    }
    times: dict[str, list[float]] = {step: [] for step in steps}
    for index in range(rounds + 1):
        for step, args in steps.items():
            elapsed = cronctl(args, env)
            if index:  # the first round warms the page cache and the server's buffers
                times[step].append(elapsed)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20, help="finished runs of `hot` for `history`")
    args = parser.parse_args()
    with server_url() as url, fresh_database(url) as db_url:
        populate(db_url, args.jobs)
        add_runs(db_url, args.runs)
        times = time_commands(db_url, args.jobs, args.rounds)
    floor = median(times["--version (floor)"])
    print(f"{args.jobs} jobs on PostgreSQL, {args.rounds} rounds, each command a new process")
    print(f"{'command':>22} {'median ms':>10} {'p90 ms':>8} {'x floor':>8}")
    for step, values in times.items():
        print(f"{step:>22} {median(values):>10.1f} {p90(values):>8.1f} {median(values) / floor:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
