"""Random kill soak: kill -9 the loop at random instants, restart it, and audit the ledger.

Ten `every: 1s` jobs append one O_APPEND line at their start and one at their end,
with CRONCTL_SLOT and CRONCTL_RUN_ID. After the last kill, a clean loop runs
once more so every leftover claim is reclaimed; then the ledger and the audit
log are checked:

- duplicate slots: the same (job, slot) started by two different runs;
- overlapping runs: a job's run started while its previous run was still going
  (each job holds its own flock while it runs and reports when it cannot get it);
- unexplained slots: grid slots of the run window that neither started nor are
  accounted for by an audit row (run.missed counts, run.skipped, claim.reclaimed);
- unended claims: a run.claimed row whose run never got its ending row
  (run.finished, run.skipped, run.spawn_failed);
- unrecorded runs: a run that started (it wrote its ledger line) without a
  run.finished row;
- orphans: processes of the soak's runs still alive after the last loop stopped.

Every rotated audit file (audit.jsonl.N) is read, oldest first.

Usage: python bench/soak.py [--kills 1000] [--jobs 10] [--seed N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path

JOB_SCRIPT = (
    'echo "start $CRONCTL_JOB $CRONCTL_SLOT $CRONCTL_RUN_ID" >> "$LEDGER"; '
    'flock -n "$LOCKS/$CRONCTL_JOB" -c "sleep 0.3" || echo "overlap $CRONCTL_JOB $CRONCTL_SLOT $CRONCTL_RUN_ID" >> "$LEDGER"; '
    'echo "end $CRONCTL_JOB $CRONCTL_SLOT $CRONCTL_RUN_ID" >> "$LEDGER"'
)


def cronctl() -> list[str]:
    beside = Path(sys.executable).with_name("cronctl")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "cronctl"]


def write_jobs(path: Path, jobs: int, ledger: Path, locks: Path) -> None:
    lines = ["jobs:"]
    for index in range(jobs):
        lines += [f"  - name: soak-{index}", "    every: 1s", f"    command: {json.dumps(JOB_SCRIPT)}",
                  f"    env: {{LEDGER: {json.dumps(str(ledger))}, LOCKS: {json.dumps(str(locks))}}}",
                  "    kill_grace: 1s", "    timeout: 10s"]
    path.write_text("\n".join(lines) + "\n")


def start_loop(env: dict[str, str], jobs_file: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*cronctl(), "run", "-f", str(jobs_file)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def wait_ticking(home: Path, pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            hb = json.loads((home / "scheduler.json").read_text())
            if hb.get("pid") == pid and hb.get("ticks", 0) >= 1:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise RuntimeError("the loop did not start ticking")


def run(kills: int, jobs: int, seed: int, min_up: float, max_up: float) -> dict[str, object]:
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="cronctl-soak-"))
    home, ledger, locks = work / "home", work / "ledger", work / "locks"
    locks.mkdir()
    jobs_file = work / "jobs.yaml"
    write_jobs(jobs_file, jobs, ledger, locks)
    env = {**os.environ, "CRONCTL_HOME": str(home), "NO_COLOR": "1"}
    started = time.monotonic()
    for _ in range(kills):
        loop = start_loop(env, jobs_file)
        wait_ticking(home, loop.pid)
        time.sleep(rng.uniform(min_up, max_up))
        os.kill(loop.pid, signal.SIGKILL)
        loop.wait()
    final = start_loop(env, jobs_file)  # reclaims what the last kill left, then stops cleanly
    wait_ticking(home, final.pid)
    time.sleep(2.5)
    final.send_signal(signal.SIGTERM)
    final.wait(timeout=60)
    summary = analyse(home, ledger)
    summary["orphans"] = len(orphans_of(home))
    summary.update(kills=kills, jobs=jobs, seed=seed, seconds=round(time.monotonic() - started, 1), work=str(work))
    return summary


ENDING_EVENTS = ("run.finished", "run.skipped", "run.spawn_failed")


def audit_files(home: Path) -> list[Path]:
    """audit.jsonl and its rotations, oldest first (audit.jsonl.3, .2, .1, audit.jsonl)."""
    rotated = sorted(home.glob("audit.jsonl.*"), key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0,
                     reverse=True)
    return [*rotated, home / "audit.jsonl"]


def read_audit(home: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for path in audit_files(home):
        if path.exists():
            rows.extend(row for row in map(_parse, path.read_text().splitlines()) if row)
    return rows


def orphans_of(home: Path) -> list[int]:
    """Live processes whose environment names this soak's home: a run's leftovers."""
    marker = f"CRONCTL_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def analyse(home: Path, ledger: Path) -> dict[str, object]:
    starts: dict[tuple[str, str], set[str]] = defaultdict(set)
    overlaps = 0
    for line in ledger.read_text().splitlines() if ledger.exists() else []:
        parts = line.split()
        if len(parts) != 4:
            continue
        kind, job, slot, run_id = parts
        if kind == "start":
            starts[(job, slot)].add(run_id)
        elif kind == "overlap":
            overlaps += 1
    duplicates = sum(1 for runs in starts.values() if len(runs) > 1)
    rows = read_audit(home)
    claimed_runs = {r["run_id"] for r in rows if r["event"] == "run.claimed" and r.get("run_id")}
    ended_runs = {r["run_id"] for r in rows if r["event"] in ENDING_EVENTS and r.get("run_id")}
    finished_runs = {r["run_id"] for r in rows if r["event"] == "run.finished" and r.get("run_id")}
    started_runs = set().union(*starts.values()) if starts else set()
    # A claim is committed before its run.claimed row is appended: a kill between the two
    # leaves the claim without that row, and the next loop's reclaim records the slot instead.
    claimed = {(r["job"], r["slot"]) for r in rows
               if r["event"] in ("run.claimed", "run.finished") and r.get("slot")}
    missed = Counter()
    for r in rows:
        if r["event"] == "run.missed":
            missed[r["job"]] += int(r.get("count") or 0)
        elif r["event"] == "run.skipped":
            missed[r["job"]] += 1
    unexplained = 0
    slots_total = 0
    for job in sorted({job for job, _ in claimed}):
        grid = sorted(datetime.fromisoformat(slot) for j, slot in claimed if j == job)
        expected = round((grid[-1] - grid[0]).total_seconds()) + 1
        accounted = len(grid) + missed[job]
        slots_total += expected
        unexplained += max(0, expected - accounted)
    return {
        "slots": slots_total, "runs_started": sum(len(v) for v in starts.values()),
        "claimed_slots": len(claimed), "duplicates": duplicates, "overlaps": overlaps,
        "unexplained": unexplained,
        "unended_claims": len(claimed_runs - ended_runs),
        "unrecorded_runs": len(started_runs - finished_runs),
        "audit_files": sum(1 for p in audit_files(home) if p.exists()), "audit_rows": len(rows),
        "reclaimed": sum(1 for r in rows if r["event"] == "claim.reclaimed"),
        "missed_counted": sum(missed.values()),
    }


def _parse(line: str) -> dict[str, object] | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None  # a torn last line: readers skip it (SPEC §8)
    return row if isinstance(row, dict) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--min-up", type=float, default=0.2, help="shortest life of a loop before its kill (s)")
    parser.add_argument("--max-up", type=float, default=2.5, help="longest life of a loop before its kill (s)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    summary = run(args.kills, args.jobs, args.seed, args.min_up, args.max_up)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        for key, value in sorted(summary.items()):
            print(f"{key:>16}: {value}")


if __name__ == "__main__":
    main()
