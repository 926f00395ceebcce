"""Idle cost: N jobs, none due for an hour. The loop's CPU seconds over a window and peak RSS.

For N = 1,000, 10,000 and 50,000: `cronctl run` on a home with N `every: 2h` jobs (built
in one store write), and APScheduler 3.11 (BackgroundScheduler, memory job store, N
interval jobs of 2 h) in the same run. After a settle period, CPU seconds (the sum over the
process's threads of /proc/PID/task/*/schedstat, in nanoseconds: utime's 10 ms clock ticks
are too coarse for an idle loop) over WINDOW seconds, as % of one core, and VmHWM.
"ready" is the time from starting `cronctl run` to its first heartbeat with a tick done
(the process's start, its imports, the first read of the store and the first tick),
polled every 2 ms.

Usage: python bench/idle.py [--sizes 1000,10000,50000] [--window 60] [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PYTHON,
    ensure_peers,
    fmt,
    machine_note,
    new_workdir,
    populate,
    threads_cpu_seconds,
    save_results,
    start_loop,
    stop_loop,
    table,
    vm_hwm_mib,
    vm_rss_mib,
    wait_for,
    wait_ticking,
)

SETTLE = 5.0

APS_IDLE = r'''
import sys, time
from apscheduler.schedulers.background import BackgroundScheduler
n = int(sys.argv[1])
def noop():
    pass
sched = BackgroundScheduler(timezone="UTC")
for i in range(n):
    sched.add_job(noop, "interval", hours=2, id="job-%05d" % i)
sched.start()
print("ready", flush=True)
time.sleep(3600)
'''


def measure_process(pid: int, window: float) -> dict[str, Any]:
    time.sleep(SETTLE)
    before = threads_cpu_seconds(pid)
    started = time.monotonic()
    time.sleep(window)
    cpu = threads_cpu_seconds(pid) - before
    elapsed = time.monotonic() - started
    return {"cpu_s": round(cpu, 4), "window_s": round(elapsed, 1), "core_pct": round(100 * cpu / elapsed, 3),
            "hwm_mib": round(vm_hwm_mib(pid), 1), "rss_mib": round(vm_rss_mib(pid), 1)}


def run_cronctl(n: int, window: float) -> dict[str, Any]:
    work = new_workdir(f"idle-{n}")
    home = work / "home"
    populate(home, n, every="2h")
    started = time.perf_counter()
    loop = start_loop(home)
    try:
        wait_for(lambda: ticked(home, loop.pid), timeout=120, interval=0.002)
        ready_ms = round((time.perf_counter() - started) * 1e3)
        wait_ticking(home, loop.pid, timeout=120)
        out = measure_process(loop.pid, window)
        out["ready_ms"] = ready_ms
        import json

        out["ticks"] = json.loads((home / "scheduler.json").read_text()).get("ticks")
    finally:
        stop_loop(loop)
    return out


def ticked(home: Path, pid: int) -> bool:
    import json

    try:
        beat = json.loads((home / "scheduler.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(beat.get("pid") == pid and beat.get("ticks", 0) >= 1)


def run_aps(n: int, window: float) -> dict[str, Any]:
    work = new_workdir(f"idle-aps-{n}")
    driver = work / "aps_idle.py"
    driver.write_text(APS_IDLE)
    proc = subprocess.Popen([PYTHON, str(driver), str(n)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        return measure_process(proc.pid, window)
    finally:
        proc.kill()
        proc.wait()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--quick", action="store_true", help="sizes 1000,10000; a 20 s window")
    parser.add_argument("--no-apscheduler", action="store_true")
    parser.add_argument("--install-peers", action="store_true")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [1000, 10000] if args.quick else [int(x) for x in args.sizes.split(",")]
    window = 20.0 if args.quick else args.window
    notes = [machine_note()]
    aps = not args.no_apscheduler and ensure_peers(args.install_peers)
    if not aps:
        notes.append("APScheduler skipped (not installed or --no-apscheduler)")
    rows, data = [], {}
    for n in sizes:
        print(f"idle: cronctl N={n} ...", file=sys.stderr, flush=True)
        mine = run_cronctl(n, window)
        data[f"cronctl-{n}"] = mine
        rows.append([f"{n:,}", "cronctl", mine["cpu_s"], fmt(mine["core_pct"], 3), mine["hwm_mib"], mine["rss_mib"],
                     mine["ready_ms"]])
        if aps:
            print(f"idle: apscheduler N={n} ...", file=sys.stderr, flush=True)
            theirs = run_aps(n, window)
            data[f"aps-{n}"] = theirs
            rows.append([f"{n:,}", "APScheduler (memory)", theirs["cpu_s"], fmt(theirs["core_pct"], 3),
                         theirs["hwm_mib"], theirs["rss_mib"], "-"])
    cmd = "python bench/idle.py" + (" --quick" if args.quick else f" --sizes {args.sizes} --window {window:g}")
    text = table(f"Idle cost (no job due for an hour; CPU over {window:g} s after {SETTLE:g} s settle)",
                 ["jobs", "scheduler", "CPU s", "% of one core", "peak RSS (VmHWM) MiB", "RSS at end MiB",
                  "ready ms"], rows,
                 command=cmd)
    text += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    print(text)
    save_results(args.results, "idle", {"rows": data, "notes": notes}, text)
    return data


if __name__ == "__main__":
    main()
