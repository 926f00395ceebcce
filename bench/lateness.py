"""Fire lateness: K jobs due at the same instant; how late does each really start?

Every job's command is the same shell line for every scheduler compared:

    date "+%s.%N NAME" >> LEDGER

so lateness = the child's first `date` - the slot. p50 / p99 / max over every child of
every instant (ROUNDS instants per K). Compared in the same run:

- cronctl: `cronctl run --max-parallel K`, K `every: INTERVAL` jobs created in one
  apply, so their slots coincide; the loop's thread count (max) and CPU seconds are
  sampled from /proc around each instant;
- APScheduler 3.11 BackgroundScheduler, memory job store and SQLAlchemy SQLite job
  store, a thread pool of K, each job `subprocess.run(line, shell=True)`;
- the floor: a bare Python loop that sleeps to the instant and Popens every job;
- the gate floor: K shells started before the instant, each blocked on a pipe, released
  at the instant by one write each (no scheduler at all): the least a design that
  releases pre-started children can pay, i.e. the children's own start-up CPU;
- Debian's cron when it can be installed and started (minute granularity: one
  instant per K, on a minute boundary; its lateness includes its once-a-minute wake).

Usage: python bench/lateness.py [--ks 10,100,500] [--rounds 3] [--quick] [--no-cron] [--install-peers]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PYTHON,
    bench_env,
    cronctl_cmd,
    ensure_peers,
    fmt,
    machine_note,
    new_workdir,
    pct,
    proc_cpu_seconds,
    save_results,
    start_loop,
    stop_loop,
    table,
    threads_of,
    wait_ticking,
)

LINE = 'date "+%s.%N {name}" >> {ledger}'
PEERS = ("cronctl", "floor", "gate-floor", "aps-memory", "aps-sqlite", "cron")


def job_line(name: str, ledger: Path) -> str:
    return LINE.format(name=name, ledger=ledger)


def read_ledger(ledger: Path) -> list[tuple[float, str]]:
    out = []
    if not ledger.exists():
        return out
    for line in ledger.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((float(parts[0]), parts[1]))
    return out


def lateness_by_instant(ledger: Path, instants: list[float]) -> list[float]:
    """Each start belongs to the latest instant at or before it (starts are never early)."""
    values = []
    for started, _name in read_ledger(ledger):
        base = max((t for t in instants if t <= started + 0.0005), default=None)
        if base is not None:
            values.append(max(0.0, started - base))
    return values


def summarize(values: list[float], expected: int) -> dict[str, Any]:
    return {"n": len(values), "expected": expected, "p50_ms": pct(values, 50) * 1e3,
            "p99_ms": pct(values, 99) * 1e3, "max_ms": max(values) * 1e3 if values else float("nan")}


class Sampler:
    """Max thread count and CPU seconds of a process, sampled from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.max_threads = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self.cpu_start = proc_cpu_seconds(self.pid)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.max_threads = max(self.max_threads, threads_of(self.pid))
            except (OSError, KeyError):
                return
            self._stop.wait(0.01)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu = proc_cpu_seconds(self.pid) - self.cpu_start


# --- cronctl ----------------------------------------------------------------------------


