"""Runs never outlive their loop (SPEC §9): each run's guard ends its process group when the
process that supervises it dies by kill -9, within the run's kill_grace + 1 s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from tests.helpers.loophelp import audit_rows, is_guard, kill_hard, start_loop, stop, store, wait_ticking, wait_until
from tests.helpers.runnerhelp import Results, request

pytestmark = pytest.mark.slow

# A process that supervises one run and then waits to be killed: a loop as far as the guard can tell.
SUPERVISING = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from cronctl.proc.supervisor import Supervisor
    from tests.helpers.runnerhelp import request
    sup = Supervisor(on_result=lambda result: None)
    sup.start()
    req = request(Path(sys.argv[1]), sys.argv[2], kill_grace=float(sys.argv[3]))
    child = sup.spawn_gated(req)
    sup.open_gates([req.run_id])
    print(json.dumps({"pid": child.pid}), flush=True)
    time.sleep(600)
""")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(p.info["status"] != psutil.STATUS_ZOMBIE for p in psutil.process_iter(["status"])
               if _pgid(p.pid) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def supervise_then_die(tmp_path: Path, command: str, grace: float) -> tuple[int, float]:
    """Start a supervising process, let its run begin, kill -9 it: (the run's pid, seconds until its group was gone)."""
    proc = subprocess.Popen([sys.executable, "-c", SUPERVISING, str(tmp_path), command, str(grace)],
                            stdout=subprocess.PIPE, cwd=Path(__file__).parents[2], start_new_session=True)
    try:
        assert proc.stdout is not None
        pid = int(json.loads(proc.stdout.readline())["pid"])
        wait_until(lambda: "sleep" in " ".join(psutil.Process(pid).cmdline()) or any(
            "sleep" in c.name() for c in psutil.Process(pid).children()), 20)
        time.sleep(0.3)  # the command is past any trap it sets
        os.kill(proc.pid, signal.SIGKILL)
        killed = time.monotonic()
        proc.wait(timeout=10)
        wait_until(lambda: not group_alive(pid), grace + 15, 0.02)
        return pid, time.monotonic() - killed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_run_ends_within_its_grace_when_its_supervising_process_is_killed(tmp_path: Path) -> None:
    _, took = supervise_then_die(tmp_path, "sleep 60", grace=5.0)
    print(f"group gone {took:.2f}s after kill -9 (honours SIGTERM, kill_grace 5s)")
    assert took < 5.0 + 1.0 + 5.0  # generous: the machine is shared; bench figures are printed above


def test_a_run_that_ignores_sigterm_is_sigkilled_after_its_grace(tmp_path: Path) -> None:
    _, took = supervise_then_die(tmp_path, "trap '' TERM; sleep 60", grace=1.5)
    print(f"group gone {took:.2f}s after kill -9 (ignores SIGTERM, kill_grace 1.5s)")
    assert took >= 1.2  # it did wait out the grace: SIGTERM alone would not have ended it
    assert took < 1.5 + 1.0 + 8.0


def guards() -> list[psutil.Process]:
    """This process's guards that have exec'd their shell (a fork that has not yet exec'd
    still shows this interpreter's command line: wait for the guard, never race it)."""
    return [p for p in psutil.Process().children() if is_guard(p)]


def test_a_run_that_ends_takes_its_guard_with_it(tmp_path: Path, supervisor, results: Results) -> None:  # type: ignore[no-untyped-def]
    req = request(tmp_path, "sleep 0.2")
    supervisor.spawn_gated(req)
    assert len(wait_until(guards, timeout=30)) == 1
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).status == "success"
    assert guards() == []


def test_a_guard_is_no_part_of_the_run(tmp_path: Path, supervisor, results: Results) -> None:  # type: ignore[no-untyped-def]
    """Its own session, no run id: the run's end (drain, leftovers) never waits for it or counts it."""
    req = request(tmp_path, "true")
    child = supervisor.spawn_gated(req)
    [guard] = wait_until(guards, timeout=30)
    assert os.getsid(guard.pid) == guard.pid != os.getsid(child.pid)
    assert "CRONCTL_RUN_ID" not in guard.environ()
    supervisor.open_gates([req.run_id])
    result = results.wait(req.run_id)
    assert (result.status, result.leftovers_killed) == ("success", 0)


JOB = """
jobs:
  - name: long
    every: 1s
    kill_grace: 2s
    command: "echo fence=$CRONCTL_FENCE; trap '' TERM; sleep 60"
"""


def running_child(home: Path) -> dict[str, int] | None:
    claims = store(home)["jobs"]["long"]["state"].get("claims") or {}
    return next((c["child"] for c in claims.values() if c.get("child") and c.get("dispatched")), None)


def test_kill_9_of_a_json_loop_ends_its_run_and_a_restarted_loop_records_it_lost(home: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOB)
    loop = start_loop(home, "-f", str(jobs))
    try:
        wait_ticking(home, loop)
        child = wait_until(lambda: running_child(home), 30)
        time.sleep(0.5)  # its trap is set
        kill_hard(loop)
        killed = time.monotonic()
        wait_until(lambda: not group_alive(child["pid"]), 2.0 + 1.0 + 15, 0.02)
        print(f"loop kill -9: run's group gone after {time.monotonic() - killed:.2f}s (kill_grace 2s, ignores TERM)")
    finally:
        if loop.poll() is None:
            kill_hard(loop)
    again = start_loop(home, "-f", str(jobs))
    try:
        wait_until(lambda: [r for r in audit_rows(home, "claim.reclaimed", "long") if r.get("reason") == "owner_dead"],
                   30)
    finally:
        stop(again)
    fences = sorted(int(c["fence"]) for r in audit_rows(home, "run.claimed", "long") for c in [r] if c.get("fence"))
    assert len(fences) >= 2 and fences == sorted(set(fences))  # one number per claim, increasing
    logs = [p.read_text() for p in (home / "runs" / "long").glob("*.log")]
    assert any(f"fence={fences[0]}" in text for text in logs)
