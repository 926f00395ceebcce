"""Hop latency of job chains on the JSON store (SPEC §10: within 50 ms), next to the floor.

A hop is the time from an upstream's recorded end to its dependant's start (the gate
opening), both from the history records a real `cronctl run` wrote. Two shapes:

- linear: n0 -> n1 -> ... -> n9 (9 hops a chain);
- fan-out: r -> w00 ... w19 (20 hops a chain, all on one upstream's end).

Every job is `true`. Chains are started with `cronctl force-run ROOT --wait` against the
running loop, one after the other.

The floor is the same linear chain as one shell line, `/bin/true && /bin/true && ...`: there is no
"recorded end" in a shell, so both are also compared start to start (one step's start to
the next one's: a whole `true` plus the hop), the shell's taken with bash's
$EPOCHREALTIME (a builtin: no process of its own) before each step.

Usage: python bench/chain_hops.py [--chains 10] [--quick] [--filler N]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    bench_env,
    cronctl_cmd,
    machine_note,
    new_workdir,
    pct,
    start_loop,
    stop_loop,
    table,
    wait_ticking,
)

LINEAR = [f"n{i}" for i in range(10)]
FAN = [f"w{i:02d}" for i in range(20)]


def cronctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cronctl_cmd(), *args], env=bench_env(home), capture_output=True, text=True,
                          timeout=120, check=False)


def jobs_yaml(filler: int = 0) -> str:
    """The two chains, and `filler` unrelated jobs (a chain's hop must not grow with the store)."""
    lines = ["jobs:", "  - {name: n0, every: 24h, command: 'true'}"]
    lines += [f"  - {{name: filler-{i:05d}, every: 24h, command: 'true'}}" for i in range(filler)]
    lines += [f"  - {{name: {name}, after: {prev}, command: 'true'}}" for prev, name in zip(LINEAR, LINEAR[1:])]
    lines.append("  - {name: r, every: 24h, command: 'true'}")
    lines += [f"  - {{name: {name}, after: r, command: 'true'}}" for name in FAN]
    return "\n".join(lines) + "\n"


def instant(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def chain_runs(home: Path, chain_id: str) -> dict[str, dict[str, Any]]:
    data = json.loads(cronctl(home, "history", "--chain", chain_id, "--json").stdout)
    return {run["job"]: run for run in data["runs"]}


Hops = tuple[list[float], list[float], list[float]]


def hops(runs: dict[str, dict[str, Any]], edges: list[tuple[str, str]]) -> Hops:
    """(end -> start, start -> start, claim -> start) of each edge, in seconds; the last
    is the part of a hop spent spawning the dependant's child (after its claim)."""
    end_to_start, start_to_start, spawn = [], [], []
    for up, down in edges:
        a, b = runs[up], runs[down]
        end_to_start.append(instant(b["started_at"]) - instant(a["ended_at"]))
        start_to_start.append(instant(b["started_at"]) - instant(a["started_at"]))
        spawn.append(instant(b["started_at"]) - instant(b["claimed_at"]))
    return end_to_start, start_to_start, spawn


def run_chains(home: Path, root: str, edges: list[tuple[str, str]], count: int) -> Hops:
    found: Hops = ([], [], [])
    for _ in range(count):
        done = cronctl(home, "force-run", root, "--wait", "--json")
        if done.returncode != 0:
            raise SystemExit(f"force-run {root} failed: {done.stdout}{done.stderr}")
        chain_id = json.loads(done.stdout)["chain"]
        for into, values in zip(found, hops(chain_runs(home, chain_id), edges), strict=True):
            into.extend(values)
    return found


def shell_floor(count: int) -> list[float]:
    """Start to start of each step of `true && true && ...` (10 steps), as bash sees it."""
    steps = " && ".join('echo "$EPOCHREALTIME" && /bin/true' for _ in LINEAR)  # a process, as a job is
    gaps: list[float] = []
    for _ in range(count):
        out = subprocess.run(["bash", "-c", steps], capture_output=True, text=True, check=True).stdout
        stamps = [float(line.replace(",", ".")) for line in out.split()]
        gaps += [b - a for a, b in zip(stamps, stamps[1:])]
    return gaps


def row(name: str, values: list[float], floor: float | None) -> list[str]:
    p50, p99 = pct(values, 50), pct(values, 99)
    ratio = f"{p50 / floor:.1f}x" if floor else "-"
    return [name, str(len(values)), f"{p50 * 1000:.1f}", f"{p99 * 1000:.1f}", ratio]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=10, help="chains of each shape (default 10)")
    parser.add_argument("--quick", action="store_true", help="3 chains of each shape")
    parser.add_argument("--filler", type=int, default=0, help="unrelated jobs in the store beside the chains")
    args = parser.parse_args()
    count = 3 if args.quick else args.chains
    home = new_workdir("chain-hops") / "home"
    jobs = home.parent / "jobs.yaml"
    jobs.write_text(jobs_yaml(args.filler))
    if cronctl(home, "apply", "-f", str(jobs)).returncode != 0:
        raise SystemExit("apply failed")
    loop = start_loop(home, "--quiet")
    try:
        wait_ticking(home, loop.pid)
        linear = run_chains(home, "n0", list(zip(LINEAR, LINEAR[1:])), count)
        fan = run_chains(home, "r", [("r", name) for name in FAN], count)
    finally:
        stop_loop(loop)
        shutil.rmtree(home.parent, ignore_errors=True)
    floor = shell_floor(max(count, 10) * 3)
    floor_p50 = pct(floor, 50)
    headers = ["hop", "n", "p50 ms", "p99 ms", "p50 vs floor"]
    rows = [
        row("linear, end -> start", linear[0], None),
        row("fan-out 20, end -> start", fan[0], None),
        row("linear, of which claim -> start (spawn)", linear[2], None),
        row("fan-out 20, of which claim -> start (spawn)", fan[2], None),
        row("linear, start -> start", linear[1], floor_p50),
        row("fan-out 20, start -> start", fan[1], floor_p50),
        row("floor: one `/bin/true && ...` line, start -> start", floor, floor_p50),
    ]
    title = f"Chain hops on the JSON store (one loop{f', {args.filler} other jobs' if args.filler else ''})"
    print(table(title, headers, rows, "python bench/chain_hops.py" + (f" --filler {args.filler}" if args.filler else "")))
    print(f"SPEC §10 asks p99 <= 50 ms from the upstream's recorded end: linear {pct(linear[0], 99) * 1000:.1f} ms, "
          f"fan-out {pct(fan[0], 99) * 1000:.1f} ms.")
    print(machine_note())


if __name__ == "__main__":
    main()