def run_cronctl(k: int, rounds: int, interval: float) -> dict[str, Any]:
    work = new_workdir(f"late-cronctl-{k}")
    home, ledger, jobs = work / "home", work / "ledger", work / "jobs.yaml"
    lines = ["jobs:"]
    for i in range(k):
        name = f"j{i:04d}"
        lines += [f"  - name: {name}", f"    every: {interval:g}s", f"    command: {json.dumps(job_line(name, ledger))}"]
    jobs.write_text("\n".join(lines) + "\n")
    env = bench_env(home)
    subprocess.run([*cronctl_cmd(), "apply", "-f", str(jobs)], env=env, check=True, capture_output=True)
    doc = json.loads((home / "jobs.json").read_text())
    first = {e["state"]["next_run_at"] for e in doc["jobs"].values()}
    assert len(first) == 1, first
    t0 = datetime.fromisoformat(first.pop()).timestamp()
    instants = [t0 + r * interval for r in range(rounds)]
    loop = start_loop(home, "--max-parallel", str(k))
    threads, cpu = [], []
    try:
        wait_ticking(home, loop.pid)
        for when in instants:
            # The window starts early enough to include spawning ahead of the slot.
            time.sleep(max(0.0, when - 3.5 - time.time()))
            with Sampler(loop.pid) as sampler:
                time.sleep(max(0.0, when + 3.0 - time.time()))
            threads.append(sampler.max_threads)
            cpu.append(sampler.cpu)
        time.sleep(1.0)
    finally:
        stop_loop(loop)
    values = lateness_by_instant(ledger, instants)
    out = summarize(values, k * rounds)
    out.update(threads_max=max(threads), cpu_s_per_instant=sum(cpu) / len(cpu))
    shutil.rmtree(work, ignore_errors=True)
    return out


# --- APScheduler -----------------------------------------------------------------------------

APS_DRIVER = r'''
import json, subprocess, sys, threading, time
from datetime import datetime, timezone
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.executors.pool import ThreadPoolExecutor
k, rounds, interval, first, ledger, store = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6]
LINE = sys.argv[7]

def run(line):
    subprocess.run(line, shell=True)

jobstores = {}
if store == "sqlite":
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    jobstores["default"] = SQLAlchemyJobStore(url="sqlite:///" + sys.argv[8])
sched = BackgroundScheduler(jobstores=jobstores, executors={"default": ThreadPoolExecutor(max(10, k))},
                            job_defaults={"coalesce": True, "misfire_grace_time": 3600, "max_instances": 1},
                            timezone="UTC")
start = datetime.fromtimestamp(first, timezone.utc)
for i in range(k):
    name = "j%04d" % i
    sched.add_job(run, "interval", seconds=interval, start_date=start, args=[LINE.format(name=name, ledger=ledger)],
                  id=name, replace_existing=True)
sched.start()
print("ready", flush=True)
end = first + (rounds - 1) * interval + 3.0
while time.time() < end:
    time.sleep(0.2)
sched.shutdown(wait=True)
'''


