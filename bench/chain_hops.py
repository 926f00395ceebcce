"""Hop latency of job chains (SPEC §10: p99 within 50 ms on JSON, 150 ms on PostgreSQL),
next to the floor and to a peer, all measured the same way in the same run.

Two shapes: linear n0 -> n1 -> ... -> n9 (9 hops a chain) and fan-out r -> w00 ... w19
(20 hops a chain, all on one upstream's end). Every job is the same command,

    date +%s.%N >> STAMPS/JOB

so a hop is the time from the upstream's `date` to its dependant's `date`, each read by
the process itself: the upstream's exit, its reaping, whatever the runner records and
decides, the dependant's spawn and its shell's fork of `date`. Nothing a runner writes
about itself enters the figure. Runners:

- cronctl, JSON store: one loop; chains started with `force-run ROOT --wait`, one after
  another. Also given: the hop as the store records it (upstream's recorded end to the
  dependant's recorded start, from `history --chain`).
- cronctl, PostgreSQL: 3 loops (3 hosts) on one database of a throwaway server, chains
  forced from a 4th home; any loop may run any node.
- floor, Python loop: the same processes started by a bare Python loop (`subprocess.Popen`
  of `/bin/sh -c CMD`) right after the upstream's wait returns: the fan-out's 20 one after
  another, as fast as Python starts processes. No store, no guard, no gate: a lower bound.
- floor, shell line: the chain as one shell line, `a && b && ...` (fan-out:
  `r && { w00 & w01 & ...; wait; }`).
- peer: APScheduler 3 (BackgroundScheduler, memory job store, a thread pool of 25),
  chaining by its own documented means: a listener on EVENT_JOB_EXECUTED adds each
  dependant as a job to run now; each job runs the same command through /bin/sh. Its store
  is memory (nothing durable): cronctl writes every hop to its store first.

`--cold` adds cronctl on JSON with no warm children (CRONCTL_WARM_CHILDREN=0): each hop
spawns its dependants' children after the claim, as before warm children.

`--baseline DIR` adds cronctl on JSON run from another checkout's `cronctl` package (DIR
first on PYTHONPATH, e.g. `git archive REV cronctl | tar -x -C DIR`), right after this
checkout's, in the same run: a change's before and after under the same load.

Usage: python bench/chain_hops.py [--chains 10] [--quick] [--filler N] [--cold] [--baseline DIR] [--no-pg]
       [--no-peer]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    bench_env,
    cronctl_cmd,
    machine_note,
    new_workdir,
    pct,
    stop_loop,
    table,
    wait_ticking,
)

LINEAR = [f"n{i}" for i in range(10)]
FAN = [f"w{i:02d}" for i in range(20)]
COLD = "CRONCTL_WARM_CHILDREN"
SHAPES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "linear": ("n0", list(zip(LINEAR, LINEAR[1:], strict=False))),
    "fan-out 20": ("r", [("r", name) for name in FAN]),
}
Samples = dict[str, list[float]]  # shape -> hops (seconds)


def command(stamps: Path, job: str) -> str:
    return f"date +%s.%N >> {stamps / job}"


def hops_from_stamps(stamps: Path, edges: list[tuple[str, str]]) -> list[float]:
    """Per chain (line i of every job's file), each edge's dependant stamp minus its upstream's."""
    lines = {job: [float(v) for v in (stamps / job).read_text().split()] for edge in edges for job in edge}
    chains = min(len(v) for v in lines.values())
    return [lines[down][i] - lines[up][i] for i in range(chains) for up, down in edges]


def jobs_yaml(stamps: Path, filler: int = 0) -> str:
    """Both shapes, and `filler` unrelated jobs (a hop must not grow with the store)."""
    lines = ["jobs:", f"  - {{name: n0, every: 24h, command: '{command(stamps, 'n0')}'}}"]
    lines += [f"  - {{name: filler-{i:05d}, every: 24h, command: 'true'}}" for i in range(filler)]
    lines += [f"  - {{name: {name}, after: {prev}, command: '{command(stamps, name)}'}}"
              for prev, name in zip(LINEAR, LINEAR[1:], strict=False)]
    lines.append(f"  - {{name: r, every: 24h, command: '{command(stamps, 'r')}'}}")
    lines += [f"  - {{name: {name}, after: r, command: '{command(stamps, name)}'}}" for name in FAN]
    return "\n".join(lines) + "\n"


# --- cronctl -----------------------------------------------------------------------------------


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cronctl_cmd(), *args], env=env, capture_output=True, text=True, timeout=180,
                          check=False)


def force_chains(env: dict[str, str], count: int, recorded: Samples | None) -> None:
    for shape, (root, edges) in SHAPES.items():
        for _ in range(count):
            done = run(env, "force-run", root, "--wait", "--json")
            if done.returncode != 0:
                raise SystemExit(f"force-run {root} failed: {done.stdout}{done.stderr}")
            if recorded is not None:
                chain_id = json.loads(done.stdout)["chain"]
                recorded.setdefault(shape, []).extend(recorded_hops(env, chain_id, edges))


