"""Scale curve, in-process: an injected clock, a fake supervisor, no forks.

For 1k, 10k and 50k jobs: the cost of a loop tick when nothing is due (heal + control
+ engine tick + heartbeat, what the idle loop pays every second), of claiming and
dispatching 500 due jobs, of one lease renewal for 500 running runs, and of recording
one finish and 500 finishes. Each figure is the median of several rounds. The idle tick
also counts how often the store file was read and parsed: it must be 0 while the file
does not change.

Usage: python bench/scale.py [--sizes 1000,10000,50000] [--rounds 5] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median, new_workdir, populate, save_results, table

DUE = 500


class FakeSupervisor:
    """The runner's interface without processes: every spawn 'succeeds' at once."""

    def __init__(self, on_result: Any = None, **_: Any) -> None:
        self.on_result = on_result
        self._pids = itertools.count(10_000_000)
        self.runs: set[str] = set()

    def start(self) -> None:
        pass

    def spawn_gated(self, req: Any) -> Any:
        from cronctl.proc.spawn import Spawned

        self.runs.add(req.run_id)
        return Spawned(req.run_id, next(self._pids), 1.0)

    def open_gates(self, run_ids: Any, at: float | None = None, before: Any = None) -> None:
        ids = list(run_ids)
        if before is not None:
            before(ids)

    def schedule_gates(self, run_ids: Any, at: float, before: Any = None) -> None:
        self.open_gates(run_ids, before=before)

    def cancel_gate(self, run_id: str) -> None:
        self.runs.discard(run_id)

    def kill(self, run_id: str, reason: str) -> bool:
        return run_id in self.runs

    def running(self) -> list[str]:
        return list(self.runs)

    def shutdown(self, reason: str = "shutdown", wait: float | None = None) -> None:
        self.runs.clear()


class CountingStore:
    """Counts full reads (open + parse) of the store going through this Store."""

    def __init__(self, store: Any) -> None:
        self.reads = 0
        original = store._read_raw

        def counted() -> Any:
            self.reads += 1
            return original()

        store._read_raw = counted


def _timed(fn: Any) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def result_for(run_id: str) -> Any:
    from cronctl.proc.run import RunResult

    return RunResult(run_id=run_id, status="success", exit_code=0, signal=None, reason=None, started_mono=1.0,
                     ended_mono=1.5, duration=0.5, output_tail="ok\n", log_truncated=False, leftovers_killed=0)


def measure(size: int, rounds: int) -> dict[str, Any]:
    from cronctl.clock import FakeClock
    from cronctl.loop.engine import Engine, EngineOptions
    from cronctl.loop.scheduler import LoopOptions, Scheduler
    from cronctl.timefmt import to_iso

    work = new_workdir(f"scale-{size}")
    clock = FakeClock()
    start = clock.now()
    # Every job hourly, first slot an hour away: nothing due. DUE of them are due at +30 min.
    ctx = populate(work / "home", size, clock=clock, command="true")
    ctx.audit.clock = clock
    with ctx.store.transaction() as doc:
        for name in sorted(doc["jobs"])[:DUE]:
            doc["jobs"][name]["state"]["next_run_at"] = to_iso(start + timedelta(minutes=30))
    store_bytes = ctx.paths.store.stat().st_size
    sched = Scheduler(ctx, LoopOptions(quiet=True, lease=60.0), supervisor_factory=FakeSupervisor)
    sup = FakeSupervisor()
    engine = Engine(ctx, sup, sched._owner("bench"), EngineOptions(lease=60.0, max_parallel=None, prespawn_lead=0.0)
                    if "prespawn_lead" in EngineOptions.__dataclass_fields__ else EngineOptions(lease=60.0))
    sup.on_result = engine.on_result
    sched.engine = engine
    sched.supervisor = sup  # type: ignore[assignment]
    counter = CountingStore(ctx.store)

    def idle_tick() -> None:
        sched._last_heal = 0.0  # the real loop heals once a second, i.e. on every idle tick
        sched._tick()
        sched._write_heartbeat(stopped_cleanly=False)

    idle_tick()  # warm: the first tick reads the store once
    reads_before = counter.reads
    idle = [_timed(idle_tick) for _ in range(max(rounds, 5))]
    idle_reads = counter.reads - reads_before

    def touch() -> None:
        with ctx.store.transaction() as doc:
            doc["counters"]["bench"] = int(doc["counters"].get("bench") or 0) + 1

    writes = [_timed(touch) for _ in range(rounds)]
    changed_tick = []
    for _ in range(rounds):
        touch()
        changed_tick.append(_timed(idle_tick))

    # Claim + dispatch DUE jobs in one tick (one claim write, one dispatch write).
    clock.advance(31 * 60)
    claim = _timed(engine.fire_due)
    claimed = len(engine.active)
    renew = [_timed(lambda: engine.renew_if_due(force=True)) for _ in range(rounds)]
    run_ids = list(engine.active)
    one = run_ids[0]
    engine.on_result(result_for(one))
    finish_one = _timed(engine.record_results)
    for run_id in run_ids[1:]:
        engine.on_result(result_for(run_id))
    finish_all = _timed(engine.record_results)
    return {
        "jobs": size, "store_mib": round(store_bytes / 2**20, 2),
        "idle_tick_ms": round(median(idle) * 1e3, 2), "idle_tick_store_reads": idle_reads,
        "idle_rounds": len(idle),
        "tick_after_change_ms": round(median(changed_tick) * 1e3, 2),
        "store_write_ms": round(median(writes) * 1e3, 2),
        "claim_dispatch_500_ms": round(claim * 1e3, 2), "claimed": claimed,
        "renew_500_ms": round(median(renew) * 1e3, 2),
        "finish_1_ms": round(finish_one * 1e3, 2), "finish_499_ms": round(finish_all * 1e3, 2),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000 and 3 rounds")
    parser.add_argument("--results", type=Path, default=None, help="directory to save scale.json/.md in")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    sizes = [1000, 10000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rounds = 3 if args.quick else args.rounds
    rows = [measure(size, rounds) for size in sizes]
    base = rows[0]
    lines = []
    for row in rows:
        factor = row["jobs"] / base["jobs"]
        lines.append([f"{row['jobs']:,}", row["store_mib"], row["idle_tick_ms"], row["idle_tick_store_reads"],
                      row["tick_after_change_ms"], row["store_write_ms"], row["claim_dispatch_500_ms"],
                      row["renew_500_ms"], row["finish_1_ms"], row["finish_499_ms"],
                      f"x{row['idle_tick_ms'] / base['idle_tick_ms']:.2f} for x{factor:.0f} jobs"])
    text = table("Scale curve (in-process, fake clock and supervisor, ms, median)",
                 ["jobs", "store MiB", "idle tick", "store reads in idle ticks", "tick after a store change",
                  "store write", "claim+dispatch 500", "renew 500", "finish 1", "finish 499", "idle tick growth"],
                 lines, command="python bench/scale.py" + (" --quick" if args.quick else ""))
    print(text)
    data = {"rows": rows}
    save_results(args.results, "scale", data, text)
    if args.json:
        import json

        print(json.dumps(data, indent=1))
    return data


if __name__ == "__main__":
    main()
