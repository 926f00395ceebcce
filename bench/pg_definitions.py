"""Definitions on the PostgreSQL store: one job's add/edit/remove at 1,000 and 100,000 jobs, and `apply -f`.

For each size, a fresh database gets that many job rows (one INSERT ... SELECT
generate_series, each row as `apply` writes it). Then, per round:

- in process, through `ops.definitions` and `PgDefinitions` (what the commands call):
  `add_job`, `edit_job` (a new schedule), `remove_job` of one job `bench-one`, each timed
  on the client and split into *database time* (the time inside the driver's calls: every
  statement's round trip, the COPY and the COMMIT) and the rest (Python: validation,
  building the entry);
- the whole command, as a user runs it (`cronctl add`, `cronctl edit`, `cronctl remove`,
  a new process each, `$CRONCTL_STORE` naming the database); and, as the floor of any
  command on this machine, the same commands on the JSON store of an empty home.

Prints medians (and p90) per step and size, and the ratio of each step at the largest
size to the same step at the smallest. Then `apply -f` of a file of `--apply-jobs` new
jobs into an empty database, as a command (median of `--apply-rounds`).

The server is $CRONCTL_TEST_PG_URL when set, else a throwaway one (tests/helpers/pgserver.py),
stopped at the end.

`--before DIR` also runs the same commands of an older source tree (`git archive COMMIT |
tar -x -C DIR`), each size on a database of that tree's schema: the before and after of one run.

Each command is measured twice: with cronctl's bytecode compiled once (as an installed
cronctl runs) and from source (PYTHONDONTWRITEBYTECODE=1 and no bytecode of cronctl's own:
what this machine's environment does to an editable install at every command). Each run
ends with issue 21's targets and met/missed. `--repeat N` measures N times; `--keep` keeps
each size's database for the next run (`--drop-kept` drops them).

Usage: python bench/pg_definitions.py [--sizes 1000,100000] [--rounds 30] [--command-rounds 10]
                                      [--apply-jobs 100000] [--apply-rounds 3] [--before DIR]
                                      [--repeat 1] [--keep] [--drop-kept]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psycopg  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402

from cronctl.clock import SystemClock  # noqa: E402
from cronctl.context import Context  # noqa: E402
from cronctl.jobs.state import new_state  # noqa: E402
from cronctl.models import JobSpec  # noqa: E402
from cronctl.store.pg.backend import PgBackend  # noqa: E402
from cronctl.store.pg.connect import parse_store_url  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
from pg_claim import drop_kept, fresh_database, kept_database, server_url  # noqa: E402

ONE = "bench-one"


def populate(db_url: str, jobs: int, before: Path | None = None) -> None:
    """`jobs` rows `job-1`... as `apply` writes them: the spec of a file's job, a new state.
    The schema is the one of the cronctl that will use it (`before`: an older source tree)."""
    from cronctl.schedule.slots import first_slot

    spec = JobSpec(name="template", command="/usr/local/bin/report --daily", every=3600.0,
                   source="/etc/cronctl/jobs.yaml")
    now = SystemClock().now()
    state = new_state(now, first_slot(spec, now))
    env = {**os.environ, "CRONCTL_HOME": tempfile.mkdtemp(prefix="cronctl-bench-defs-"), "CRONCTL_STORE": db_url}
    if before is not None:
        env["PYTHONPATH"] = str(before)
    cronctl(["list", "--json"], env)  # the schema, brought up to date by the first connection
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            """INSERT INTO cronctl_jobs (name, spec, overlap, next_run_at, wake_at, state)
               SELECT 'job-' || i, jsonb_set(%s::jsonb, '{name}', to_jsonb('job-' || i)), 'skip',
                      %s::timestamptz, %s::timestamptz, %s::jsonb
                 FROM generate_series(1, %s) AS i""",
            (Jsonb(spec.to_dict()), state["next_run_at"], state["next_run_at"], Jsonb(state), jobs))
        conn.execute("VACUUM ANALYZE cronctl_jobs")


class DbTimer:
    """The time spent inside the driver's calls of one connection (statements, COPY, COMMIT)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, conn: Any) -> None:
        timer = self

        def timed(call: Callable[..., Any]) -> Callable[..., Any]:
            def inner(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return call(*args, **kwargs)
                finally:
                    timer.seconds += time.perf_counter() - started
            return inner

        # psycopg's Connection.execute, the cursors' executemany/copy and the transaction's
        # COMMIT all end in these two: the wait for the server's answer.
        conn.wait = timed(conn.wait)


def one_round(ctx: Context, timer: DbTimer) -> dict[str, tuple[float, float]]:
    """(client ms, database ms) of add, edit and remove of one job."""
    from cronctl.ops import definitions as ops

    out: dict[str, tuple[float, float]] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("add", lambda: ops.add_job(ctx, ops.spec_from_options(ONE, {"every": "1h", "command": "true"}))),
        ("edit", lambda: ops.edit_job(ctx, ONE, {"every": "2h"}, [])),
        ("remove", lambda: ops.remove_job(ctx, ONE)),
    ]
    for step, call in steps:
        timer.seconds = 0.0
        started = time.perf_counter()
        call()
        out[step] = ((time.perf_counter() - started) * 1000, timer.seconds * 1000)
    return out


