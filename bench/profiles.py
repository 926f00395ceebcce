"""Profiles behind the targets that are missed (see docs/benchmarks.md).

- `burst`: a loop with K jobs due at one instant, py-spy (`pip install py-spy`) sampling
  the loop from 0.5 s before the instant for 2 s (where its threads spend CPU), and the
  CPU time the children themselves used (getrusage of a bare gate release of K children,
  the same gate script and command as the loop's), which bounds lateness on 2 cores;
- `status`: pyinstrument (`pip install pyinstrument`) of `cronctl status --json` at N jobs.

Usage: python bench/profiles.py [burst|status|all] [--k 500] [--jobs 1000] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PYTHON,
    bench_env,
    cronctl_cmd,
    machine_note,
    new_workdir,
    pct,
    populate,
    start_loop,
    stop_loop,
    wait_ticking,
)
from lateness import job_line


def summarize_spy(raw: Path, top: int = 15) -> str:
    threads: Counter[str] = Counter()
    frames: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        parts = stack.split(";")
        threads[parts[0].split("(")[0].strip() + " " + parts[0].split(":")[-1].strip()] += n
        inner = next((f for f in reversed(parts) if "cronctl/" in f), parts[-1])
        frames[inner.strip()] += n
    out = [f"samples (active only) {total}", "by thread:"]
    out += [f"  {n:5d}  {name}" for name, n in threads.most_common()]
    out.append("innermost cronctl frame:")
    out += [f"  {n:5d}  {name}" for name, n in frames.most_common(top)]
    return "\n".join(out)


def burst(k: int, results: Path) -> str:
    work = new_workdir("prof-burst")
    home, ledger, jobs = work / "home", work / "ledger", work / "jobs.yaml"
    lines = ["jobs:"]
    for i in range(k):
        lines += [f"  - name: j{i:04d}", "    every: 10s", f"    command: {json.dumps(job_line(f'j{i:04d}', ledger))}"]
    jobs.write_text("\n".join(lines) + "\n")
    subprocess.run([*cronctl_cmd(), "apply", "-f", str(jobs)], env=bench_env(home), check=True, capture_output=True)
    doc = json.loads((home / "jobs.json").read_text())
    t0 = datetime.fromisoformat(next(iter(doc["jobs"].values()))["state"]["next_run_at"]).timestamp()
    loop = start_loop(home, "--max-parallel", str(k))
    raw = results / f"py-spy-burst-k{k}.txt"
    try:
        wait_ticking(home, loop.pid)
        time.sleep(max(0.0, t0 - 0.5 - time.time()))
        spy = shutil.which("py-spy") or str(Path(PYTHON).with_name("py-spy"))
        subprocess.run([spy, "record", "-r", "250", "-d", "2", "-f", "raw", "-o", str(raw), "--nonblocking", "-t",
                        "-p", str(loop.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        time.sleep(1.0)
    finally:
        stop_loop(loop)
    starts = sorted(float(line.split()[0]) - t0 for line in ledger.read_text().splitlines())
    text = [f"## burst: K={k}, one instant, `cronctl run --max-parallel {k}`",
            f"lateness of this instant: p50 {pct(starts, 50) * 1e3:.0f} ms, p99 {pct(starts, 99) * 1e3:.0f} ms "
            f"(n={len(starts)})", "", "py-spy of the loop from 0.5 s before the instant, 2 s, 250 Hz:",
            summarize_spy(raw), "", children_cpu(k), "", exec_floor()]
    return "\n".join(text)


def _release(k: int, cancel: bool) -> tuple[float, list[float]]:
    """Children's CPU (getrusage) for K gated children released (or cancelled) at once."""
    from cronctl.proc.spawn import RunRequest
    from cronctl.proc.supervisor import Supervisor

    work = new_workdir("prof-children")
    ledger = work / "ledger"
    sup = Supervisor(on_result=lambda result: None)
    sup.start()
    try:
        ids = []
        for i in range(k):
            req = RunRequest(run_id=f"r{i}", job=f"j{i}", command=job_line(f"j{i:04d}", ledger), cwd=None,
                             env={"CRONCTL_RUN_ID": f"r{i}"}, timeout=60, kill_grace=1, log_path=work / f"{i}.log")
            sup.spawn_gated(req)
            ids.append(req.run_id)
        time.sleep(1.0)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        released = time.time()
        if cancel:
            for run_id in ids:
                sup.cancel_gate(run_id)
        else:
            sup.open_gates(ids)
        sup.wait_idle(60)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        sup.shutdown(wait=20)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    starts = [] if cancel else sorted(float(line.split()[0]) - released for line in ledger.read_text().splitlines())
    return cpu, starts


