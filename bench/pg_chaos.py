"""Chaos on a PostgreSQL store: loops playing hosts, killed, stopped, cut off, the database restarted.

Three (`--loops`) `cronctl run` loops share one throwaway PostgreSQL server, each as its own
host ($CRONCTL_HOST_ID), with four `overlap: skip` jobs every 0.5, 1, 1.5 and 2 s (the 2 s
one runs 3 s: every other slot of it is skipped, and a run of it outlives its loop's death
long enough for the process check to see a guard that did not end it). Then
`--actions` random actions, 0.05-0.5 s apart:

- kill -9 of a loop (restarted on its host within a second: its runs are reclaimed there
  as `owner_dead`);
- kill -9 of a loop, restart nothing: it stays down for 15-30 s, past the lease plus
  margin (14 s), so another host reclaims its runs; its runs' guards must end them within
  kill_grace (1 s) of its death. Then it comes back, so the cluster has its three loops
  most of the time;
- SIGSTOP of a loop for 0.5-40 s (most outlast the lease plus margin, 14 s: another host
  reclaims its runs, and its late finishes must be rejected as stale, `run.fenced`);
- a stall of a loop's network for 0.5-90 s: each loop reaches PostgreSQL through its own
  proxy (tests/pg/stallproxy.py), which stops forwarding but keeps every socket open (the
  loop's round-trip deadlines and self-fence must keep its runs from overlapping the
  copies other hosts start after reclaiming them);
- `pg_terminate_backend` of a loop's connection;
- a fast, or an immediate (crash), restart of PostgreSQL.

Every run appends to one ledger: `start JOB SLOT ATTEMPT RUN_ID`, then holds the job's
flock while it sleeps (`overlap ...` when it cannot: two runs of a skip job at once), then
`end ...`. When the actions are done every loop is let go on for the lease plus margin,
stopped, and the ledger and the database are checked:

- duplicates: a (job, slot, attempt) started by more than one run;
- overlaps: runs of a skip job at the same time;
- stale writes accepted: a run reclaimed from its owner whose ending is not that reclaim's
  (`lost`/`not_started`); `stale_rejected` counts the `run.fenced` rows (at least one);
- processes left running: a process carrying the CRONCTL_RUN_ID of a run that is not live
  in the store (ended, or reclaimed by another host), or of a loop dead for more than
  kill_grace + 1 s, still there 3 s later; checked after every action and, once every loop
  is stopped, any process of a run at all (bench/chaos_procs.py). `live_runs_left` counts
  the runs the store still has `claimed` or `running` at the end;
- loops died: a loop that exited by itself after `loop running`, or with an `internal
  error`; `loops_refused_start` counts the loops that, restarted while the store was out of
  reach, said so in one line and exited 1 before running (by design: a supervisor restarts
  them). Each is restarted at the next action and listed with its exit status and last
  error line;
- unexplained slots: grid slots between a job's first and last claimed slot that neither
  started, nor were claimed with their ending recorded, nor have a `run.missed`,
  `run.skipped`, `run.spawn_failed` or `claim.reclaimed` row.

With `--chains` (off by default: the CI test runs without) the jobs also hold a diamond chain,
root every 3 s, checked for each node run at most once per chain, every ended chain with its
outcome and no chain node left live (bench/chaos_chains.py says what each total means).

Usage: python bench/pg_chaos.py [--actions 1000] [--loops 3] [--seed N] [--chains] [--json] [--keep]
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
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import chaos_chains  # noqa: E402
import psycopg  # noqa: E402
from chaos_procs import Leftovers  # noqa: E402

from tests.helpers import pgserver  # noqa: E402
from tests.pg.stallproxy import StallProxy  # noqa: E402

LEASE_S = 9.0  # the shortest the jobs' kill_grace (1 s) allows: 1 + 3 renewals + 5 (loop/fence.py)
MARGIN_S = 5.0
JOBS = (("c05", "500ms", 0.1), ("c1", "1s", 0.4), ("c15", "1500ms", 0.3), ("c2", "2s", 3.0))
JOB_SCRIPT = (
    'echo "start $CRONCTL_JOB $CRONCTL_SLOT $CRONCTL_ATTEMPT $CRONCTL_RUN_ID" >> "$LEDGER"; '
    'flock -n "$LOCKS/$CRONCTL_JOB" -c "sleep $NAP" '
    '|| echo "overlap $CRONCTL_JOB $CRONCTL_SLOT $CRONCTL_ATTEMPT $CRONCTL_RUN_ID" >> "$LEDGER"; '
    'echo "end $CRONCTL_JOB $CRONCTL_SLOT $CRONCTL_ATTEMPT $CRONCTL_RUN_ID" >> "$LEDGER"'
)
ACTIONS = (("kill", 3), ("kill_down", 2), ("stop", 4), ("stall", 2), ("terminate", 3), ("restart_fast", 0.5),
           ("restart_immediate", 0.5))
KILL_GRACE_S = 1.0
DOWN_S = (LEASE_S + MARGIN_S + 1.0, LEASE_S + MARGIN_S + 16.0)  # a loop killed and not restarted stays down


def cronctl() -> list[str]:
    beside = Path(sys.executable).with_name("cronctl")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "cronctl"]


def jobs_yaml(ledger: Path, locks: Path) -> str:
    lines = ["jobs:"]
    for name, every, nap in JOBS:
        lines += [f"  - name: {name}", f"    every: {every}", "    overlap: skip",
                  f"    command: {json.dumps(JOB_SCRIPT)}",
                  f"    env: {{LEDGER: {json.dumps(str(ledger))}, LOCKS: {json.dumps(str(locks))}, NAP: '{nap}'}}",
                  f"    kill_grace: {KILL_GRACE_S:g}s", "    timeout: 10s"]
    return "\n".join(lines) + "\n"


@dataclass
class Host:
    name: str
    home: Path
    url: str
    proc: subprocess.Popen[bytes] | None = None
    stopped_until: float | None = None  # SIGSTOPped until this monotonic instant
    proxy: StallProxy | None = None  # its way to the database (self.url goes through it)
    log_from: int = 0  # where the current loop's lines start in loop.log
    stalled_until: float | None = None  # its network stalled until this monotonic instant
    down_until: float | None = None  # killed, and restarted at this monotonic instant
    killed_at: float | None = None  # when it was killed, while it is down

    @property
    def busy(self) -> bool:
        """Stopped, stalled or down: left alone until it is back."""
        return self.stopped_until is not None or self.stalled_until is not None or self.down_until is not None

    def start(self) -> None:
        env = {**os.environ, "CRONCTL_STORE": self.url, "CRONCTL_HOST_ID": self.name,
               "CRONCTL_BOOT_ID": f"boot-{self.name}", "NO_COLOR": "1", "CHAOS_HOST": self.name}
        env.pop("CRONCTL_FAULT_LOOP_CRASH", None)
        self.home.mkdir(parents=True, exist_ok=True)
        log = open(self.home / "loop.log", "ab")  # noqa: SIM115 - the loop keeps it
        self.log_from = log.tell()  # this loop's lines start here
        self.proc = subprocess.Popen([*cronctl(), "--home", str(self.home), "run", "--lease", f"{LEASE_S:g}s"],
                                     env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.stopped_until = None
        self.down_until = self.killed_at = None

    def kill(self) -> None:
        """kill -9 of the loop alone: its runs' processes are left to their guards."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def exited_by_itself(self) -> int | None:
        """The exit status of a loop that ended without being killed by the bench, else None."""
        if self.proc is None or self.down_until is not None:
            return None
        return self.proc.poll()

    def how_it_ended(self) -> tuple[str, str]:
        """("refused_start" | "crashed", its last error line) for a loop that exited by itself:
        it refused to start when it said one plain error line before `loop running` (the store
        out of reach as it started: exit 1, by design); anything else is a crash."""
        with open(self.home / "loop.log", "rb") as log:
            log.seek(self.log_from)
            lines = log.read().decode(errors="replace").splitlines()
        errors = [line for line in lines if line.startswith("cronctl: ") and "error" in line]
        last = errors[-1][:200] if errors else (lines[-1][:200] if lines else "")
        ran = any(line.startswith("cronctl: loop running") for line in lines)
        clean = bool(errors) and not any("internal error" in line for line in errors)
        return ("crashed" if ran or not clean else "refused_start"), last

    def kill_for(self, seconds: float) -> None:
        self.kill()
        self.killed_at = time.monotonic()
        self.down_until = self.killed_at + seconds

    def stop_for(self, seconds: float) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped_until = time.monotonic() + seconds

    def stall_for(self, seconds: float) -> None:
        assert self.proxy is not None
        self.proxy.stall()
        self.stalled_until = time.monotonic() + seconds

    def wake_if_due(self, force: bool = False) -> None:
        if self.stopped_until is not None and (force or time.monotonic() >= self.stopped_until):
            assert self.proc is not None
            self.proc.send_signal(signal.SIGCONT)
            self.stopped_until = None
        if self.stalled_until is not None and (force or time.monotonic() >= self.stalled_until):
            assert self.proxy is not None
            self.proxy.resume()
            self.stalled_until = None
        if self.down_until is not None and (force or time.monotonic() >= self.down_until):
            self.start()