def run_apscheduler(k: int, rounds: int, interval: float, store: str) -> dict[str, Any]:
    work = new_workdir(f"late-aps-{store}-{k}")
    ledger = work / "ledger"
    driver = work / "driver.py"
    driver.write_text(APS_DRIVER)
    first = float(int(time.time()) + 6)  # APScheduler with K jobs starts in well under 6 s
    instants = [first + r * interval for r in range(rounds)]
    proc = subprocess.Popen([PYTHON, str(driver), str(k), str(rounds), str(interval), str(first), str(ledger), store,
                             LINE, str(work / "jobs.sqlite")], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    threads, cpu = [], []
    assert proc.stdout is not None
    proc.stdout.readline()
    for when in instants:
        time.sleep(max(0.0, when - 1.0 - time.time()))
        try:
            with Sampler(proc.pid) as sampler:
                time.sleep(max(0.0, when + 3.0 - time.time()))
        except (OSError, FileNotFoundError):
            break
        threads.append(sampler.max_threads)
        cpu.append(sampler.cpu)
    proc.wait(timeout=120)
    values = lateness_by_instant(ledger, instants)
    out = summarize(values, k * rounds)
    out.update(threads_max=max(threads, default=0), cpu_s_per_instant=sum(cpu) / len(cpu) if cpu else None)
    shutil.rmtree(work, ignore_errors=True)
    return out


# --- the floor ---------------------------------------------------------------------------------


def run_floor(k: int, rounds: int, interval: float) -> dict[str, Any]:
    work = new_workdir(f"late-floor-{k}")
    ledger = work / "ledger"
    lines = [job_line(f"j{i:04d}", ledger) for i in range(k)]
    first = time.time() + 2.0
    instants = [first + r * interval for r in range(rounds)]
    cpu = []
    for when in instants:
        time.sleep(max(0.0, when - time.time()))
        started = time.process_time()
        children = [subprocess.Popen(line, shell=True) for line in lines]
        cpu.append(time.process_time() - started)
        for child in children:
            child.wait()
    values = lateness_by_instant(ledger, instants)
    out = summarize(values, k * rounds)
    out.update(threads_max=1, cpu_s_per_instant=sum(cpu) / len(cpu))
    shutil.rmtree(work, ignore_errors=True)
    return out


def run_gate_floor(k: int, rounds: int, interval: float) -> dict[str, Any]:
    """The best a release-at-the-gate design can do here: no scheduler, no store, no Python
    between the children and the slot but K writes. K shells are started blocked on a
    pipe each before the instant; at the instant each gets "go" and evaluates the line."""
    work = new_workdir(f"late-gate-{k}")
    ledger = work / "ledger"
    lines = [job_line(f"j{i:04d}", ledger) for i in range(k)]
    # The gate is the child's stdin, not its fd 3 as in cronctl's gate: the cost is the same (one
    # read, one close) and no fd of the parent can collide with it (`flock LOCK python ...` leaves
    # the lock on fd 3, which a dup2 onto 3 in preexec_fn lost to close_fds: every gate broken).
    script = 'read line; exec 0<&-; [ "$line" = go ] && eval "$1"'
    instants: list[float] = []
    for _ in range(rounds):
        gates = []
        children = []
        for line in lines:
            r, w = os.pipe()
            children.append(subprocess.Popen(["/bin/sh", "-c", script, "gate", line], stdin=r, close_fds=True))
            os.close(r)
            gates.append(w)
        when = time.time() + 0.5  # an instant after every child is waiting at its gate
        instants.append(when)
        time.sleep(max(0.0, when - time.time()))
        for w in gates:
            os.write(w, b"go\n")
        for w in gates:
            os.close(w)
        for child in children:
            child.wait()
    values = lateness_by_instant(ledger, instants)
    out = summarize(values, k * rounds)
    out.update(threads_max=1, cpu_s_per_instant=None)
    shutil.rmtree(work, ignore_errors=True)
    return out


# --- Debian cron -----------------------------------------------------------------------------------


def cron_available(install: bool) -> str | None:
    """None when cron can run here, else why not."""
    if os.geteuid() != 0:
        return "not root: cannot install a system crontab"
    if shutil.which("cron") is None and install and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "cron"], capture_output=True)
    if shutil.which("cron") is None:
        return "Debian's cron is not installed (apt-get install cron, or --install-peers)"
    return None


