"""Heal and takeover times, each p50 over TRIALS trials with real `cronctl run` processes.

- dead-owner reclaim: a loop runs a long job, is killed with SIGKILL, a new loop starts;
  time from the new loop's `scheduler.started` row to its `claim.reclaimed` (owner_dead)
  row, and in ticks (one tick = the heal period, 1 s);
- expired-lease reclaim: a claim held in the name of the running loop itself but supervised
  by nobody (leaked), with a lease of LEASE seconds; time from the lease's expiry to its
  `claim.reclaimed` (lease_expired) row;
- standby takeover: a leader and a `cronctl run --standby`; the leader is killed with
  SIGKILL; time from the kill to the standby's `scheduler.takeover` row.

Usage: python bench/heal_times.py [--trials 10] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    bench_env,
    cronctl_cmd,
    machine_note,
    median,
    new_workdir,
    save_results,
    start_loop,
    stop_loop,
    table,
    wait_for,
    wait_ticking,
)

LEASE = 2.0


def rows(home: Path, event: str) -> list[dict[str, Any]]:
    try:
        lines = (home / "audit.jsonl").read_bytes().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get("event") == event:
            out.append(row)
    return out


def ts(row: dict[str, Any]) -> float:
    return datetime.fromisoformat(row["ts"]).timestamp()


def kill9(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def dead_owner(trials: int) -> list[float]:
    work = new_workdir("heal-dead")
    home = work / "home"
    env = bench_env(home)
    subprocess.run([*cronctl_cmd(), "add", "long", "--every", "1h", "--", "sleep 300"], env=env, check=True,
                   capture_output=True)
    out = []
    loop = start_loop(home)
    try:
        for _ in range(trials):
            wait_ticking(home, loop.pid)
            before = len(rows(home, "run.started"))
            subprocess.run([*cronctl_cmd(), "force-run", "long"], env=env, check=True, capture_output=True)
            wait_for(lambda: len(rows(home, "run.started")) > before, 30)
            kill9(loop)
            seen = len(rows(home, "claim.reclaimed"))
            loop = start_loop(home)
            wait_for(lambda: len(rows(home, "claim.reclaimed")) > seen, 30)
            started = [r for r in rows(home, "scheduler.started") if r.get("pid") == loop.pid][-1]
            reclaimed = rows(home, "claim.reclaimed")[-1]
            assert reclaimed["reason"] == "owner_dead", reclaimed
            out.append(max(0.0, ts(reclaimed) - ts(started)))
    finally:
        stop_loop(loop)
    return out


def expired_lease(trials: int) -> list[float]:
    from cronctl.context import Context

    work = new_workdir("heal-lease")
    home = work / "home"
    env = bench_env(home)
    subprocess.run([*cronctl_cmd(), "add", "leaky", "--every", "1h", "--", "true"], env=env, check=True,
                   capture_output=True)
    ctx = Context.open(home)
    out = []
    loop = start_loop(home)
    try:
        hb = wait_ticking(home, loop.pid)
        rng = random.Random(trials)
        for trial in range(trials):
            # A random phase against the loop's 1 s heal period (right after a reclaim the
            # next claim would always expire just after a heal: the worst case, every time).
            time.sleep(rng.uniform(0.0, 1.0))
            seen = len(rows(home, "claim.reclaimed"))
            expires_mono = time.monotonic() + LEASE
            expires_wall = time.time() + LEASE
            run_id = f"leaked-{trial:03d}-{os.getpid()}"
            with ctx.store.transaction() as doc:
                now = datetime.now(UTC)
                doc["jobs"]["leaky"]["state"]["claims"][run_id] = {
                    "run_id": run_id, "slot": now.isoformat(timespec="milliseconds"), "trigger": "force",
                    "attempt": 1, "owner": {"generation": "leaked", "pid": hb["pid"], "start_time": hb["start_time"],
                                            "boot_id": hb["boot_id"]},
                    "boot_id": hb["boot_id"], "claimed_at": now.isoformat(timespec="milliseconds"),
                    "lease_until_mono": expires_mono,
                    "lease_until": (now + timedelta(seconds=LEASE)).isoformat(timespec="milliseconds"),
                    "dispatched": False, "child": None, "started_at": None, "started_mono": None, "timeout": 0,
                    "kill_grace": 1.0, "late": False, "due_at": None,
                }
            wait_for(lambda: len(rows(home, "claim.reclaimed")) > seen, 30)
            reclaimed = rows(home, "claim.reclaimed")[-1]
            assert reclaimed["reason"] == "lease_expired" and reclaimed["run_id"] == run_id, reclaimed
            out.append(ts(reclaimed) - expires_wall)
    finally:
        stop_loop(loop)
    return out


def takeover(trials: int) -> list[float]:
    work = new_workdir("heal-takeover")
    home = work / "home"
    out = []
    leader = start_loop(home)
    standby = None
    try:
        for _ in range(trials):
            wait_ticking(home, leader.pid)
            standby = start_loop(home, "--standby")
            wait_for(lambda: (home / "standby.json").exists() and
                     json.loads((home / "standby.json").read_text() or "{}").get("pid") == standby.pid, 30)
            seen = len(rows(home, "scheduler.takeover"))
            killed_at = time.time()
            kill9(leader)
            wait_for(lambda: len(rows(home, "scheduler.takeover")) > seen, 30)
            out.append(ts(rows(home, "scheduler.takeover")[-1]) - killed_at)
            leader, standby = standby, None
    finally:
        stop_loop(leader)
        if standby is not None:
            stop_loop(standby)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="5 trials")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    trials = 5 if args.quick else max(10, args.trials)
    data: dict[str, list[float]] = {}
    for name, fn in (("dead-owner reclaim (after the new loop started)", dead_owner),
                     (f"expired-lease reclaim (after a {LEASE:g} s lease expired)", expired_lease),
                     ("standby takeover (after kill -9 of the leader)", takeover)):
        print(f"heal: {name} ...", file=sys.stderr, flush=True)
        data[name] = fn(trials)
    table_rows = [[name, len(v), f"{median(v) * 1e3:.0f}", f"{max(v) * 1e3:.0f}", f"{median(v) / 1.0:.2f}",
                   f"{max(v) / 1.0:.2f}"] for name, v in data.items()]
    cmd = "python bench/heal_times.py" + (" --quick" if args.quick else f" --trials {trials}")
    text = table("Heal and takeover times (ms)", ["what", "trials", "p50", "max", "p50 in ticks (1 s)", "max in ticks"],
                 table_rows, command=cmd)
    text += f"\n- {machine_note()}\n"
    print(text)
    save_results(args.results, "heal_times", data, text)
    return data


if __name__ == "__main__":
    main()