@dataclass
class Chaos:
    server: pgserver.Server
    hosts: list[Host]
    rng: random.Random
    done: Counter[str] = field(default_factory=Counter)
    last_restart: float = 0.0
    began: float = field(default_factory=time.monotonic)
    deaths: list[str] = field(default_factory=list)  # loops that crashed (exited by themselves)
    refused: list[str] = field(default_factory=list)  # loops that would not start: the store out of reach

    def revive_dead(self) -> None:
        """A loop that exited by itself is a failure to report (it must ride every fault out);
        it is restarted so the chaos goes on with three loops."""
        for host in self.hosts:
            status = host.exited_by_itself()
            if status is not None:
                kind, line = host.how_it_ended()
                (self.deaths if kind == "crashed" else self.refused).append(
                    f"{host.name} exit {status} at {time.monotonic() - self.began:.0f} s: {line}")
                host.start()

    def act(self) -> None:
        self.revive_dead()
        for host in self.hosts:
            host.wake_if_due()
        kinds, weights = zip(*ACTIONS, strict=True)
        kind = self.rng.choices(kinds, weights)[0]
        if kind.startswith("restart") and time.monotonic() - self.last_restart < 5.0:
            kind = "terminate"  # let the database serve a while between restarts
        # A stopped loop is left alone until it wakes (else its stop would rarely outlast its
        # lease, and its stale writes would never be tried); one loop always runs.
        running = [host for host in self.hosts if not host.busy]
        if kind in ("stop", "stall", "kill_down") and len(running) < 2:
            kind = "terminate"
        host = self.rng.choice(running)
        getattr(self, f"_{kind}")(host)
        self.done[kind] += 1

    def _kill(self, host: Host) -> None:
        host.kill()
        time.sleep(self.rng.uniform(0.0, 1.0))
        host.start()

    def _kill_down(self, host: Host) -> None:
        host.kill_for(self.rng.uniform(*DOWN_S))

    def _stop(self, host: Host) -> None:
        host.stop_for(self.rng.uniform(0.5, 40.0))

    def _stall(self, host: Host) -> None:
        host.stall_for(self.rng.uniform(0.5, 90.0))

    def _terminate(self, host: Host) -> None:
        assert host.proc is not None
        try:
            with psycopg.connect(self.server.url, autocommit=True, connect_timeout=5) as admin:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                              (f"cronctl pid {host.proc.pid}",))
        except psycopg.Error:
            pass  # the database is restarting: that is chaos too

    def _restart_fast(self, host: Host) -> None:
        pgserver.restart(self.server, "fast")
        self.last_restart = time.monotonic()

    def _restart_immediate(self, host: Host) -> None:
        pgserver.restart(self.server, "immediate")
        self.last_restart = time.monotonic()


