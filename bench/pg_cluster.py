"""The PostgreSQL store side by side (issue 11, item 7): lateness, claim cost, idle, takeover, reconnect.

One throwaway PostgreSQL server (tests/helpers/pgserver.py, with pg_stat_statements loaded when
the contrib module is installed) serves every part; each part works in a fresh database
of it, so no part sees another's rows or commits.

- lateness: K jobs due at the same instant, the command of bench/lateness.py
  (`date "+%s.%N NAME" >> LEDGER`), lateness = the child's first `date` - the slot.
  cronctl on PostgreSQL with 1 and 3 loops (each its own host, $CRONCTL_HOST_ID), next
  to the JSON store (lateness.run_cronctl), APScheduler 3 with its SQLAlchemy job store
  on the same server (one scheduler: APScheduler 3 cannot share a job store between
  schedulers) and APScheduler 4 with 3 schedulers on one SQLAlchemy data store and a
  psycopg event broker on the same server. Missed = (job, instant) pairs with no start,
  duplicates = extra starts of a pair, both read from the ledger every child appends to.
  --profile: for cronctl, where the CPU went from each instant to its p99 start (the
  loops, PostgreSQL, the rest: bench/burst_profile.py).
- claim: claim + dispatch + finish of one run through PgLeaseStore (bench/pg_claim.py
  --api lease) with 1k, 10k and 100k job rows.
- idle: 1,000 jobs due far in the future, 1 and 3 loops; transactions per second per loop
  (pg_stat_database.xact_commit of that database) and CPU % of a core per loop (/proc).
- takeover: host A (--lease 10s) running a long job dies (kill -9 of the loop and its
  child); time until host B's `claim.reclaimed` row. Same host: the loop alone is
  killed and started again; time until its `claim.reclaimed` (owner_dead) row.
- reconnect: a fast restart of the server, down 3 s; time from the server accepting
  connections again to the loop's next heartbeat.

Durations of takeover and reconnect are measured on the database clock (audit rows and
heartbeats are stamped with clock_timestamp()), so polling adds nothing to them.

APScheduler 4 is a pre-release that conflicts with APScheduler 3 in one environment: it is
installed into its own directory (--aps4-dir, default under the system temp dir; with
--install-peers, `pip install --target`) and run with that directory on PYTHONPATH.

Usage: python bench/pg_cluster.py [--only lateness|claim|idle|takeover|reconnect] [--ks 100,500]
       [--rounds 3] [--interval 10] [--sizes 1000,10000,100000] [--claim-rounds 100]
       [--idle-seconds 30] [--trials 3] [--install-peers] [--results DIR] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import burst_profile  # noqa: E402 - the scripts beside this one
import lateness  # noqa: E402
import pg_claim  # noqa: E402 - puts the repository on the path
from tests.helpers import pgserver  # noqa: E402
import psycopg  # noqa: E402
from _common import (  # noqa: E402
    PYTHON,
    ensure_peers,
    fmt,
    machine_note,
    median,
    new_workdir,
    pct,
    proc_cpu_seconds,
    save_results,
    stop_loop,
    table,
    wait_for,
)

from cronctl.store.pg.connect import connect, parse_store_url  # noqa: E402
from cronctl.store.pg.schema import ensure_schema  # noqa: E402
from tests.helpers.loophelp import processes_with_run_id  # noqa: E402
from tests.pg.clusterhelp import seed, start_host_loop  # noqa: E402

PARTS = ("lateness", "claim", "idle", "takeover", "reconnect")
LEAD_S = 4.0  # an instant is measured only when every loop has beaten at least this long before it
APS4_PINS = ("apscheduler[sqlalchemy]==4.0.0a6", "sniffio")  # sniffio: imported by its data store, not declared
TAKEOVER_LEASE_S = 10.0
MARGIN_S = 5.0  # cronctl/loop/cluster.py LEASE_MARGIN_S: what SPEC §9 allows past a lease
TICK_S = 1.0


# --- the server ------------------------------------------------------------------------------


@dataclass
class Bench:
    """The throwaway server every part uses, and whether pg_stat_statements is loaded."""

    server: pgserver.Server
    statements: bool

    @property
    def url(self) -> str:
        return self.server.url

    @contextmanager
    def database(self) -> Iterator[str]:
        with pg_claim.fresh_database(self.url) as db_url:
            yield db_url


def start_server() -> Bench:
    server = pgserver.start()
    try:
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        pgserver.restart(server, "fast")
        with psycopg.connect(server.url, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return Bench(server, True)
    except (psycopg.Error, pgserver.ServerUnavailable):
        return _without_statements(server)


def _without_statements(server: pgserver.Server) -> Bench:
    """pg_stat_statements is not installed (postgresql-contrib): the server without it."""
    with psycopg.connect(server.url, autocommit=True) as admin:
        admin.execute("ALTER SYSTEM RESET shared_preload_libraries")
    pgserver.restart(server, "fast")
    return Bench(server, False)


def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(sql, params).fetchall()


def scalar(url: str, sql: str, *params: Any) -> Any:
    found = query(url, sql, *params)
    return found[0][0] if found else None


def db_name(db_url: str) -> str:
    return db_url.rsplit("/", 1)[1]


SCRATCH: list[Path] = []  # every work directory of this run, removed at its end


def workdir(prefix: str) -> Path:
    path = new_workdir(prefix)
    SCRATCH.append(path)
    return path


# --- loops as hosts ------------------------------------------------------------------------------


def start_loops(db_url: str, work: Path, count: int, *args: str, first: int = 0) -> list[subprocess.Popen[bytes]]:
    return [start_host_loop(work / f"h{index}", db_url, f"h{index}", *args) for index in range(first, first + count)]


def wait_beating(db_url: str, count: int, timeout: float = 60.0) -> None:
    """`count` loops registered, not stopped, each beaten within the last tick and a half."""
    wait_for(lambda: scalar(db_url, "SELECT count(*) FROM cronctl_loops WHERE stopped_at IS NULL"
                                    " AND heartbeat_at > clock_timestamp() - interval '1.5 seconds'"
                                    " AND heartbeat_at > started_at + interval '0.5 second'") >= count,
             timeout, interval=0.1)


def stop_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        stop_loop(proc)


def kill_runs(db_url: str) -> None:
    """Children a killed loop left behind (its long job): never outlive the bench."""
    for (run_id,) in query(db_url, "SELECT run_id FROM cronctl_runs"):
        for pid in processes_with_run_id(run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# --- lateness ------------------------------------------------------------------------------------


def tally(ledger: Path, instants: list[float], k: int) -> dict[str, int]:
    """Missed and duplicate (job, instant) pairs of a ledger, instants as lateness.py assigns them."""
    pairs: Counter[tuple[str, float]] = Counter()
    for started, name in lateness.read_ledger(ledger):
        base = max((t for t in instants if t <= started + 0.0005), default=None)
        if base is not None:
            pairs[(name, base)] += 1
    return {"missed": k * len(instants) - len(pairs), "duplicates": sum(n - 1 for n in pairs.values())}


@contextmanager
def ledger_tap(k: int) -> Iterator[dict[str, int]]:
    """lateness.py's runners delete their ledger when done: this reads it first, through the
    one function every runner calls with the ledger and the instants."""
    seen: dict[str, int] = {}
    original = lateness.lateness_by_instant

    def tapped(ledger: Path, instants: list[float]) -> list[float]:
        seen.update(tally(ledger, instants, k))
        return original(ledger, instants)

    lateness.lateness_by_instant = tapped
    try:
        yield seen
    finally:
        lateness.lateness_by_instant = original


SQLITE_STORE = '"sqlite:///" + sys.argv[8]'
PG_STORE = '__import__("os").environ["PG_CLUSTER_APS3_URL"]'


@contextmanager
def aps3_on(url: str) -> Iterator[None]:
    """lateness.py's APScheduler 3 driver with its SQLAlchemy job store on `url` instead of SQLite."""
    original = lateness.APS_DRIVER
    assert SQLITE_STORE in original, "lateness.APS_DRIVER changed: update pg_cluster.aps3_on"
    lateness.APS_DRIVER = original.replace(SQLITE_STORE, PG_STORE)
    os.environ["PG_CLUSTER_APS3_URL"] = url.replace("postgresql://", "postgresql+psycopg://", 1)
    try:
        yield
    finally:
        lateness.APS_DRIVER = original
        os.environ.pop("PG_CLUSTER_APS3_URL", None)


