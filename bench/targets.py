"""The speed targets of issue 27, each as a figure, the floor of the same run and their ratio.

Figures travel badly between machines (shared, busy, different); ratios to a floor timed
in the same run travel better. So every row here is measured beside its floor, and a
target is met when both its figure and its ratio are (on two different runs):

- commands (`list`, `list --json`, `status --json`, `resume`, `force-run --wait`,
  `next` of every job, `apply -f`): wall time, stdout a pipe, median of ROUNDS; the
  floor is `cronctl --version` (the interpreter and the console script, nothing else),
  timed in rounds alternated with the commands' so that both see the same load. Their
  CPU time (user + system, from the children's rusage) and its ratio are shown too: on
  a busy shared machine wall time follows the load, CPU time much less;
- loop ready at N jobs: from starting `cronctl run` to its first heartbeat with a tick
  done (bench/idle.py's probe); the floor is the bare loop: a Python process that reads
  and parses the same store document, writes a heartbeat file atomically, and is ready:
  the least any loop over that store pays before its first tick;
- idle loop: CPU of `cronctl run` over WINDOW seconds with N jobs none due for an hour,
  % of one core (bench/idle.py's probe); no floor (the target is absolute: cron and
  APScheduler sleep to their next job, ≈ 0).

Homes are built in one store write (bench/_common.populate), jobs `every: 1h` unless
the row says cron. `apply -f` reads a file of N new jobs, each `cron: "M * * * *"`.

Usage: python bench/targets.py [--rounds 9] [--window 30] [--only list,apply,loop,idle]
                               [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    PYTHON,
    bench_env,
    cronctl_cmd,
    machine_note,
    median,
    new_workdir,
    populate,
    save_results,
    table,
    wait_for,
)

# (row, size, argv after `cronctl`, target ms, target ratio to `--version`)
COMMANDS: tuple[tuple[str, int, tuple[str, ...], float, float], ...] = (
    ("`list`", 1000, ("list",), 150, 5),
    ("`list --json`", 1000, ("list", "--json"), 150, 5),
    ("`status --json`", 1000, ("status", "--json"), 150, 5),
    ("`resume JOB`", 1000, ("resume", "job-00007"), 200, 6.5),
    ("`force-run JOB --wait` (no loop)", 1000, ("force-run", "job-00009", "--wait"), 200, 6.5),
    ("`list`", 10000, ("list",), 400, 13),
    ("`list --json`", 10000, ("list", "--json"), 400, 13),
    ("`status --json`", 10000, ("status", "--json"), 400, 13),
    # `next` and `apply -f` have a figure as target; the ratio is the same share of the
    # `--version` the issue measured beside it (30 ms): 400 / 30 and 1,500 / 30.
    ("`next` (every job)", 10000, ("next",), 400, 13),
)
APPLY_TARGET_MS, APPLY_TARGET_RATIO = 1500, 50
READY_TARGET_MS, READY_TARGET_RATIO = 150, 2
IDLE_TARGET_PCT = 0.02

# The bare loop: read and parse the store, write a heartbeat atomically, say ready.
BARE_LOOP = r'''
import json, os, sys, msgspec
home = sys.argv[1]
with open(os.path.join(home, "jobs.json"), "rb") as handle:
    doc = msgspec.json.decode(handle.read())
beat = os.path.join(home, "bare-beat.json")
with open(beat + ".tmp", "w") as handle:
    json.dump({"pid": os.getpid(), "ticks": 1, "jobs": len(doc["jobs"])}, handle)
os.replace(beat + ".tmp", beat)
'''


CPU_SECONDS: list[float] = []  # the CPU time (user + system) of each command `wall` ran, in order


def wall(argv: list[str], env: dict[str, str]) -> float:
    """Wall time of one command (s); its CPU time goes to CPU_SECONDS."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_SECONDS.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 3):  # 3: a stale job, a legitimate `status` answer
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    return elapsed


