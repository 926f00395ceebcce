"""The in-process cost of one idle tick that heals, on the JSON store: N jobs, F of them with a
failed last run (what the healer looks at), nothing due, no child; a FakeClock advances a
second per tick and every tick heals (as an idle loop does once a second).

Prints the median over the ticks after a warm-up. Compare two checkouts by running this file
with each on PYTHONPATH (it imports `cronctl` from the first entry that has it).

Usage: python bench/idle_heal_tick.py [--jobs 1000] [--failed 20] [--ticks 400]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.engine import Engine, EngineOptions
from cronctl.loop.scheduler import LoopOptions, Scheduler
from cronctl.ops import definitions as ops


class NoSpawn:
    """An idle tick spawns nothing: the supervisor is never asked."""

    def running(self) -> list[str]:
        return []


def idle_scheduler(home: Path, jobs: int, failed: int) -> tuple[Scheduler, FakeClock]:
    clock = FakeClock(datetime.now(UTC))
    ctx = Context.open(home, clock=clock)
    for index in range(jobs):
        ops.add_job(ctx, ops.spec_from_options(f"job-{index:05d}", {"every": "1h", "command": "true"}))
    with ctx.store.transaction() as doc:
        for index in range(failed):
            doc["jobs"][f"job-{index:05d}"]["state"]["last_status"] = "error"
    scheduler = Scheduler(ctx, LoopOptions(quiet=True))
    scheduler.engine = Engine(ctx, NoSpawn(), scheduler._owner("idle"),  # type: ignore[arg-type]
                              EngineOptions(prespawn_lead=2.0))
    return scheduler, clock


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--failed", type=int, default=20)
    parser.add_argument("--ticks", type=int, default=400)
    args = parser.parse_args()
    scheduler, clock = idle_scheduler(Path(tempfile.mkdtemp()) / "home", args.jobs, args.failed)
    times = []
    for _ in range(args.ticks):
        scheduler._last_heal = 0.0  # heal on every tick
        began = time.perf_counter()
        scheduler._tick()
        times.append(time.perf_counter() - began)
        clock.advance(1.0)
    warm = times[len(times) // 8:]
    print(f"idle healing tick, {args.jobs} jobs ({args.failed} failed): median {statistics.median(warm) * 1e6:.0f} us")


if __name__ == "__main__":
    main()