def instant(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def recorded_hops(env: dict[str, str], chain_id: str, edges: list[tuple[str, str]]) -> list[float]:
    runs = {r["job"]: r for r in json.loads(run(env, "history", "--chain", chain_id, "--json").stdout)["runs"]}
    return [instant(runs[down]["started_at"]) - instant(runs[up]["ended_at"]) for up, down in edges]


def cronctl_json(count: int, filler: int, extra_env: dict[str, str] | None = None) -> tuple[Samples, Samples]:
    work = new_workdir("chain-hops")
    home, stamps = work / "home", work / "stamps"
    stamps.mkdir()
    env = {**bench_env(home), **(extra_env or {})}
    (work / "jobs.yaml").write_text(jobs_yaml(stamps, filler))
    if run(env, "apply", "-f", str(work / "jobs.yaml")).returncode != 0:
        raise SystemExit("apply failed")
    loop = subprocess.Popen([*cronctl_cmd(), "run", "--quiet"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    recorded: Samples = {}
    try:
        wait_ticking(home, loop.pid)
        force_chains(env, count, recorded)
        return from_stamps(stamps), recorded
    finally:
        stop_loop(loop)
        shutil.rmtree(work, ignore_errors=True)


def from_stamps(stamps: Path) -> Samples:
    return {shape: hops_from_stamps(stamps, edges) for shape, (_, edges) in SHAPES.items()}


def cronctl_pg(count: int, loops: int) -> Samples:
    from pg_claim import fresh_database, server_url

    from tests.pg.clusterhelp import host_env, seed, start_host_loop

    work = new_workdir("chain-hops-pg")
    stamps = work / "stamps"
    stamps.mkdir()
    try:
        with server_url() as url, fresh_database(url) as db_url:
            seed(db_url, work, jobs_yaml(stamps))
            procs = [start_host_loop(work / f"h{i}", db_url, f"h{i}", "--quiet") for i in range(loops)]
            try:
                wait_loops(db_url, loops)
                env = {**host_env(db_url, "client"), "CRONCTL_HOME": str(work / "client"), "NO_COLOR": "1"}
                force_chains(env, count, None)
            finally:
                for proc in procs:
                    stop_loop(proc)
        return from_stamps(stamps)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def wait_loops(db_url: str, count: int) -> None:
    import psycopg

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with psycopg.connect(db_url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM cronctl_loops WHERE stopped_at IS NULL"
                               " AND heartbeat_at > clock_timestamp() - interval '1.5 seconds'").fetchone()
        if row is not None and row[0] >= count:
            return
        time.sleep(0.1)
    raise SystemExit(f"{count} loops did not start beating")


# --- the floors and the peer -------------------------------------------------------------------------


@contextmanager
def stamp_dir(prefix: str) -> Iterator[Path]:
    work = new_workdir(prefix)
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sh(stamps: Path, job: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["/bin/sh", "-c", command(stamps, job)])


def python_floor(count: int) -> Samples:
    """Each dependant started by a bare Python loop the moment its upstream's wait returns."""
    with stamp_dir("chain-hops-floor") as stamps:
        for _ in range(count):
            previous = sh(stamps, LINEAR[0])
            for job in LINEAR[1:]:
                previous.wait()
                previous = sh(stamps, job)
            previous.wait()
            sh(stamps, "r").wait()
            for child in [sh(stamps, job) for job in FAN]:
                child.wait()
        return from_stamps(stamps)


def shell_floor(count: int) -> Samples:
    with stamp_dir("chain-hops-shell") as stamps:
        linear = " && ".join(command(stamps, job) for job in LINEAR)
        fan = command(stamps, "r") + " && { " + " ".join(command(stamps, job) + " &" for job in FAN) + " wait; }"
        for _ in range(count):
            subprocess.run(["/bin/sh", "-c", linear], check=True)
            subprocess.run(["/bin/sh", "-c", fan], check=True)
        return from_stamps(stamps)


def apscheduler_peer(count: int) -> Samples | None:
    try:
        from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler
    except ImportError:
        return None
    below: dict[str, list[str]] = {}
    for _, edges in SHAPES.values():
        for up, down in edges:
            below.setdefault(up, []).append(down)
    with stamp_dir("chain-hops-aps") as stamps:
        scheduler = BackgroundScheduler(executors={"default": ThreadPoolExecutor(25)})
        ended = threading.Semaphore(0)
        leaves = {LINEAR[-1], *FAN}

        def job(name: str) -> None:
            subprocess.run(["/bin/sh", "-c", command(stamps, name)], check=True)

        def chained(event: JobExecutionEvent) -> None:
            name = event.job_id.split(":")[0]
            for down in below.get(name, []):
                scheduler.add_job(job, args=[down], id=f"{down}:{time.monotonic_ns()}")
            if name in leaves:
                ended.release()

        scheduler.add_listener(chained, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        scheduler.start()
        try:
            for root, waits in (("n0", 1), ("r", len(FAN))):
                for _ in range(count):
                    scheduler.add_job(job, args=[root], id=f"{root}:{time.monotonic_ns()}")
                    for _ in range(waits):
                        if not ended.acquire(timeout=60):
                            raise SystemExit("APScheduler: a chain did not end")
        finally:
            scheduler.shutdown()
        return from_stamps(stamps)


# --- the report ------------------------------------------------------------------------------------------


def cells(values: list[float], floor: list[float] | None) -> list[str]:
    p50, p99 = pct(values, 50), pct(values, 99)
    ratio = f"{p50 / pct(floor, 50):.1f} / {p99 / pct(floor, 99):.1f}" if floor else "-"
    return [str(len(values)), f"{p50 * 1000:.1f}", f"{p99 * 1000:.1f}", ratio]


def report(results: dict[str, Samples], floor: Samples) -> list[list[str]]:
    rows = []
    for shape in SHAPES:
        for name, samples in results.items():
            rows.append([shape, name, *cells(samples[shape], floor[shape])])
    return rows


def measure(args: argparse.Namespace, count: int) -> tuple[dict[str, Samples], Samples]:
    results: dict[str, Samples] = {}
    timed: list[tuple[str, Callable[[], Samples | None]]] = [
        ("floor: Python loop", lambda: python_floor(count)),
        ("floor: one shell line", lambda: shell_floor(count)),
    ]
    stamped, recorded = cronctl_json(count, args.filler)
    results["cronctl, JSON, 1 loop"] = stamped
    if args.baseline is not None:
        results[f"cronctl, JSON, 1 loop, baseline {args.baseline.name}"] = cronctl_json(
            count, args.filler, {"PYTHONPATH": str(args.baseline.resolve())})[0]
    if args.cold:
        results["cronctl, JSON, 1 loop, no warm children"] = cronctl_json(count, args.filler, {COLD: "0"})[0]
    if not args.no_pg:
        timed.append((f"cronctl, PostgreSQL, {args.loops} loops", lambda: cronctl_pg(count, args.loops)))
    if not args.no_peer:
        timed.append(("APScheduler 3, listener chaining", lambda: apscheduler_peer(count)))
    for name, measure_one in timed:
        found = measure_one()
        if found is not None:
            results[name] = found
    return results, recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=10, help="chains of each shape (default 10)")
    parser.add_argument("--quick", action="store_true", help="3 chains of each shape")
    parser.add_argument("--filler", type=int, default=0, help="unrelated jobs in the JSON store beside the chains")
    parser.add_argument("--loops", type=int, default=3, help="loops on PostgreSQL (default 3)")
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--no-peer", action="store_true", help="skip APScheduler")
    parser.add_argument("--cold", action="store_true",
                        help=f"also cronctl on JSON with {COLD}=0: every hop spawns its children (as before)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="also cronctl on JSON from the cronctl package in DIR (another checkout), same run")
    parser.add_argument("--json", type=Path, help="also write the samples here")
    args = parser.parse_args()
    count = 3 if args.quick else args.chains
    results, recorded = measure(args, count)
    floor = results["floor: Python loop"]
    headers = ["shape", "runner", "hops", "p50 ms", "p99 ms", "p50 / p99 vs Python-loop floor"]
    rows = report(results, floor)
    rows += [[shape, "cronctl, JSON: as recorded (end -> start in the store)", *cells(values, None)]
             for shape, values in recorded.items()]
    title = f"Chain hops, upstream's first instruction to dependant's ({count} chains of each shape"
    title += f", {args.filler} other jobs on JSON)" if args.filler else ")"
    invocation = "python bench/chain_hops.py" + (f" --chains {count}" if count != 10 else "")
    invocation += (f" --filler {args.filler}" if args.filler else "") + (" --cold" if args.cold else "")
    invocation += f" --baseline {args.baseline}" if args.baseline is not None else ""
    print(table(title, headers, rows, invocation))
    for name, samples in results.items():
        if name.startswith("cronctl"):
            target = 0.050 if "JSON" in name else 0.150
            verdict = ", ".join(f"{shape} p99 {pct(v, 99) * 1000:.1f} ms" for shape, v in samples.items())
            met = all(pct(v, 99) <= target for v in samples.values())
            print(f"{name}: {verdict}; target p99 <= {target * 1000:.0f} ms: {'met' if met else 'missed'}")
    print(machine_note())
    if args.json:
        args.json.write_text(json.dumps({"results": results, "recorded": recorded}))


if __name__ == "__main__":
    main()
