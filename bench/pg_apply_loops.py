"""`apply -f` of many new jobs while loops fire: what it costs the loops' lateness (issue 21).

Three loops (`--loops`) play hosts on one fresh PostgreSQL database with one job, `tick`,
every second, whose command writes its start instant to a ledger (bench/lateness.py's
line). Lateness is from each second's slot to that instant. Two windows, one after the other:

- quiet: `--window` seconds of the loops alone;
- apply: from the start of `cronctl apply -f` of a file of `--jobs` new jobs (each once a
  year, so none fires during the bench) to a second after it ended.

Prints the p50/p99/max lateness of each window, the slots missed, the apply's own time, and
issue 21's targets with met/missed: p99 during the apply within 1.5x of the quiet p99, and
the apply <= 20 s. `--repeat N` runs the whole N times, each on a fresh database.

The server is $CRONCTL_TEST_PG_URL when set, else a throwaway one (tests/helpers/pgserver.py).

Usage: python bench/pg_apply_loops.py [--jobs 100000] [--loops 3] [--window 30] [--repeat 1] [--slots]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lateness  # noqa: E402
import pg_cluster  # noqa: E402 - the loops-as-hosts helpers
from pg_claim import fresh_database, server_url  # noqa: E402
from pg_definitions import bytecode, cronctl_bin  # noqa: E402

from tests.pg.clusterhelp import host_env, seed  # noqa: E402

RATIO, APPLY_S = 1.5, 20.0


def big_file(path: Path, jobs: int) -> Path:
    path.write_text("jobs:\n" + "".join(f"  - name: job-{i}\n    cron: \"0 3 1 1 *\"\n"
                                        f"    command: /usr/local/bin/report {i}\n" for i in range(jobs)))
    return path


def window(ledger: Path, first: float, start: float, end: float) -> dict[str, Any]:
    """Lateness of `tick`'s slots (every second from `first`, wall clock) in [start, end): each
    start of the ledger belongs to the latest slot at or before it (bench/lateness.py's rule),
    and only the starts of this window's slots count."""
    slots = {first + n for n in range(int(start - first), int(end - first) + 1) if start <= first + n < end}
    values, seen = [], set()
    for started, _name in lateness.read_ledger(ledger):
        slot = first + math.floor(started - first + 0.0005)
        if slot in slots:
            values.append(max(0.0, started - slot))
            seen.add(slot)
    out = lateness.summarize(values, len(slots))
    out["missed"] = len(slots - seen)
    out["slots"] = [(slot - start, late) for slot, late in zip(sorted(seen), _in_slot_order(ledger, first, slots),
                                                                strict=True)]
    return out


def _in_slot_order(ledger: Path, first: float, slots: set[float]) -> list[float]:
    """Each fired slot's lateness, in slot order (what `--slots` prints: when in the window the late ones were)."""
    found: dict[float, float] = {}
    for started, _name in lateness.read_ledger(ledger):
        slot = first + math.floor(started - first + 0.0005)
        if slot in slots and slot not in found:
            found[slot] = max(0.0, started - slot)
    return [found[slot] for slot in sorted(found)]


def one_run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="cronctl-bench-apply-loops-"))
    ledger = work / "ledger"
    file = big_file(work / "big.yaml", args.jobs)
    with fresh_database(url) as db_url:
        seed(db_url, work, f"jobs:\n  - name: tick\n    every: 1s\n    command: "
                           f"{json.dumps(lateness.job_line('tick', ledger))}\n")
        first = pg_cluster.scalar(db_url, "SELECT next_run_at FROM cronctl_jobs WHERE name = 'tick'").timestamp()
        procs = pg_cluster.start_loops(db_url, work, args.loops)
        try:
            pg_cluster.wait_beating(db_url, args.loops)
            time.sleep(pg_cluster.LEAD_S)
            quiet_start = time.time()
            time.sleep(args.window)
            quiet_end = apply_start = time.time()
            bytecode(True)  # cronctl compiled once, as installed
            env = {**host_env(db_url, "applier"), "CRONCTL_HOME": str(work / "applier")}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            done = subprocess.run([*cronctl_bin(), "apply", "-f", str(file)], env=env, capture_output=True,
                                  text=True, timeout=600)
            apply_end = time.time()
            if done.returncode != 0:
                raise SystemExit(f"apply -f: exit {done.returncode}: {done.stderr.strip()}")
            time.sleep(1.5)
        finally:
            pg_cluster.stop_all(procs)
            pg_cluster.kill_runs(db_url)
    return {"quiet": window(ledger, first, quiet_start, quiet_end),
            "apply": window(ledger, first, apply_start, apply_end + 1.0),
            "apply_s": apply_end - apply_start}


def report(index: int, repeat: int, args: argparse.Namespace, found: dict[str, Any]) -> list[str]:
    quiet, during = found["quiet"], found["apply"]
    ratio = during["p99_ms"] / quiet["p99_ms"] if quiet["p99_ms"] else float("inf")
    lines = [f"run {index} of {repeat}: {args.loops} loops, `tick` every 1 s; apply -f of {args.jobs} new jobs"]
    for name, result in (("quiet", quiet), ("during apply", during)):
        lines.append(f"  {name:>12}: slots {result['expected']}, missed {result['missed']}, p50 "
                     f"{result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, max {result['max_ms']:.1f} ms")
    if args.slots:
        lines.append("  during apply, each slot (s from the apply's start: ms late): " + ", ".join(
            f"{at:.0f}: {late * 1000:.0f}" for at, late in during["slots"]))
    lines.append(f"p99 lateness during the apply / quiet: {ratio:.2f}x, target <= {RATIO:g}x: "
                 f"{'met' if ratio <= RATIO else 'missed'}")
    lines.append(f"apply -f of {args.jobs} new jobs beside {args.loops} loops: {found['apply_s']:.2f} s, "
                 f"target <= {APPLY_S:g} s: {'met' if found['apply_s'] <= APPLY_S else 'missed'}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100000)
    parser.add_argument("--loops", type=int, default=3)
    parser.add_argument("--window", type=float, default=30.0, help="seconds of the quiet window")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--slots", action="store_true", help="also each slot's lateness during the apply")
    args = parser.parse_args()
    with server_url() as url:
        for index in range(1, args.repeat + 1):
            print("\n".join(report(index, args.repeat, args, one_run(url, args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
