"""A burst of real gated children (issue 27, K = 500): while it starts, the supervisor holds
back a run's leftovers pass and its result (the CPU is the children's), but loses nothing of
it - its exit's instant, its leftovers killed - and never holds back a kill."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tests.helpers.runnerhelp import Results, request

from cronctl.proc.burst import BURST_QUIET_MAX
from cronctl.proc.find import find_run_processes
from cronctl.proc.supervisor import Supervisor

pytestmark = pytest.mark.slow


def test_a_burst_holds_leftover_passes_but_keeps_every_end_and_every_kill(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    leftover = request(tmp_path, "sleep 30 & exit 0")
    killed = request(tmp_path, "sleep 20")
    long = request(tmp_path, "sleep 2")  # still running: the burst's ends are gathered
    quick = [request(tmp_path, "true") for _ in range(57)]
    burst = [leftover, killed, long, *quick]
    for req in burst:
        supervisor.spawn_gated(req, wake=False)
    supervisor.wake()

    opened = time.monotonic()
    supervisor.open_gates_after([req.run_id for req in burst], 0.0, burst=500)  # other loops hold the rest
    time.sleep(0.1)  # its command runs
    assert find_run_processes(killed.run_id)
    supervisor.kill(killed.run_id, "operator")
    while find_run_processes(killed.run_id) and time.monotonic() - opened < BURST_QUIET_MAX:
        time.sleep(0.02)
    assert not find_run_processes(killed.run_id)  # a kill is never held back, only its result's hand-over

    stopped = results.wait(killed.run_id)
    assert (stopped.status, stopped.reason) == ("killed", "operator")

    ended = results.wait(leftover.run_id)
    assert results.arrived[leftover.run_id] - opened >= BURST_QUIET_MAX - 0.05  # held while the burst starts
    assert (ended.status, ended.leftovers_killed) == ("success", 1)
    assert ended.duration < 0.5  # its end's instant kept, not the hand-over's
    assert find_run_processes(leftover.run_id) == []
    for req in quick:
        assert results.wait(req.run_id).status == "success"
    assert results.wait(long.run_id, timeout=10).status == "success"