def children_cpu(k: int) -> str:
    """What K released children cost the machine themselves, with cronctl's own runner and no loop.

    getrusage counts a child's whole life, so the same K children are also spawned and
    cancelled at the gate: the difference is what they use from the gate opening on.
    """
    total, starts = _release(k, cancel=False)
    gate_only, _ = _release(k, cancel=True)
    after = max(0.0, total - gate_only)
    cores = os.cpu_count() or 1
    return (f"{k} gated children released at once (cronctl's runner, no loop): their CPU from the gate opening "
            f"to their exit is {after:.2f} s ({after / k * 1e3:.2f} ms each; {total:.2f} s with the gate shells' "
            f"start, {gate_only:.2f} s when cancelled instead). On {cores} cores that alone is "
            f"{after / cores * 1e3:.0f} ms of the whole machine, most of it before each child's `date` reads "
            f"the clock. Their lateness here: p50 {pct(starts, 50) * 1e3:.0f} ms, p99 {pct(starts, 99) * 1e3:.0f} ms.")


def exec_floor(rounds: int = 200) -> str:
    """CPU of one child that does nothing but exist: spawned, exec'd and reaped one at a
    time, so that no sibling competes. A burst of K children needs at least K times this."""
    work = new_workdir("prof-exec")
    ledger = work / "ledger"
    cases = [("/bin/true", ["/bin/true"]), ("date +%s.%N", ["/bin/date", "+%s.%N"]),
             ("sh -c 'date ... >> ledger' (the benchmark's job)", ["/bin/sh", "-c", job_line("j0000", ledger)])]
    rows = []
    for label, argv in cases:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        for _ in range(rounds):
            pid = os.posix_spawn(argv[0], argv, os.environ,
                                 file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)])
            os.waitpid(pid, 0)
        wall = (time.perf_counter() - started) / rounds
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / rounds
        rows.append(f"- {label}: {cpu * 1e3:.2f} ms CPU, {wall * 1e3:.2f} ms wall per child ({rounds} in a row)")
    return "One child alone (posix_spawn, exec, exit, reaped; nothing else running):\n" + "\n".join(rows)


def status(n: int, results: Path) -> str:
    home = new_workdir("prof-status") / "home"
    populate(home, n)
    out = results / f"pyinstrument-status-{n}.txt"
    # The fast path itself rather than the console script: that one leaves with os._exit,
    # before pyinstrument could write its report.
    code = "from cronctl import fastpath; fastpath.run(fastpath.parse(['status', '--json']))"
    subprocess.run([PYTHON, "-m", "pyinstrument", "-i", "0.001", "-o", str(out), "-c", code],
                   env=bench_env(home), check=True, stdout=subprocess.DEVNULL)
    return f"## `cronctl status --json` at {n:,} jobs (pyinstrument)\n\n" + out.read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", default="all", choices=["burst", "status", "all"])
    parser.add_argument("--k", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--results", type=Path, default=Path(__file__).resolve().parent / "results" / "profiles")
    args = parser.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    parts = [f"- {machine_note()}"]
    if args.what in ("burst", "all"):
        parts.append(burst(args.k, args.results))
        if args.k != 100:
            parts.append(children_cpu(100))
    if args.what in ("status", "all"):
        parts.append(status(args.jobs, args.results))
    text = "\n\n".join(parts) + "\n"
    (args.results / "profiles.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
