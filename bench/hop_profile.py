"""Where a chain hop's time goes, step by step (issue 22 item 3: the fan-out's p99).

Runs one JSON loop with bench/hop_trace/sitecustomize.py first on its PYTHONPATH, which
notes the wall-clock instant of each step of a hop in a trace file; forces `--chains`
fan-out chains (r -> w00 ... w19, every job `date +%s.%N >> STAMPS/JOB`, as
bench/chain_hops.py) and cuts each hop at:

    r's stamp -> r's exit seen (pidfd) -> its result handed over (leftover scan first)
    -> the finish write begins (the tick thread) -> ends (its fsyncs) -> the claim write
    begins -> warm children adopted -> the claim write commits (its fsyncs) -> gates
    opened -> each child's stamp (its first instruction); the claim write's audit rows
    follow its gates

and prints, per step, p50 / p90 / p99 / max over the chains (ms), then the slowest hops
step by step. The tracing costs a few microseconds a step.

Usage: python bench/hop_profile.py [--chains 30] [--line] [--env NAME=VALUE ...] [--keep]
"""

from __future__ import annotations

import argparse
import bisect
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_env, cronctl_cmd, machine_note, new_workdir, pct, stop_loop, wait_ticking  # noqa: E402
from chain_hops import FAN, jobs_yaml  # noqa: E402

TRACE_DIR = Path(__file__).resolve().parent / "hop_trace"
Event = tuple[float, str, str, str]  # when, name, thread, detail

# (label, event ending the step); each step starts where the one before it ended.
STEPS = [
    ("r exits, exit seen", "exit+"),
    ("scan, result handed over", "finalize+"),
    ("tick thread to finish write", "finish+"),
    ("finish write", "finish-"),
    ("finish end to claim write", "claim+"),
    ("claim: lock, read, claim", "adopt+"),
    ("adopt warm children", "adopt-"),
    ("claim: write, fsyncs", "gates+"),  # the gates open at the commit, before the write's rows
    ("open the gates", "gates-"),
]


def read_trace(path: Path) -> list[Event]:
    events: list[Event] = []
    for line in path.read_text().splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3:
            events.append((float(parts[0]), parts[1], parts[2], parts[3] if len(parts) > 3 else ""))
    return events


def first_after(events: list[Event], times: list[float], start: float, name: str) -> Event:
    for event in events[bisect.bisect_left(times, start):]:
        if event[1] == name:
            return event
    raise LookupError(f"no {name} after {start}")


def fsync_time(events: list[Event], times: list[float], start: float, end: float) -> float:
    """Seconds spent in fsync between `start` and `end`."""
    spent, began = 0.0, None
    for when, name, _, _ in events[bisect.bisect_left(times, start):bisect.bisect_right(times, end)]:
        if name == "fsync+":
            began = when
        elif name == "fsync-" and began is not None:
            spent, began = spent + when - began, None
    return spent


def span(events: list[Event], times: list[float], start: float, end: float, name: str) -> float:
    """Seconds between the first `name+` and the last `name-` within [start, end]."""
    inside = events[bisect.bisect_left(times, start):bisect.bisect_right(times, end)]
    began = [when for when, event, _, _ in inside if event == f"{name}+"]
    ended = [when for when, event, _, _ in inside if event == f"{name}-"]
    return ended[-1] - began[0] if began and ended else 0.0


def cut(events: list[Event], stamps: Path, root: str, downs: list[str]) -> list[dict[str, float]]:
    times = [event[0] for event in events]
    roots = [float(v) for v in (stamps / root).read_text().split()]
    kids = [[float(v) for v in (stamps / job).read_text().split()] for job in downs]
    hops = []
    exits = [event[0] for event in events if event[1] == "exit+" and event[3] == root]
    ends = [event[0] for event in events if event[1] == "finalize+" and event[3] == root]
    for i, stamp in enumerate(roots):
        at, row, seen = stamp, {}, {}
        try:
            for label, name in STEPS:
                when = {"exit+": exits, "finalize+": ends}[name][i] if name in ("exit+", "finalize+") else \
                    first_after(events, times, at, name)[0]
                row[label], at, seen[name] = when - at, when, when
        except (LookupError, IndexError):
            continue
        starts = sorted(kid[i] for kid in kids)
        row["gates to first child"] = starts[0] - at
        row["gates to last child"] = starts[-1] - at
        row["fsync in finish"] = fsync_time(events, times, seen["finish+"], seen["finish-"])
        row["fsync in claim"] = fsync_time(events, times, seen["claim+"], seen["gates+"])
        row["finish: rows after commit"] = span(events, times, seen["finish+"], seen["finish-"], "aftercommit")
        claim_end = first_after(events, times, at, "claim-")[0]
        row["claim: rows after commit"] = span(events, times, seen["claim+"], claim_end, "aftercommit")
        row["hop, last child"] = starts[-1] - stamp
        hops.append(row)
    return hops


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=30)
    parser.add_argument("--line", action="store_true", help="also force the 10-node line (not cut)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the loop")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (trace, stamps)")
    args = parser.parse_args()
    work = new_workdir("hop-profile")
    home, stamps, trace = work / "home", work / "stamps", work / "trace.txt"
    stamps.mkdir()
    env = {**bench_env(home), "CRONCTL_HOP_TRACE": str(trace),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TRACE_DIR), os.environ.get("PYTHONPATH")]))}
    env.update(dict(item.split("=", 1) for item in args.env))
    (work / "jobs.yaml").write_text(jobs_yaml(stamps))
    subprocess.run([*cronctl_cmd(), "apply", "-f", str(work / "jobs.yaml")], env=env, check=True,
                   capture_output=True)
    loop = subprocess.Popen([*cronctl_cmd(), "run", "--quiet"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_ticking(home, loop.pid)
        for root in (["n0"] if args.line else []) + ["r"]:
            for _ in range(args.chains):
                subprocess.run([*cronctl_cmd(), "force-run", root, "--wait"], env=env, check=True,
                               capture_output=True)
    finally:
        stop_loop(loop)
    hops = cut(read_trace(trace), stamps, "r", FAN)
    print_table(hops)
    if args.keep:
        print(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(machine_note())


def print_table(hops: list[dict[str, float]]) -> None:
    labels = list(hops[0])
    print(f"{'step (ms)':32} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}")
    for label in labels:
        values = [hop[label] for hop in hops]
        print(f"{label:32} " + " ".join(f"{pct(values, q) * 1000:7.1f}" for q in (50, 90, 99)) +
              f" {max(values) * 1000:7.1f}")
    worst = sorted(hops, key=lambda hop: hop["hop, last child"])[-5:]
    print("\nslowest hops (ms): " + " | ".join(label for label in labels))
    for hop in worst:
        print("  " + " ".join(f"{hop[label] * 1000:.1f}" for label in labels))


if __name__ == "__main__":
    main()