def seed_jobs(url: str, work: Path, ledger: Path, locks: Path, chains: bool = False) -> None:
    jobs = work / "jobs.yaml"
    chain_jobs = chaos_chains.jobs_yaml(ledger, work / "chain_ledger", KILL_GRACE_S) if chains else ""
    jobs.write_text(jobs_yaml(ledger, locks) + chain_jobs)
    env = {**os.environ, "CRONCTL_STORE": url, "NO_COLOR": "1"}
    home = work / "seed"
    done = subprocess.run([*cronctl(), "--home", str(home), "apply", "-f", str(jobs)], env=env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:  # a cronctl whose `apply` does not write PostgreSQL yet: through a JSON home
        env.pop("CRONCTL_STORE")
        subprocess.run([*cronctl(), "--home", str(home), "apply", "-f", str(jobs)], env=env, check=True,
                       capture_output=True, timeout=120)
        subprocess.run([*cronctl(), "--store", url, "--home", str(home), "store", "import-json", "--replace"],
                       env=env, check=True, capture_output=True, timeout=120)


def run(actions: int, loops: int, seed: int, server: pgserver.Server | None = None,
        keep: bool = False, chains: bool = False) -> dict[str, Any]:
    rng = random.Random(seed)
    own_server = server is None
    server = server or pgserver.start()
    work = Path(tempfile.mkdtemp(prefix="cronctl-chaos-"))
    ledger, locks = work / "ledger", work / "locks"
    locks.mkdir()
    started = time.monotonic()
    port = int(server.url.split("@", 1)[-1].split("/", 1)[0].rsplit(":", 1)[1])
    proxies = [StallProxy("127.0.0.1", port) for _ in range(loops)]
    hosts = [Host(f"h{index}", work / f"h{index}", proxy.url_for(server.url), proxy=proxy)
             for index, proxy in enumerate(proxies)]
    by_name = {host.name: host for host in hosts}
    leftovers = Leftovers(server.url, str(ledger), lambda name: by_name[name].killed_at if name in by_name else None,
                          KILL_GRACE_S)
    try:
        seed_jobs(server.url, work, ledger, locks, chains)
        for host in hosts:
            host.start()
        time.sleep(3.0)
        chaos = Chaos(server, hosts, rng)
        for _ in range(actions):
            time.sleep(rng.uniform(0.05, 0.5))
            chaos.act()
            leftovers.scan()
        for host in hosts:
            host.wake_if_due(force=True)
        settle_until = time.monotonic() + LEASE_S + MARGIN_S + 5.0  # every stale lease runs out and is reclaimed
        while time.monotonic() < settle_until:
            time.sleep(0.5)
            leftovers.scan()
            chaos.revive_dead()
        for host in hosts:
            assert host.proc is not None
            host.proc.send_signal(signal.SIGTERM)
        for host in hosts:
            assert host.proc is not None
            host.proc.wait(timeout=120)
        leftovers.final()
        summary = analyse(server.url, ledger)
        summary.update(actions=dict(chaos.done), loops=loops, seed=seed, seconds=round(time.monotonic() - started, 1),
                       processes_left=len(leftovers.found), processes_left_first=leftovers.report()[:5],
                       process_scans=leftovers.scans, loops_died=len(chaos.deaths),
                       loops_died_first=chaos.deaths[:8], loops_refused_start=len(chaos.refused),
                       loops_refused_start_first=chaos.refused[:3])
        if chains:
            summary.update(chaos_chains.analyse(server.url, work / "chain_ledger"))
        return summary
    finally:
        for host in hosts:
            if host.proc is not None and host.proc.poll() is None:
                host.wake_if_due(force=True)
                host.proc.kill()
        leftovers.kill_all()
        for proxy in proxies:
            proxy.close()
        if own_server and not keep:
            pgserver.stop(server.data_dir)
        elif keep:
            print(f"kept: {server.url} (data {server.data_dir}), work {work}", file=sys.stderr)


def _ledger(ledger: Path) -> tuple[dict[tuple[str, str, str], set[str]], int]:
    starts: dict[tuple[str, str, str], set[str]] = {}
    overlaps = 0
    for line in ledger.read_text().splitlines() if ledger.exists() else []:
        parts = line.split()
        if len(parts) != 5:
            continue
        kind, job, slot, attempt, run_id = parts
        if kind == "start":
            starts.setdefault((job, _iso(slot), attempt), set()).add(run_id)
        elif kind == "overlap":
            overlaps += 1
    return starts, overlaps


def _iso(text: str) -> str:
    return datetime.fromisoformat(text).isoformat(timespec="milliseconds")


def analyse(url: str, ledger: Path) -> dict[str, Any]:
    starts, overlaps = _ledger(ledger)
    with psycopg.connect(url, autocommit=True) as conn:
        audit = conn.execute("SELECT event, job, run_id, slot, details FROM cronctl_audit"
                             " WHERE event IN ('run.missed', 'run.skipped', 'run.spawn_failed', 'claim.reclaimed',"
                             " 'run.fenced')").fetchall()
        runs = conn.execute("SELECT job, slot, state FROM cronctl_runs WHERE slot IS NOT NULL").fetchall()
        reclaimed_states = conn.execute(
            "SELECT r.state FROM cronctl_runs AS r JOIN cronctl_audit AS a"
            " ON a.run_id = r.run_id AND a.event = 'claim.reclaimed'").fetchall()
        live = conn.execute("SELECT count(*) FROM cronctl_runs WHERE state IN ('claimed', 'running')").fetchone()
    accounted, missed_ranges = _accounting(audit, starts, runs)
    unexplained, examples, slots_by = 0, [], Counter[str]()
    for name, every, _nap in JOBS:
        step = timedelta(seconds=_seconds(every))
        slots = sorted(slot for job, slot, _state in runs if job == name)
        at = slots[0] if slots else None
        while at is not None and at <= slots[-1]:
            key = at.isoformat(timespec="milliseconds")
            why = accounted.get(name, {}).get(key) or next(
                ("missed" for first, last in missed_ranges.get(name, []) if first <= at <= last), None)
            slots_by[why or "unexplained"] += 1
            if why is None:
                unexplained += 1
                examples.append(f"{name} {key}")
            at += step
    return {
        "runs_started": sum(len(v) for v in starts.values()),
        "duplicates": sum(1 for v in starts.values() if len(v) > 1),
        "overlaps": overlaps,
        "stale_accepted": sum(1 for (state,) in reclaimed_states if state not in ("lost", "not_started")),
        "stale_rejected": sum(1 for row in audit if row[0] == "run.fenced"),
        "reclaimed": sum(1 for row in audit if row[0] == "claim.reclaimed"),
        "slots": sum(slots_by.values()),
        "slots_by": dict(slots_by.most_common()),
        "unexplained": unexplained,
        "unexplained_first": examples[:5],
        "live_runs_left": int(live[0]) if live else -1,
    }


def _accounting(audit: list[Any], starts: dict[tuple[str, str, str], set[str]],
                runs: list[Any]) -> tuple[dict[str, dict[str, str]], dict[str, list[tuple[datetime, datetime]]]]:
    """job -> slot -> what became of it (the first that applies: started, its run's ending,
    an audit row), and job -> the ranges of slots `run.missed` rows count."""
    accounted: dict[str, dict[str, str]] = {}
    for job, slot, _attempt in starts:
        accounted.setdefault(job, {})[slot] = "started"
    for job, slot, state in runs:  # claimed, and its ending recorded (a killed or never-started run too)
        accounted.setdefault(job, {}).setdefault(slot.isoformat(timespec="milliseconds"), f"claimed, {state}")
    missed_ranges: dict[str, list[tuple[datetime, datetime]]] = {}
    for event, job, _run_id, slot, details in audit:
        if event in ("run.skipped", "run.spawn_failed", "claim.reclaimed") and slot is not None:
            accounted.setdefault(job, {}).setdefault(slot.isoformat(timespec="milliseconds"), event)
        elif event == "run.missed" and slot is not None:
            first = datetime.fromisoformat(details.get("first_missed") or slot.isoformat())
            missed_ranges.setdefault(job, []).append((first, slot))
    return accounted, missed_ranges


def _seconds(every: str) -> float:
    return float(every[:-2]) / 1000 if every.endswith("ms") else float(every[:-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actions", type=int, default=1000)
    parser.add_argument("--loops", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--chains", action="store_true", help="also run a diamond chain and check it")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", action="store_true", help="leave the server and the work directory to look at")
    args = parser.parse_args()
    summary = run(args.actions, args.loops, args.seed, keep=args.keep, chains=args.chains)
    if args.json:
        print(json.dumps(summary, sort_keys=True))
    else:
        for key, value in sorted(summary.items()):
            print(f"{key:>16}: {value}")


if __name__ == "__main__":
    main()