def in_process(db_url: str, rounds: int) -> dict[str, list[tuple[float, float]]]:
    ctx = Context.open(Path(tempfile.mkdtemp(prefix="cronctl-bench-defs-")), store_url=parse_store_url(db_url))
    assert isinstance(ctx.backend, PgBackend)
    timer = DbTimer()
    timer.wrap(ctx.backend.session.conn())
    for _ in range(3):  # warm the connection and the caches
        one_round(ctx, timer)
    times: dict[str, list[tuple[float, float]]] = {"add": [], "edit": [], "remove": []}
    for _ in range(rounds):
        for step, value in one_round(ctx, timer).items():
            times[step].append(value)
    return times


def cronctl(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([*cronctl_bin(), *args], env=env, capture_output=True, text=True, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0:
        raise SystemExit(f"cronctl {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return elapsed


def cronctl_bin() -> list[str]:
    beside = Path(sys.executable).with_name("cronctl")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "cronctl"]


def bytecode(cached: bool) -> dict[str, str]:
    """The environment of a command with cronctl's modules compiled once and read from their
    bytecode (as an installed cronctl runs), or (`cached` False) compiled from source at every
    command, as on this machine: PYTHONDONTWRITEBYTECODE is set and an editable install has no
    bytecode of its own (cronctl's __pycache__ directories are removed first)."""
    import compileall
    import shutil

    import cronctl

    package = Path(cronctl.__file__).parent
    env = dict(os.environ)
    if cached:
        compileall.compile_dir(str(package), quiet=1)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        for cache in package.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def commands(db_url: str | None, rounds: int, before: Path | None = None,
             cached: bool = True) -> dict[str, list[float]]:
    """Each command's milliseconds; `db_url` None: the JSON store of an empty home (the floor:
    the interpreter, the CLI and one small store write, nothing of PostgreSQL); `before`: the
    commands of an older source tree (its directory put first on PYTHONPATH); `cached`: see `bytecode`."""
    env = {**bytecode(cached), "CRONCTL_HOME": tempfile.mkdtemp(prefix="cronctl-bench-defs-"), "NO_COLOR": "1"}
    env.pop("CRONCTL_STORE", None)
    if before is not None:
        env["PYTHONPATH"] = str(before)
    if db_url is not None:
        env["CRONCTL_STORE"] = db_url
    steps = {"add": ["add", ONE, "--every", "1h", "--", "true"], "edit": ["edit", ONE, "--every", "2h"],
             "remove": ["remove", ONE]}
    times: dict[str, list[float]] = {step: [] for step in steps}
    for index in range(rounds + 1):
        for step, args in steps.items():
            elapsed = cronctl(args, env)
            if index:  # the first round warms the page cache
                times[step].append(elapsed)
    return times


def apply_new(url: str, jobs: int, rounds: int) -> list[float]:
    work = Path(tempfile.mkdtemp(prefix="cronctl-bench-defs-"))
    file = work / "jobs.yaml"
    file.write_text("jobs:\n" + "".join(f"  - name: job-{i}\n    every: 1h\n    command: /usr/local/bin/report {i}\n"
                                        for i in range(jobs)))
    times = []
    for _ in range(rounds):
        with fresh_database(url) as db_url:
            env = {**bytecode(True), "CRONCTL_HOME": str(work / uuid.uuid4().hex), "CRONCTL_STORE": db_url}
            cronctl(["list", "--json"], env)  # the schema, created before the clock starts
            times.append(cronctl(["apply", "-f", str(file)], env))
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]


# Issue 21's targets: database time of one job's add/edit/remove at 100,000 jobs; the whole
# command; the same command at the largest size over the smallest; apply -f of 100,000 new jobs.
DB_MS, COMMAND_MS, RATIO, APPLY_S = 20.0, 250.0, 1.5, 20.0
STEPS = ("add", "edit", "remove")


def verdict(what: str, value: float, limit: float, unit: str) -> str:
    return f"{what}: {value:.2f}{unit}, target <= {limit:g}{unit}: {'met' if value <= limit else 'missed'}"


def one_run(url: str, sizes: list[int], args: argparse.Namespace) -> list[str]:
    """One measurement of every size (a kept database each); its lines and verdicts."""
    out = [f"{'jobs':>7} {'step':>7} {'db ms':>7} {'db p90':>7} {'call ms':>8} {'command ms':>11} {'cmd p90':>8}"
           f" {'from source':>12}"]
    results: dict[int, dict[str, tuple[float, float, float]]] = {}
    for size in sizes:
        name = f"cronctl_bench_defs_{size}" if args.keep else None
        with kept_database(url, name, lambda db_url, size=size: populate(db_url, size)) as db_url:
            calls = in_process(db_url, args.rounds)
            whole = commands(db_url, args.command_rounds)
            source = commands(db_url, args.command_rounds, cached=False)
        results[size] = {}
        for step in STEPS:
            db = [d for _, d in calls[step]]
            client = [c for c, _ in calls[step]]
            results[size][step] = (median(db), median(client), median(whole[step]))
            out.append(f"{size:>7} {step:>7} {median(db):>7.2f} {p90(db):>7.2f} {median(client):>8.2f} "
                       f"{median(whole[step]):>11.1f} {p90(whole[step]):>8.1f} {median(source[step]):>12.1f}")
    bytecode(True)  # leave cronctl compiled, as it was found or better
    low, high = sizes[0], sizes[-1]
    out.append("(command ms: cronctl's bytecode cached; from source: PYTHONDONTWRITEBYTECODE=1 and no "
               "bytecode, as this machine runs an editable install)")
    for step in STEPS:
        (_, _, cmd_lo), (db_hi, _, cmd_hi) = results[low][step], results[high][step]
        out.append(verdict(f"{step} database time at {high}", db_hi, DB_MS, " ms"))
        out.append(verdict(f"{step} command at {high}", cmd_hi, COMMAND_MS, " ms"))
        out.append(verdict(f"{step} command {high} / {low}", cmd_hi / cmd_lo, RATIO, "x"))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--command-rounds", type=int, default=10)
    parser.add_argument("--apply-jobs", type=int, default=100000)
    parser.add_argument("--apply-rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=1, help="measure this many times (each size's database kept "
                        "between them with --keep)")
    parser.add_argument("--keep", action="store_true", help="keep each size's database (cronctl_bench_defs_N)")
    parser.add_argument("--drop-kept", action="store_true", help="drop the kept databases and exit")
    parser.add_argument("--before", type=Path, help="an older source tree (git archive of a commit): its commands "
                        "measured beside this one's, on a database of its own schema")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with server_url() as url:
        if args.drop_kept:
            print("dropped:", ", ".join(drop_kept(url, "cronctl_bench_defs_")) or "none")
            return 0
        for run in range(1, args.repeat + 1):
            print(f"\nrun {run} of {args.repeat}")
            print("\n".join(one_run(url, sizes, args)), flush=True)
            if args.before is not None:
                before(url, sizes, args)
            if args.apply_jobs:
                times = apply_new(url, args.apply_jobs, args.apply_rounds)
                runs = ", ".join(f"{t / 1000:.2f}" for t in times)
                print(f"apply -f of {args.apply_jobs} new jobs into an empty store: median "
                      f"{median(times) / 1000:.2f} s (runs: {runs})")
                print(verdict(f"apply -f of {args.apply_jobs} new jobs", median(times) / 1000, APPLY_S, " s"),
                      flush=True)
        floor = commands(None, args.command_rounds)
        print("the same commands on the JSON store of an empty home (the floor of a command): "
              + ", ".join(f"{step} {median(values):.1f} ms" for step, values in floor.items()))
    return 0


def before(url: str, sizes: list[int], args: argparse.Namespace) -> None:
    """The commands of an older tree (`--before`), each size on a database of its schema."""
    for size in sizes:
        with fresh_database(url) as db_url:
            populate(db_url, size, args.before)
            old = commands(db_url, args.command_rounds, args.before)
        print(f"{size:>7} before: " + ", ".join(f"{step} {median(values):.1f} ms" for step, values in old.items()))


if __name__ == "__main__":
    sys.exit(main())