def paired(argv: list[str], floor: list[str], env: dict[str, str], rounds: int) -> tuple[float, float, float, float]:
    """Medians (s) of the command and of its floor, alternated round by round: wall, then CPU."""
    mine, base, mine_cpu, base_cpu = [], [], [], []
    for _ in range(rounds):
        base.append(wall(floor, env))
        base_cpu.append(CPU_SECONDS[-1])
        mine.append(wall(argv, env))
        mine_cpu.append(CPU_SECONDS[-1])
    return median(mine), median(base), median(mine_cpu), median(base_cpu)


def home_of(n: int, homes: dict[int, dict[str, str]]) -> dict[str, str]:
    if n not in homes:
        home = new_workdir(f"targets-{n}") / "home"
        populate(home, n, every="1h")
        homes[n] = bench_env(home)
    return homes[n]


def row(what: str, jobs: int, figure: float, floor: float, floor_name: str, target: float,
        target_ratio: float | None, cpu: tuple[float, float] | None = None) -> list[Any]:
    """A table row; `cpu`: the CPU ms of the command and of its floor (steadier than wall
    time when the machine is busy: a shared 2-core machine gives a command a slice at a time)."""
    ratio = figure / floor if floor else float("nan")
    met = figure <= target and (target_ratio is None or ratio <= target_ratio)
    cpu_text = f"{cpu[0]:,.0f} / {cpu[1]:,.0f} = {cpu[0] / cpu[1]:.1f}×" if cpu and cpu[1] else "-"
    return [what, f"{jobs:,}", f"{figure:,.0f} ms", f"{floor:,.0f} ms ({floor_name})", f"{ratio:.1f}×", cpu_text,
            f"≤ {target:,.0f} ms" + (f", ≤ {target_ratio:g}×" if target_ratio else ""), "yes" if met else "no"]


def measure_commands(rounds: int, only: set[str], cronctl: list[str]) -> tuple[list[list[Any]], dict[str, Any]]:
    homes: dict[int, dict[str, str]] = {}
    rows, data = [], {}
    for what, n, args, target, ratio in COMMANDS:
        if not _wanted(args[0], only):
            continue
        env = home_of(n, homes)
        mine, base, mine_cpu, base_cpu = paired([*cronctl, *args], [*cronctl, "--version"], env, rounds)
        data[f"{' '.join(args)} @ {n}"] = {"ms": mine * 1e3, "version_ms": base * 1e3, "cpu_ms": mine_cpu * 1e3,
                                           "version_cpu_ms": base_cpu * 1e3}
        rows.append(row(what, n, mine * 1e3, base * 1e3, "`--version`", target, ratio,
                        (mine_cpu * 1e3, base_cpu * 1e3)))
    return rows, data


def _wanted(name: str, only: set[str]) -> bool:
    return not only or name in only


