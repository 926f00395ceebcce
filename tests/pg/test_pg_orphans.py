"""Runs never outlive their loop, across hosts (SPEC §9): a loop killed with nothing to restart it
has its runs ended by their guards (proc/guard.py) long before another host may reclaim them, so
an `overlap: skip` job never runs on two hosts at once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.loophelp import processes_with_run_id, stop, wait_until
from tests.pg.clusterhelp import one, rows, seed, start_host_loop

pytestmark = pytest.mark.slow

# Each copy writes when it starts and when it is told to end; `sleep & wait` so the trap runs at once.
LONG = """
jobs:
  - name: long
    every: 2s
    overlap: skip
    kill_grace: 1s
    command: "echo start $CRONCTL_RUN_ID $(date +%s.%N) >> {oracle};
      trap 'echo end $CRONCTL_RUN_ID $(date +%s.%N) >> {oracle}; exit 143' TERM; sleep 300 & wait"
"""


def copies(oracle: Path) -> dict[str, dict[str, float]]:
    """run id -> {"start": t, "end": t} as the copies wrote them."""
    found: dict[str, dict[str, float]] = {}
    for line in (oracle.read_text().splitlines() if oracle.exists() else []):
        what, run_id, at = line.split()
        found.setdefault(run_id, {})[what] = float(at)
    return found


def test_a_killed_loop_with_no_restart_never_overlaps_the_next_hosts_copy(tmp_path: Path, store_url: str) -> None:
    oracle = tmp_path / "oracle.txt"
    seed(store_url, tmp_path, LONG.format(oracle=oracle))
    a = start_host_loop(tmp_path / "a", store_url, "host-a", "--lease", "9s")
    b = None
    try:
        run_a = wait_until(lambda: one(store_url, "SELECT run_id FROM cronctl_runs WHERE state = 'running'"
                                                  " AND host_id = 'host-a'"), timeout=60)
        wait_until(lambda: run_a in copies(oracle), timeout=30)
        time.sleep(0.3)  # its trap is set
        died = time.time()
        os.kill(a.pid, signal.SIGKILL)  # the loop alone: nothing restarts on host A, the host stays up
        a.wait(timeout=10)
        b = start_host_loop(tmp_path / "b", store_url, "host-b", "--lease", "9s")
        run_b = wait_until(lambda: next((r for r in copies(oracle) if r != run_a), None), timeout=90)
        seen = copies(oracle)
        assert "end" in seen[run_a], seen  # told to end by its guard, not left running
        gap = seen[run_b]["start"] - seen[run_a]["end"]
        print(f"host A's copy ended {seen[run_a]['end'] - died:.2f}s after its loop died; "
              f"host B's copy started {gap:.2f}s after that")
        assert seen[run_a]["end"] - died < 1.0 + 1.0 + 10  # kill_grace + 1 s, generous on a busy machine
        assert gap > 0  # 0 overlap
        assert not processes_with_run_id(run_a)
        assert one(store_url, "SELECT state FROM cronctl_runs WHERE run_id = %s", run_a) == "lost"
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                stop(proc)
        for (run_id,) in rows(store_url, "SELECT run_id FROM cronctl_runs"):
            for pid in processes_with_run_id(run_id):
                os.kill(pid, signal.SIGKILL)