def run_cron(k: int) -> dict[str, Any]:
    """One minute boundary: K lines `* * * * *` in /etc/cron.d; lateness against that minute."""
    work = new_workdir(f"late-cron-{k}")
    ledger = work / "ledger"
    tab = Path("/etc/cron.d/cronctl-bench")
    started_cron = None
    if subprocess.run(["pgrep", "-x", "cron"], capture_output=True).returncode != 0:
        started_cron = subprocess.Popen(["cron", "-f"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
    try:
        # cron re-reads a changed /etc/cron.d at its once-a-minute wake: the file is
        # written just after a boundary, picked up at the next one, measured at the one after.
        time.sleep(60 - time.time() % 60 + 1.0)
        # In a crontab "%" ends the command (the rest is its stdin): escaped.
        tab.write_text("".join(f"* * * * * root {job_line(f'j{i:04d}', ledger)}\n".replace("%", "\\%")
                               for i in range(k)))
        boundary = (int(time.time()) // 60 + 2) * 60
        time.sleep(max(0.0, boundary + 10.0 - time.time()))
    finally:
        tab.unlink(missing_ok=True)
        if started_cron is not None:
            started_cron.terminate()
            started_cron.wait(timeout=10)
    values = [t - boundary for t, _ in read_ledger(ledger) if boundary <= t < boundary + 30]
    out = summarize(values, k)
    out.update(threads_max=None, cpu_s_per_instant=None)
    shutil.rmtree(work, ignore_errors=True)
    return out


# --- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", default="10,100,500")
    parser.add_argument("--rounds", type=int, default=3, help="instants per K (>= 3)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between instants")
    parser.add_argument("--quick", action="store_true", help="K = 10,100; 3 rounds; no cron")
    parser.add_argument("--no-cron", action="store_true")
    parser.add_argument("--no-apscheduler", action="store_true")
    parser.add_argument("--only", default=None, help="comma list of: cronctl,floor,aps-memory,aps-sqlite,cron")
    parser.add_argument("--install-peers", action="store_true", help="pip-install APScheduler/SQLAlchemy, apt-get cron")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    ks = [10, 100] if args.quick else [int(x) for x in args.ks.split(",")]
    rounds = max(3, args.rounds)
    wanted = set((args.only or "cronctl,floor,gate-floor,aps-memory,aps-sqlite,cron").split(","))
    if args.quick or args.no_cron:
        wanted.discard("cron")
    notes = [machine_note()]
    if not args.no_apscheduler and not ensure_peers(args.install_peers):
        notes.append("APScheduler 3.11 / SQLAlchemy not importable: skipped (pip install -e '.[bench]')")
        wanted -= {"aps-memory", "aps-sqlite"}
    elif args.no_apscheduler:
        wanted -= {"aps-memory", "aps-sqlite"}
    if "cron" in wanted:
        why = cron_available(args.install_peers)
        if why:
            notes.append(f"cron skipped: {why}")
            wanted.discard("cron")
    elif not args.quick:
        notes.append("cron skipped (--no-cron)")
    else:
        notes.append("cron skipped in --quick mode (it needs a minute per K)")
    results: dict[str, dict[int, Any]] = {}
    for k in ks:
        for peer in PEERS:
            if peer not in wanted:
                continue
            print(f"lateness: {peer} K={k} ...", file=sys.stderr, flush=True)
            if peer == "cronctl":
                res = run_cronctl(k, rounds, args.interval)
            elif peer == "floor":
                res = run_floor(k, rounds, min(args.interval, 3.0))
            elif peer == "gate-floor":
                res = run_gate_floor(k, rounds, min(args.interval, 3.0))
            elif peer == "aps-memory":
                res = run_apscheduler(k, rounds, args.interval, "memory")
            elif peer == "aps-sqlite":
                res = run_apscheduler(k, rounds, args.interval, "sqlite")
            else:
                res = run_cron(k)
            results.setdefault(peer, {})[k] = res
    rows = []
    for k in ks:
        floor = results.get("floor", {}).get(k)
        for peer in PEERS:
            res = results.get(peer, {}).get(k)
            if res is None:
                continue
            ratio = res["p99_ms"] / floor["p99_ms"] if floor and floor["p99_ms"] else None
            rows.append([k, peer, f"{res['n']}/{res['expected']}", fmt(res["p50_ms"]), fmt(res["p99_ms"]),
                         fmt(res["max_ms"]), fmt(ratio, 2), fmt(res.get("threads_max")),
                         fmt(res.get("cpu_s_per_instant"), 2)])
    cmd = "python bench/lateness.py" + (" --quick" if args.quick else f" --ks {args.ks} --rounds {rounds}")
    text = table(f"Fire lateness (ms; {rounds} instants per K; child start - slot)",
                 ["K", "scheduler", "starts seen", "p50", "p99", "max", "p99 / floor p99", "threads (max)",
                  "CPU s per instant"], rows, command=cmd)
    text += "\n" + "\n".join(f"- {note}" for note in notes) + "\n"
    print(text)
    data = {"results": {p: {str(k): v for k, v in r.items()} for p, r in results.items()}, "notes": notes}
    save_results(args.results, "lateness", data, text)
    return data


if __name__ == "__main__":
    main()
