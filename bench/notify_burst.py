"""Notification burst: N jobs fail at the same instant, each owing a `failure` webhook.

One home, N `every: 1h` jobs running `false` whose slots coincide, each with
`notify: [{url: RECEIVER, on: [failure]}]`, plus PROBES `every: 1s` jobs running `true`
(no notification) whose fire lateness is read from their `run.started` rows (`late_ms`).
`cronctl run --max-parallel N+PROBES` and a local HTTP receiver (200 to everything).

Reported: all delivered (distinct idempotency keys received == N), the time from the
instant to the last delivery, and the probes' lateness (p50, p99, max) in the WINDOW after
the instant, against the same run without the notifications (the ratio of the medians).

Usage: python bench/notify_burst.py [--jobs 1000] [--probes 5] [--window 30] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import fmt, machine_note, median, new_workdir, pct, start_loop, stop_loop, table, wait_for, wait_ticking

from tests.helpers.receivers import Receiver

LEAD_S = 15.0  # the instant is this far after the store is written: the loop starts first


def build_home(home: Path, jobs: int, probes: int, url: str | None) -> float:
    """The store in one write; returns the instant (epoch seconds) the N jobs fail at."""
    from cronctl.context import Context
    from cronctl.jobs.state import entry_from, new_state
    from cronctl.models import JobSpec

    ctx = Context.open(home)
    now = ctx.clock.now()
    instant = (now + timedelta(seconds=LEAD_S)).replace(microsecond=0)
    notify = ({"url": url, "on": ["failure"]},) if url else None
    with ctx.store.transaction() as doc:
        for index in range(jobs):
            spec = JobSpec(name=f"burst-{index:05d}", command="false", every=3600.0, notify=notify)
            doc["jobs"][spec.name] = entry_from(spec, new_state(now, instant))
        for index in range(probes):
            spec = JobSpec(name=f"probe-{index}", command="true", every=1.0)
            doc["jobs"][spec.name] = entry_from(spec, new_state(now, now + timedelta(seconds=2)))
    return instant.timestamp()


def probe_lateness(home: Path, since: float, until: float) -> tuple[list[float], int]:
    """The probes' start lateness (s) for slots in [since, until], and the slots they did not
    run (coalesced by a busy loop, counted by `run.missed`; or skipped, `run.skipped`)."""
    import json

    from cronctl.timefmt import from_iso

    late: list[float] = []
    missed = 0
    for line in (home / "audit.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not str(row.get("job", "")).startswith("probe-"):
            continue
        when = from_iso(row.get("slot"))
        inside = when is not None and since <= when.timestamp() <= until
        if row.get("event") == "run.missed" and inside:
            missed += int(row.get("count") or 1)
        elif row.get("event") == "run.skipped" and inside:
            missed += 1
        if row.get("event") != "run.started":
            continue
        if not inside or when is None:
            continue
        if row.get("late_ms") is not None:  # a run claimed ahead: measured at its gate
            late.append(float(row["late_ms"]) / 1000)
        else:  # claimed when due: the row is written just after the child started
            started = from_iso(row.get("ts"))
            late.append(max(0.0, (started - when).total_seconds()) if started is not None else 0.0)
    return late, missed


def one_run(jobs: int, probes: int, window: float, notify: bool) -> dict[str, Any]:
    home = new_workdir("notify-burst") / "home"
    receiver = Receiver() if notify else None
    instant = build_home(home, jobs, probes, receiver.url if receiver else None)
    loop = start_loop(home, "--max-parallel", str(jobs + probes))
    out: dict[str, Any] = {"notify": notify}
    try:
        wait_ticking(home, loop.pid)
        time.sleep(max(0.0, instant + window - time.time()))
        if receiver is not None:
            wait_for(lambda: len({r.headers.get("Idempotency-Key") for r in receiver.snapshot()}) >= jobs,
                     timeout=600, interval=0.2)
            got = receiver.snapshot()
            offset = time.time() - time.monotonic()
            out["delivered"] = len({r.headers.get("Idempotency-Key") for r in got})
            out["requests"] = len(got)
            out["last_delivery_s"] = max(r.at + offset for r in got) - instant
    finally:
        stop_loop(loop)
        if receiver is not None:
            receiver.stop()
    late, missed = probe_lateness(home, instant - 1, instant + window)
    out.update(probe_runs=len(late), probe_missed=missed, p50=median(late) if late else None,
               p99=pct(late, 99) if late else None, max=max(late) if late else None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs, alternating (the machine is shared)")
    parser.add_argument("--quick", action="store_true", help="200 jobs, a 15 s window, one round")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.window, args.rounds = 200, 15.0, 1
    runs: list[tuple[str, dict[str, Any]]] = []
    for index in range(args.rounds):
        for notify in (False, True):
            runs.append((f"{index + 1}: {'with' if notify else 'without'} notify",
                         one_run(args.jobs, args.probes, args.window, notify=notify)))
    rows = [[name, run.get("delivered", "-"), fmt(run.get("last_delivery_s"), 2), run["probe_runs"],
             run["probe_missed"], fmt((run["p50"] or 0) * 1000, 1), fmt((run["p99"] or 0) * 1000, 1),
             fmt((run["max"] or 0) * 1000, 1)] for name, run in runs]
    print(table(f"{args.jobs} failures at one instant; probes: {args.probes} jobs every 1s ({machine_note()})",
                ["run", "delivered", "last delivery s", "probe runs", "probe slots missed", "p50 ms", "p99 ms",
                 "max ms"], rows, command=" ".join(["python", "bench/notify_burst.py", *sys.argv[1:]])))
    with_runs = [run for _, run in runs if run["notify"]]
    without_runs = [run for _, run in runs if not run["notify"]]
    p50_with = median([run["p50"] for run in with_runs if run["p50"] is not None])
    p50_without = median([run["p50"] for run in without_runs if run["p50"] is not None])
    print(f"median of the probes' p50 lateness: with {p50_with * 1000:.1f} ms, without {p50_without * 1000:.1f} ms,"
          f" ratio {p50_with / p50_without:.2f}" if p50_without else "no probe runs without notify")
    print(f"median time from the instant to the last delivery: "
          f"{median([run['last_delivery_s'] for run in with_runs]):.2f} s")
    short = [run.get("delivered") for run in with_runs if run.get("delivered") != args.jobs]
    if short:
        print(f"NOT ALL DELIVERED: {short} of {args.jobs}")
        sys.exit(1)


if __name__ == "__main__":
    main()
