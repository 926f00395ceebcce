"""A network that stalls (sockets open, nothing answers) under one of two loops: the figures.

Host A reaches a throwaway PostgreSQL through tests/pg/stallproxy.py, host B directly,
both `--lease 20s`; A runs a long `overlap: skip` job (kill_grace 10 s). Each round
stalls A's proxy and measures, from the stall:

- `child_ended_s`: A's child gone (the self-fence: last confirmed renewal + lease -
  kill_grace - 5 s, SIGTERM honoured by `sleep`);
- `reclaimed_s`: B's `claim.reclaimed` of the run (lease + 5 s after its last renewal,
  on the database clock);
- `margin_s`: reclaimed_s - child_ended_s (never negative: else two copies ran);
- `sigterm_exit_s`: SIGTERM to A (stalled, a fresh run of its own with kill_grace 2 s)
  until its loop exited;
- `apply_exit_s`: `apply -f` whose statement is in flight when the stall begins, until it
  exits 1 with "did not answer within 5 s".

Usage: python bench/pg_stall.py [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from tests.helpers import pgserver  # noqa: E402
from tests.helpers.loophelp import processes_with_run_id, stop, wait_until  # noqa: E402
from tests.pg.clusterhelp import one, run_cli, seed, start_host_loop  # noqa: E402
from tests.pg.stallproxy import StallProxy  # noqa: E402

JOB = """
jobs:
  - name: long
    every: 2s
    overlap: skip
    kill_grace: {grace}s
    command: "sleep 300"
"""


def _fresh_db(server_url: str, name: str) -> str:
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    head, _, _ = server_url.rpartition("/")
    return f"{head}/{name}"


def _running(url: str, host: str) -> str | None:
    return one(url, "SELECT run_id FROM cronctl_runs WHERE state = 'running' AND host_id = %s", host)


def _kill_runs(url: str) -> None:
    for (run_id,) in psycopg.connect(url, autocommit=True).execute("SELECT run_id FROM cronctl_runs").fetchall():
        for pid in processes_with_run_id(run_id):
            os.kill(pid, signal.SIGKILL)


def fence_round(server: pgserver.Server, work: Path, index: int) -> dict[str, float]:
    url = _fresh_db(server.url, f"stall_{index}")
    seed(url, work, JOB.format(grace=10))
    port = int(url.split("@", 1)[-1].split("/", 1)[0].rsplit(":", 1)[1])
    with StallProxy("127.0.0.1", port) as proxy:
        a = start_host_loop(work / "a", proxy.url_for(url), "host-a", "--lease", "20s")
        b = None
        try:
            run_id = wait_until(lambda: _running(url, "host-a"), timeout=60)
            wait_until(lambda: processes_with_run_id(run_id), timeout=30)
            b = start_host_loop(work / "b", url, "host-b", "--lease", "20s")
            wait_until(lambda: one(url, "SELECT 1 FROM cronctl_loops WHERE host_id = 'host-b'"), timeout=60)
            proxy.stall()
            stalled = time.monotonic()
            wait_until(lambda: not processes_with_run_id(run_id), timeout=90)
            ended = time.monotonic() - stalled
            wait_until(lambda: one(url, "SELECT 1 FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                                        " AND run_id = %s", run_id), timeout=90, interval=0.01)
            reclaimed = time.monotonic() - stalled
            proxy.resume()
        finally:
            for proc in (a, b):
                if proc is not None:
                    stop(proc)
            _kill_runs(url)
    return {"child_ended_s": ended, "reclaimed_s": reclaimed, "margin_s": reclaimed - ended}


def sigterm_round(server: pgserver.Server, work: Path, index: int) -> dict[str, float]:
    url = _fresh_db(server.url, f"term_{index}")
    seed(url, work, JOB.format(grace=2))
    port = int(url.split("@", 1)[-1].split("/", 1)[0].rsplit(":", 1)[1])
    with StallProxy("127.0.0.1", port) as proxy:
        a = start_host_loop(work / "t", proxy.url_for(url), "host-a", "--lease", "20s")
        try:
            run_id = wait_until(lambda: _running(url, "host-a"), timeout=60)
            wait_until(lambda: processes_with_run_id(run_id), timeout=30)
            proxy.stall()
            wait_until(lambda: "out of reach" in (work / "t" / "loop.log").read_text(), timeout=30)
            asked = time.monotonic()
            a.send_signal(signal.SIGTERM)
            a.wait(timeout=60)
            exited = time.monotonic() - asked
        finally:
            proxy.resume()
            stop(a)
            _kill_runs(url)
        jobs = work / "apply.yaml"
        jobs.write_text("jobs:\n  - name: fresh\n    every: 1h\n    command: 'true'\n")
        proxy.stall_on(b"COPY cronctl_jobs")
        began = time.monotonic()
        done = run_cli(work / "h", proxy.url_for(url), "seed", "apply", "-f", str(jobs), timeout=60)
        applied = time.monotonic() - began
        assert done.returncode == 1 and "did not answer within 5 s" in done.stderr, done.stderr
    return {"sigterm_exit_s": exited, "apply_exit_s": applied}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    server = pgserver.start()
    figures: dict[str, list[float]] = {}
    try:
        for index in range(args.rounds):
            work = Path(tempfile.mkdtemp(prefix="cronctl-stall-"))
            try:
                for key, value in {**fence_round(server, work, index), **sigterm_round(server, work, index)}.items():
                    figures.setdefault(key, []).append(value)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    finally:
        pgserver.stop(server.data_dir)
    summary: dict[str, Any] = {key: {"median": round(statistics.median(values), 2), "min": round(min(values), 2),
                                     "max": round(max(values), 2)} for key, values in figures.items()}
    summary["rounds"] = args.rounds
    if args.json:
        print(json.dumps(summary, sort_keys=True))
        return
    for key, value in sorted(summary.items()):
        print(f"{key:>16}: {value}")


if __name__ == "__main__":
    main()
