"""What a run's guard (cronctl/proc/guard.py) costs, and how fast it ends a run whose loop died.

    .venv/bin/python bench/guard_cost.py [--runs 200] [--rounds 3] [--kills 5]

Prints, for gated spawns of `true`, the median cost of `Supervisor.spawn_gated` with guards
and without them (the guard start replaced by nothing), their ratio, and the medians of the
time from a kill -9 of a supervising process to its run's group being gone, for a run that
honours SIGTERM and one that ignores it (kill_grace 1 s). No assertion: figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cronctl.proc import supervisor as supervisor_mod  # noqa: E402
from cronctl.proc.spawn import RunRequest  # noqa: E402
from cronctl.proc.supervisor import Supervisor  # noqa: E402


class _NoGuard:
    def end(self) -> None:
        pass


def _request(tmp: Path, command: str, grace: float = 1.0) -> RunRequest:
    run_id = uuid.uuid4().hex
    return RunRequest(run_id=run_id, job="bench", command=command, cwd=None, env={"CRONCTL_RUN_ID": run_id},
                      timeout=0, kill_grace=grace, log_path=tmp / f"{run_id}.log")


def spawn_costs(runs: int, guarded: bool, tmp: Path) -> float:
    real = supervisor_mod.guard_child
    if not guarded:
        supervisor_mod.guard_child = lambda req, child: _NoGuard()  # type: ignore[assignment,return-value]
    done: list[str] = []
    sup = Supervisor(on_result=lambda result: done.append(result.run_id))
    sup.start()
    try:
        costs = []
        reqs = [_request(tmp, "true") for _ in range(runs)]
        for req in reqs:
            began = time.perf_counter()
            sup.spawn_gated(req)
            costs.append(time.perf_counter() - began)
        sup.open_gates([req.run_id for req in reqs])
        sup.wait_idle(120)
    finally:
        sup.shutdown(wait=60)
        supervisor_mod.guard_child = real
    return statistics.median(costs)


_SUPERVISE = """
import json, sys, time, uuid
from pathlib import Path
from cronctl.proc.spawn import RunRequest
from cronctl.proc.supervisor import Supervisor
sup = Supervisor(on_result=lambda r: None); sup.start()
rid = uuid.uuid4().hex
req = RunRequest(run_id=rid, job="bench", command=sys.argv[2], cwd=None, env={}, timeout=0, kill_grace=1.0,
                 log_path=Path(sys.argv[1]) / (rid + ".log"))
child = sup.spawn_gated(req); sup.open_gates([rid])
print(json.dumps({"pid": child.pid}), flush=True); time.sleep(600)
"""


def death_to_gone(command: str, tmp: Path) -> float:
    proc = subprocess.Popen([sys.executable, "-c", _SUPERVISE, str(tmp), command], stdout=subprocess.PIPE,
                            cwd=REPO, start_new_session=True)
    assert proc.stdout is not None
    pgid = int(json.loads(proc.stdout.readline())["pid"])
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.monotonic()
    proc.wait()
    while _group_running(pgid):
        time.sleep(0.005)
    return time.monotonic() - killed


def _group_running(pgid: int) -> bool:
    """A member of the group that has not exited (a zombie waits only for init to reap it)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        plain = [spawn_costs(args.runs, False, tmp) for _ in range(args.rounds)]
        guarded = [spawn_costs(args.runs, True, tmp) for _ in range(args.rounds)]
        honours = [death_to_gone("sleep 60", tmp) for _ in range(args.kills)]
        ignores = [death_to_gone("trap '' TERM; sleep 60", tmp) for _ in range(args.kills)]
    p, g = statistics.median(plain) * 1000, statistics.median(guarded) * 1000
    print(f"spawn_gated median over {args.rounds} rounds of {args.runs}: {p:.2f} ms unguarded, "
          f"{g:.2f} ms guarded (x{g / p:.2f}, +{g - p:.2f} ms per run)")
    print(f"loop kill -9 -> run's group gone, median of {args.kills}: {statistics.median(honours):.3f} s "
          f"(honours SIGTERM), {statistics.median(ignores):.3f} s (ignores SIGTERM, kill_grace 1 s)")


if __name__ == "__main__":
    main()