def cron_jobs_file(directory: Path, count: int) -> Path:
    path = directory / f"cron-jobs-{count}.yaml"
    lines = ["jobs:"]
    for index in range(count):
        lines += [f"  - name: job-{index:05d}", f'    cron: "{index % 60} * * * *"', f'    command: "echo {index}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def measure_apply(rounds: int, cronctl: list[str], count: int = 10000) -> tuple[list[Any], dict[str, Any]]:
    work = new_workdir("targets-apply")
    path = cron_jobs_file(work, count)
    mine, base, mine_cpu, base_cpu = [], [], [], []
    for index in range(rounds):
        env = bench_env(work / f"home-{index}")
        base.append(wall([*cronctl, "--version"], env))
        base_cpu.append(CPU_SECONDS[-1])
        mine.append(wall([*cronctl, "apply", "-f", str(path)], env))
        mine_cpu.append(CPU_SECONDS[-1])
    figure, floor = median(mine) * 1e3, median(base) * 1e3
    cpu = (median(mine_cpu) * 1e3, median(base_cpu) * 1e3)
    return (row("`apply -f` of new cron-expression jobs", count, figure, floor, "`--version`", APPLY_TARGET_MS,
                APPLY_TARGET_RATIO, cpu), {"ms": figure, "version_ms": floor, "cpu_ms": cpu[0],
                                           "version_cpu_ms": cpu[1]})


def loop_ready(home: Path) -> float:
    """ms from starting `cronctl run` to its first heartbeat with a tick done."""
    from _common import start_loop, stop_loop
    from idle import ticked

    started = time.perf_counter()
    loop = start_loop(home)
    try:
        wait_for(lambda: ticked(home, loop.pid), timeout=120, interval=0.002)
        return (time.perf_counter() - started) * 1e3
    finally:
        stop_loop(loop)


def bare_ready(home: Path) -> float:
    beat = home / "bare-beat.json"
    beat.unlink(missing_ok=True)
    started = time.perf_counter()
    proc = subprocess.Popen([PYTHON, "-c", BARE_LOOP, str(home)])
    wait_for(lambda: beat.exists() and json.loads(beat.read_text()).get("ticks") == 1, timeout=60, interval=0.002)
    elapsed = (time.perf_counter() - started) * 1e3
    proc.wait()
    return elapsed


def measure_ready(rounds: int, n: int = 10000) -> tuple[list[Any], dict[str, Any]]:
    home = new_workdir(f"targets-ready-{n}") / "home"
    populate(home, n, every="2h")
    mine, base = [], []
    for _ in range(rounds):
        base.append(bare_ready(home))
        mine.append(loop_ready(home))
    figure, floor = median(mine), median(base)
    return (row("loop ready (start to first tick)", n, figure, floor, "bare loop", READY_TARGET_MS,
                READY_TARGET_RATIO), {"ms": figure, "bare_ms": floor, "all": mine, "all_bare": base})


def measure_idle(window: float, n: int = 10000) -> tuple[list[Any], dict[str, Any]]:
    from idle import run_cronctl

    got = run_cronctl(n, window)
    pct = got["core_pct"]
    return ([f"idle loop, CPU over {window:g} s", f"{n:,}", f"{pct:.3f} % of a core", "-", "-", "-",
             f"≤ {IDLE_TARGET_PCT} %", "yes" if pct <= IDLE_TARGET_PCT else "no"], got)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--window", type=float, default=30.0, help="idle window, seconds")
    parser.add_argument("--only", default="", help="comma list: command names (list, status, resume, "
                        "force-run, next), apply, loop, idle")
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--cronctl", type=Path, default=None,
                        help="the console script to time the commands and apply of (e.g. another installation, "
                             "to compare); the loop rows always run this checkout's")
    args = parser.parse_args(argv)
    cronctl = [str(args.cronctl)] if args.cronctl else cronctl_cmd()
    only = {item for item in args.only.split(",") if item}
    from cli_latency import compile_bytecode

    compile_bytecode()
    rows, data = [], {}
    if not only or only - {"apply", "loop", "idle"}:
        got_rows, data["commands"] = measure_commands(args.rounds, only, cronctl)
        rows += got_rows
    for name, measure in (("apply", lambda: measure_apply(max(3, args.rounds // 3), cronctl)),
                          ("loop", lambda: measure_ready(args.rounds)), ("idle", lambda: measure_idle(args.window))):
        if _wanted(name, only):
            print(f"targets: {name} ...", file=sys.stderr, flush=True)
            got, data[name] = measure()
            rows.append(got)
    command = f"python bench/targets.py --rounds {args.rounds} --window {args.window:g}" + (
        f" --only {args.only}" if args.only else "") + (" --cronctl OTHER/bin/cronctl" if args.cronctl else "")
    text = table(f"Speed targets of issue 27 (medians of {args.rounds} rounds; ratio = figure / floor, same run)",
                 ["what", "jobs", "figure", "floor", "ratio", "CPU ms / floor's = ratio", "target", "met"], rows,
                 command=command)
    text += f"\n- {machine_note()}\n"
    print(text)
    save_results(args.results, "targets", data, text)
    return data


if __name__ == "__main__":
    main()