def instants_after(first: float, interval: float, ready: float, rounds: int) -> list[float]:
    """`rounds` grid slots from `first`, the earliest at least LEAD_S after `ready`."""
    skip = max(0, int((ready + LEAD_S - first) // interval) + 1) if ready + LEAD_S > first else 0
    return [first + (skip + r) * interval for r in range(rounds)]


class Samplers:
    """lateness.Sampler over several processes: CPU seconds summed, threads the largest."""

    def __init__(self, pids: Sequence[int]) -> None:
        self.samplers = [lateness.Sampler(pid) for pid in pids]
        self._stack = ExitStack()

    def __enter__(self) -> Samplers:
        for sampler in self.samplers:
            self._stack.enter_context(sampler)
        return self

    def __exit__(self, *_: object) -> None:
        self._stack.close()
        self.cpu = sum(s.cpu for s in self.samplers)
        self.max_threads = max(s.max_threads for s in self.samplers)


def sample_instants(pids: Sequence[int], instants: list[float], before: float) -> tuple[list[int], list[float]]:
    threads, cpu = [], []
    for when in instants:
        time.sleep(max(0.0, when - before - time.time()))
        with Samplers(pids) as sampler:
            time.sleep(max(0.0, when + 3.0 - time.time()))
        threads.append(sampler.max_threads)
        cpu.append(sampler.cpu)
    return threads, cpu


def lateness_result(ledger: Path, instants: list[float], k: int, threads: list[int],
                    cpu: list[float]) -> dict[str, Any]:
    out = lateness.summarize(lateness.lateness_by_instant(ledger, instants), k * len(instants))
    out.update(tally(ledger, instants, k), threads_max=max(threads, default=0),
               cpu_s_per_instant=sum(cpu) / len(cpu) if cpu else None)
    return out


def jobs_yaml(k: int, interval: float, ledger: Path) -> str:
    lines = ["jobs:"]
    for i in range(k):
        name = f"j{i:04d}"
        lines += [f"  - name: {name}", f"    every: {interval:g}s",
                  f"    command: {json.dumps(lateness.job_line(name, ledger))}"]
    return "\n".join(lines) + "\n"


def run_pg(bench: Bench, k: int, loops: int, rounds: int, interval: float, profile: bool = False) -> dict[str, Any]:
    work = workdir(f"pg-late-{k}-{loops}")
    ledger = work / "ledger"
    with bench.database() as db_url:
        seed(db_url, work, jobs_yaml(k, interval, ledger))
        first = scalar(db_url, "SELECT min(next_run_at) FROM cronctl_jobs").timestamp()
        procs = start_loops(db_url, work, loops, "--max-parallel", str(k))
        try:
            wait_beating(db_url, loops)
            instants = instants_after(first, interval, time.time(), rounds)
            profiler = burst_profile.BurstProfiler([p.pid for p in procs], burst_profile.server_pids(
                bench.server.data_dir)) if profile else None
            if profiler is not None:
                profiler.watch(instants)
            threads, cpu = sample_instants([p.pid for p in procs], instants, before=3.5)
            time.sleep(1.0)
        finally:
            stop_all(procs)
        out = lateness_result(ledger, instants, k, threads, cpu)
        if profiler is not None:
            profiler.join()
            out["profile"] = profiler.rows([started for started, _name in lateness.read_ledger(ledger)])
        out["by_host"] = ", ".join(f"{host} {count}" for host, count in query(
            db_url, "SELECT host_id, count(*) FROM cronctl_runs WHERE state = 'success' GROUP BY 1 ORDER BY 1"))
        return out


APS4_DRIVER = r'''
import asyncio, subprocess, sys, time
from datetime import datetime, timezone
from apscheduler import AsyncScheduler, ConflictPolicy
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.psycopg import PsycopgEventBroker
from apscheduler.executors.thread import ThreadPoolJobExecutor
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy.ext.asyncio import create_async_engine

k, interval, first, end, url, index, line = (int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]),
                                             float(sys.argv[4]), sys.argv[5], int(sys.argv[6]), sys.argv[7])

def run(command):
    subprocess.run(command, shell=True)

async def main():
    engine = create_async_engine(url)
    store = SQLAlchemyDataStore(engine)
    broker = PsycopgEventBroker.from_async_sqla_engine(engine)
    executors = {"threadpool": ThreadPoolJobExecutor(max_workers=k)}
    async with AsyncScheduler(store, broker, identity="sched-%d" % index, max_concurrent_jobs=k,
                              job_executors=executors) as sched:
        start = datetime.fromtimestamp(first, timezone.utc)
        for i in range(k):
            name = "j%04d" % i
            # One task per job: a task allows one running job at a time (APScheduler 3's max_instances=1).
            await sched.configure_task(name, func=run, job_executor="threadpool", max_running_jobs=1)
            if index == 0:
                await sched.add_schedule(name, IntervalTrigger(seconds=interval, start_time=start), id=name,
                                         args=[line.format(name=name)], conflict_policy=ConflictPolicy.replace)
        await sched.start_in_background()
        print("ready", flush=True)
        while time.time() < end:
            await asyncio.sleep(0.2)
        await sched.stop()
        await sched.wait_until_stopped()
    await engine.dispose()

asyncio.run(main())
'''


def aps4_dir(given: Path | None) -> Path:
    return given or Path(tempfile.gettempdir()) / "cronctl-bench-aps4"


def ensure_aps4(where: Path, install: bool) -> str | None:
    """None when APScheduler 4 imports from `where`, else why not."""
    probe = [PYTHON, "-c", "from apscheduler import AsyncScheduler"]  # only APScheduler 4 has it
    env = {**os.environ, "PYTHONPATH": str(where)}
    if subprocess.run(probe, env=env, capture_output=True).returncode == 0:
        return None
    if not install:
        return f"APScheduler 4 not installed in {where} (--install-peers: pip install --target it)"
    done = subprocess.run([PYTHON, "-m", "pip", "install", "-q", "--target", str(where), *APS4_PINS],
                          capture_output=True, text=True)
    if subprocess.run(probe, env=env, capture_output=True).returncode == 0:
        return None
    return f"pip install {' '.join(APS4_PINS)} failed: {(done.stderr or done.stdout).strip()[-300:]}"


def run_aps4(bench: Bench, k: int, schedulers: int, rounds: int, interval: float, where: Path) -> dict[str, Any]:
    work = workdir(f"pg-late-aps4-{k}")
    ledger, driver = work / "ledger", work / "driver.py"
    driver.write_text(APS4_DRIVER)
    line = lateness.LINE.replace("{ledger}", str(ledger))
    env = {**os.environ, "PYTHONPATH": str(where)}
    with bench.database() as db_url:
        sqla = db_url.replace("postgresql://", "postgresql+psycopg://", 1)
        first = float(int(time.time()) + 10 + k // 50)
        end = first + (rounds + 3) * interval + 3.0
        procs: list[subprocess.Popen[str]] = []
        try:
            for index in range(schedulers):  # one at a time: the first creates the tables and the schedules
                procs.append(subprocess.Popen([PYTHON, str(driver), str(k), str(interval), str(first), str(end),
                                               sqla, str(index), line], env=env, text=True,
                                              stdout=subprocess.PIPE, stderr=open(work / f"s{index}.log", "w")))
                _wait_ready(procs[-1], work / f"s{index}.log")
            instants = instants_after(first, interval, time.time(), rounds)
            threads, cpu = sample_instants([p.pid for p in procs], instants, before=1.0)
            time.sleep(1.0)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
        return lateness_result(ledger, instants, k, threads, cpu)


def _wait_ready(proc: subprocess.Popen[str], log: Path) -> None:
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.wait(timeout=30)
        raise RuntimeError(f"APScheduler 4 driver failed: {log.read_text()[-1500:]}")


def part_lateness(bench: Bench, args: argparse.Namespace) -> str:
    ks = [int(x) for x in args.ks.split(",")]
    notes = ["missed: a (job, instant) with no start before the next instant (the last instant: before the "
             "end of its window, 4 s after it); duplicates: starts of a (job, instant) beyond the first.",
             "runs by host: successful runs each cronctl loop (host) fired over the whole test (slots before the "
             "measured instants included). The loop that reaches a burst first usually claims all of it; loops "
             "claiming at the same moment split it (each skips the rows another has locked)."]
    peers = lateness_peers(args, notes)
    rows, profiles = [], []
    for k in ks:
        for label, runner in peers:
            print(f"pg_cluster lateness: {label} K={k} ...", file=sys.stderr, flush=True)
            with ledger_tap(k) as seen:
                res = runner(bench, k, args)
            res.update(seen)
            rows.append([k, label, f"{res['n']}/{res['expected']}", res.get("missed", "-"),
                         res.get("duplicates", "-"), fmt(res["p50_ms"]), fmt(res["p99_ms"]), fmt(res["max_ms"]),
                         fmt(res.get("cpu_s_per_instant"), 2), fmt(res.get("threads_max")), res.get("by_host", "")])
            profiles += [[k, label, *profile_cells(row)] for row in res.get("profile", [])]
    title = f"Fire lateness on PostgreSQL (ms; {args.rounds} instants per K, every {args.interval:g} s)"
    text = table(title, ["K", "scheduler", "starts seen", "missed", "duplicates", "p50", "p99", "max",
                         "CPU s per instant (all processes)", "threads (max)", "runs by host"], rows,
                 command=command(args, "lateness"))
    text += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    if profiles:
        text += "\n" + table("Where the CPU went from each instant to its p99 start (ms of CPU, all cores; "
                             "bench/burst_profile.py)", ["K", "scheduler", "p99", "measured over", "busy", "loops",
                                                        "PostgreSQL", "rest (children, others)"], profiles)
    return text


def profile_cells(row: dict[str, Any]) -> list[str]:
    return [fmt(row["p99_ms"]), f"+{row['from_ms']:.0f} to +{row['to_ms']:.0f} ms", fmt(row["busy_ms"]),
            fmt(row["loops_ms"]), fmt(row["server_ms"]), fmt(row["rest_ms"])]


Runner = Callable[[Bench, int, argparse.Namespace], dict[str, Any]]


PEER_KEYS = ("floor", "pg1", "pg3", "json", "aps3", "aps4")


def lateness_peers(args: argparse.Namespace, notes: list[str]) -> list[tuple[str, Runner]]:
    wanted = set(args.peers.split(","))
    peers: list[tuple[str, Runner]] = []
    if "floor" in wanted:
        notes.append("gate floor (bench/lateness.py): K shells started before the instant, each blocked on a pipe "
                     "and released by one write: no scheduler, no store; the least the children's own start "
                     "costs on this machine at this load.")
        peers.append(("gate floor (no scheduler)", lambda b, k, a: lateness.run_gate_floor(k, a.rounds, 3.0)))
    if "pg1" in wanted:
        peers.append(("cronctl PostgreSQL, 1 loop", lambda b, k, a: run_pg(b, k, 1, a.rounds, a.interval, a.profile)))
    if "pg3" in wanted:
        peers.append(("cronctl PostgreSQL, 3 loops", lambda b, k, a: run_pg(b, k, 3, a.rounds, a.interval, a.profile)))
    if "json" in wanted:
        peers.append(("cronctl JSON store, 1 loop", lambda b, k, a: lateness.run_cronctl(k, a.rounds, a.interval)))
    if "aps3" in wanted:
        peers += _aps3_peer(args, notes)
    if "aps4" in wanted:
        peers += _aps4_peer(args, notes)
    return peers


def _aps3_peer(args: argparse.Namespace, notes: list[str]) -> list[tuple[str, Runner]]:
    if not ensure_peers(args.install_peers):
        notes.append("APScheduler 3 / SQLAlchemy not importable: skipped (pip install -e '.[bench]')")
        return []
    notes.append("APScheduler 3 runs one scheduler: its documentation says a job store cannot be shared between "
                 "schedulers (no synchronisation between processes: jobs would run more than once or be missed).")
    return [("APScheduler 3 SQLAlchemy job store on PostgreSQL, 1 scheduler", _aps3)]


def _aps4_peer(args: argparse.Namespace, notes: list[str]) -> list[tuple[str, Runner]]:
    where = aps4_dir(args.aps4_dir)
    why = ensure_aps4(where, args.install_peers)
    if why is not None:
        notes.append(f"APScheduler 4 skipped: {why}")
        return []
    notes.append("APScheduler 4: 3 schedulers (processes) on one SQLAlchemy data store (psycopg async engine) "
                 "and one PsycopgEventBroker (LISTEN/NOTIFY) on the same database; one task per job with "
                 "max_running_jobs=1, a thread pool of K per scheduler.")
    return [("APScheduler 4.0.0a6 SQLAlchemy data store on PostgreSQL, 3 schedulers",
             lambda b, k, a: run_aps4(b, k, 3, a.rounds, a.interval, where))]


def _aps3(bench: Bench, k: int, args: argparse.Namespace) -> dict[str, Any]:
    with bench.database() as db_url, aps3_on(db_url):
        return lateness.run_apscheduler(k, args.rounds, args.interval, "sqlite")


# --- claim ------------------------------------------------------------------------------------------


def part_claim(bench: Bench, args: argparse.Namespace) -> str:
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"pg_cluster claim: {size} jobs ...", file=sys.stderr, flush=True)
        if bench.statements:
            scalar(bench.url, "SELECT pg_stat_statements_reset()")
        times = pg_claim.measure(bench.url, size, args.claim_rounds, "lease")[0]
        rows.append([f"{size:,}", *(f"{median(times[s]):.2f} / {pct(times[s], 90):.2f}"
                                   for s in ("claim", "dispatch", "finish", "total")),
                     *_server_cells(server_per_round(bench, args.claim_rounds))])
    return table(f"Claim + dispatch + finish of one run through PgLeaseStore (ms, median / p90 of "
                 f"{args.claim_rounds} rounds, client-side over loopback)",
                 ["jobs", "claim_due", "mark_dispatched", "finish_many", "total",
                  "statements per round", "server execution ms per round"], rows,
                 command=command(args, "claim")) + (
        "\n- Statements and server execution time per round from pg_stat_statements: every statement run at "
        "least once per round (BEGIN and COMMIT included; the warm-up rounds and the untimed re-arm of the job, "
        "one upsert in its own transaction, included); the rest of the total is round trips and client work.\n")


def _server_cells(found: tuple[float, float] | None) -> list[str]:
    return ["-", "-"] if found is None else [f"{found[0]:.1f}", f"{found[1]:.2f}"]


CLAIM_WARMUP_ROUNDS = 10  # pg_claim.measure's warm-up rounds, run before the timed ones


def server_per_round(bench: Bench, rounds: int) -> tuple[float, float] | None:
    """(statements, execution ms) per round of the statements called at least once per round:
    the population and the DDL are called once."""
    if not bench.statements:
        return None
    calls, total = query(bench.url, "SELECT sum(calls)::float8, sum(total_exec_time)::float8"
                                    " FROM pg_stat_statements WHERE calls >= %s", rounds)[0]
    every = rounds + CLAIM_WARMUP_ROUNDS
    return float(calls or 0.0) / every, float(total or 0.0) / every


# --- idle ------------------------------------------------------------------------------------------


def part_idle(bench: Bench, args: argparse.Namespace) -> str:
    rows, details = [], []
    for loops in (1, 3):
        print(f"pg_cluster idle: {loops} loop(s) ...", file=sys.stderr, flush=True)
        res = idle_window(bench, loops, args.idle_seconds)
        rows.append([loops, f"{res['xact_per_s_per_loop']:.2f}", f"{res['cpu_pct_per_loop']:.3f}",
                     fmt(res["statements_per_s_per_loop"], 2), fmt(res["control_per_s_per_loop"], 2)])
        if res["statements"]:
            details.append((loops, res["statements"]))
    text = table(f"Idle on PostgreSQL: 1,000 jobs due in a year, {args.idle_seconds:g} s window",
                 ["loops", "transactions/s per loop (xact_commit)", "CPU % of a core per loop",
                  "statements/s per loop (pg_stat_statements)", "of which BEGIN/COMMIT"], rows,
                 command=command(args, "idle"))
    for loops, statements in details:
        text += "\n" + table(f"Idle statements, {loops} loop(s): calls per second per loop, mean ms",
                             ["statement", "calls/s per loop", "mean ms"],
                             [[s, f"{c:.2f}", f"{m:.3f}"] for s, c, m in statements])
    return text


def idle_window(bench: Bench, loops: int, seconds: float) -> dict[str, Any]:
    work = workdir(f"pg-idle-{loops}")
    with bench.database() as db_url:
        with connect(parse_store_url(db_url)) as conn:
            ensure_schema(conn)
            pg_claim.populate_lease(conn, 1001)  # 1,000 rows `jobN`, due in a year
        procs = start_loops(db_url, work, loops)
        try:
            wait_beating(db_url, loops)
            time.sleep(3.0)  # past the first sweep and the first skew measurement
            before = idle_counters(bench, db_url, procs)
            time.sleep(seconds)
            after = idle_counters(bench, db_url, procs)
        finally:
            stop_all(procs)
    return idle_figures(before, after, loops)


def idle_counters(bench: Bench, db_url: str, procs: Sequence[subprocess.Popen[bytes]]) -> dict[str, Any]:
    """Read from the admin database: the bench database's own counters see nothing of this."""
    name = db_name(db_url)
    out: dict[str, Any] = {"at": time.monotonic(), "cpu": sum(proc_cpu_seconds(p.pid) for p in procs)}
    out["xact"] = scalar(bench.url, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                         name)
    out["statements"] = ({text: (calls, total) for text, calls, total in query(bench.url, _STATEMENTS, name)}
                         if bench.statements else None)
    return out


TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK")
_STATEMENTS = ("SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 70),"
               " sum(s.calls)::bigint, sum(s.total_exec_time)::float8"
               " FROM pg_stat_statements AS s JOIN pg_database AS d ON d.oid = s.dbid WHERE d.datname = %s"
               " GROUP BY 1")


def idle_figures(before: dict[str, Any], after: dict[str, Any], loops: int) -> dict[str, Any]:
    span = after["at"] - before["at"]
    out: dict[str, Any] = {"xact_per_s_per_loop": (after["xact"] - before["xact"]) / span / loops,
                           "cpu_pct_per_loop": (after["cpu"] - before["cpu"]) / span / loops * 100,
                           "statements": None, "statements_per_s_per_loop": None, "control_per_s_per_loop": None}
    if after["statements"] is not None:
        grown = []
        for text, (calls, total) in after["statements"].items():
            old_calls, old_total = before["statements"].get(text, (0, 0.0))
            if calls > old_calls:
                grown.append((text, (calls - old_calls) / span / loops, (total - old_total) / (calls - old_calls)))
        out["statements"] = sorted(grown, key=lambda row: -row[1])
        out["statements_per_s_per_loop"] = sum(row[1] for row in grown)
        out["control_per_s_per_loop"] = sum(row[1] for row in grown if row[0] in TRANSACTION_CONTROL)
    return out


# --- takeover ----------------------------------------------------------------------------------------

LONG_JOB = """jobs:
  - name: long
    every: 2s
    overlap: skip
    command: "echo start $CRONCTL_RUN_ID >> {oracle}; sleep 300"
"""


def running_run(db_url: str, host: str) -> str | None:
    return scalar(db_url, "SELECT run_id FROM cronctl_runs WHERE job = 'long' AND state = 'running'"
                          " AND host_id = %s", host)


def reclaimed_at(db_url: str, run_id: str) -> tuple[datetime, str] | None:
    found = query(db_url, "SELECT at, reason FROM cronctl_audit WHERE event = 'claim.reclaimed' AND run_id = %s",
                  run_id)
    return (found[0][0], found[0][1]) if found else None


def db_now(db_url: str) -> datetime:
    return scalar(db_url, "SELECT clock_timestamp()")  # type: ignore[no-any-return]


def other_host_trial(bench: Bench) -> dict[str, Any]:
    """Host A dies with its child; seconds (database clock) until host B reclaims the run."""
    work = workdir("pg-takeover")
    lease = f"{TAKEOVER_LEASE_S:g}s"
    with bench.database() as db_url:
        seed(db_url, work, LONG_JOB.format(oracle=work / "oracle"))
        procs = start_loops(db_url, work, 1, "--lease", lease)  # h0: host A, alone until its run is running
        try:
            run_id = wait_for(lambda: running_run(db_url, "h0"), 60, interval=0.1)
            procs += start_loops(db_url, work, 1, "--lease", lease, first=1)  # h1: host B
            wait_beating(db_url, 2)
            os.killpg(procs[0].pid, signal.SIGKILL)
            kill_runs(db_url)
            died = db_now(db_url)
            lease_end = scalar(db_url, "SELECT lease_expires_at FROM cronctl_runs WHERE run_id = %s", run_id)
            at, reason = wait_for(lambda: reclaimed_at(db_url, run_id), 90, interval=0.1)
            host = scalar(db_url, "SELECT host_id FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                                  " AND run_id = %s", run_id)
        finally:
            stop_all(procs)
            kill_runs(db_url)
    return {"seconds": (at - died).total_seconds(), "after_lease": (at - lease_end).total_seconds(),
            "reason": reason, "by": host}


def same_host_trial(bench: Bench) -> dict[str, Any]:
    """The loop alone is killed (its child lives on) and started again on the same host."""
    work = workdir("pg-samehost")
    oracle = work / "oracle"
    with bench.database() as db_url:
        seed(db_url, work, LONG_JOB.format(oracle=oracle))
        procs = start_loops(db_url, work, 1)  # lease 60 s: only the owner's death can count
        try:
            run_id = wait_for(lambda: running_run(db_url, "h0"), 60, interval=0.1)
            wait_for(lambda: oracle.exists() and run_id in oracle.read_text(), 30)
            os.kill(procs[0].pid, signal.SIGKILL)
            procs[0].wait(timeout=10)
            restarted = db_now(db_url)
            procs += start_loops(db_url, work, 1)
            at, reason = wait_for(lambda: reclaimed_at(db_url, run_id), 60, interval=0.05)
            registered = scalar(db_url, "SELECT max(started_at) FROM cronctl_loops")
        finally:
            stop_all(procs)
            kill_runs(db_url)
    return {"seconds": (at - restarted).total_seconds(), "from_registered": (at - registered).total_seconds(),
            "reason": reason}


def part_takeover(bench: Bench, args: argparse.Namespace) -> str:
    other, same = [], []
    for trial in range(args.trials):
        print(f"pg_cluster takeover: trial {trial + 1} ...", file=sys.stderr, flush=True)
        other.append(other_host_trial(bench))
        same.append(same_host_trial(bench))
    target_other = TAKEOVER_LEASE_S + MARGIN_S + TICK_S
    rows = [
        ["another host (lease 10 s): host A and its child kill -9'd, until host B's claim.reclaimed",
         _seconds(other, "seconds"), f"≤ {target_other:g}", _reasons(other)],
        ["another host: from the run's lease end (lease_expires_at, database clock) to claim.reclaimed",
         _seconds(other, "after_lease"), f"≤ {MARGIN_S + TICK_S:g} (margin + 1 tick)", ""],
        ["same host: the loop alone kill -9'd, from its restart (process start) to claim.reclaimed",
         _seconds(same, "seconds"), f"≤ {TICK_S:g} (from the loop running)", _reasons(same)],
        ["same host: from the restarted loop's registration (cronctl_loops.started_at) to claim.reclaimed",
         _seconds(same, "from_registered"), f"≤ {TICK_S:g}", ""],
    ]
    return table(f"Takeover of a dead owner's run (seconds on the database clock, median of {args.trials}; "
                 "each trial listed)", ["case", "median (trials)", "target", "reason / by"], rows,
                 command=command(args, "takeover"))


def _seconds(trials: list[dict[str, Any]], key: str) -> str:
    values = [t[key] for t in trials]
    return f"{median(values):.2f} ({', '.join(f'{v:.2f}' for v in values)})"


def _reasons(trials: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({f"{t['reason']}" + (f" by {t['by']}" if t.get("by") else "") for t in trials}))


# --- reconnect -----------------------------------------------------------------------------------------


def reconnect_trial(bench: Bench, db_url: str) -> float:
    """A fast restart, down 3 s; seconds from the server accepting connections to the loop's next beat."""
    pgserver.restart(bench.server, "fast", down_s=3.0)
    back = wait_for(lambda: _try_now(db_url), 30, interval=0.01)
    beat = wait_for(lambda: scalar(db_url, "SELECT max(heartbeat_at) FROM cronctl_loops WHERE heartbeat_at > %s"
                                           " AND stopped_at IS NULL", back), 30, interval=0.05)
    return float((beat - back).total_seconds())


def _try_now(db_url: str) -> datetime | None:
    try:
        return db_now(db_url)
    except psycopg.OperationalError:
        return None


def part_reconnect(bench: Bench, args: argparse.Namespace) -> str:
    work = workdir("pg-reconnect")
    took = []
    with bench.database() as db_url:
        with connect(parse_store_url(db_url)) as conn:
            ensure_schema(conn)
            pg_claim.populate_lease(conn, 101)
        procs = start_loops(db_url, work, 1)
        try:
            wait_beating(db_url, 1)
            for trial in range(args.trials):
                print(f"pg_cluster reconnect: trial {trial + 1} ...", file=sys.stderr, flush=True)
                took.append(reconnect_trial(bench, db_url))
                wait_beating(db_url, 1)
                time.sleep(2.0)
        finally:
            stop_all(procs)
    rows = [["fast restart, down 3 s: server accepting again → the loop's next heartbeat",
             f"{median(took):.2f} ({', '.join(f'{v:.2f}' for v in took)})", "≤ 5"]]
    return table(f"Reconnect after a PostgreSQL restart (seconds on the database clock, median of {args.trials})",
                 ["case", "median (trials)", "target"], rows, command=command(args, "reconnect"))


# --- main ------------------------------------------------------------------------------------------------


def command(args: argparse.Namespace, part: str) -> str:
    peers = "" if args.peers == ",".join(PEER_KEYS) else f" --peers {args.peers}"
    profile = " --profile" if args.profile else ""
    flags = {"lateness": f"--ks {args.ks} --rounds {args.rounds} --interval {args.interval:g}{peers}{profile}",
             "claim": f"--sizes {args.sizes} --claim-rounds {args.claim_rounds}",
             "idle": f"--idle-seconds {args.idle_seconds:g}", "takeover": f"--trials {args.trials}",
             "reconnect": f"--trials {args.trials}"}[part]
    return f"python bench/pg_cluster.py --only {part} {flags}"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(PARTS), help="comma list of: " + ", ".join(PARTS))
    parser.add_argument("--ks", default="100,500")
    parser.add_argument("--peers", default=",".join(PEER_KEYS), help="lateness: comma list of " + ", ".join(PEER_KEYS))
    parser.add_argument("--rounds", type=int, default=3, help="instants per K and scheduler")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between instants")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--claim-rounds", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--trials", type=int, default=3, help="takeover and reconnect trials")
    parser.add_argument("--aps4-dir", type=Path, default=None, help="where APScheduler 4 is (pip --target)")
    parser.add_argument("--install-peers", action="store_true", help="pip-install APScheduler 3 and 4 when missing")
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--profile", action="store_true",
                        help="lateness: where the CPU went from each instant to its p99 start (bench/burst_profile.py)")
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"--only: unknown part(s) {', '.join(sorted(unknown))}; choose from {', '.join(PARTS)}")
    return args


PART_FUNCTIONS: dict[str, Callable[[Bench, argparse.Namespace], str]] = {
    "lateness": part_lateness, "claim": part_claim, "idle": part_idle, "takeover": part_takeover,
    "reconnect": part_reconnect}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    wanted = [part for part in PARTS if part in args.only.split(",")]
    bench = start_server()
    texts = []
    try:
        for part in wanted:
            started = time.monotonic()
            text = PART_FUNCTIONS[part](bench, args)
            text += f"\n- {machine_note()}; part took {time.monotonic() - started:.0f} s\n"
            print(text, flush=True)
            texts.append(text)
    finally:
        pgserver.stop(bench.server.data_dir)
        for path in SCRATCH:
            shutil.rmtree(path, ignore_errors=True)
    if not bench.statements:
        print("- pg_stat_statements not available (postgresql-contrib): statement counts left out")
    save_results(args.results, "pg_cluster", {"parts": wanted}, "\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
