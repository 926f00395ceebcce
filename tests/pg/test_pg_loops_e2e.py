"""Leaderless loops on one PostgreSQL store, each playing a host (SPEC §9), driven as a user would.

Every loop claims; these tests check what the database arbitrated: each slot ran once,
a dead host's run is reclaimed once its lease ran out (and a dead owner on the same host
within a tick), and a restarted database is survived.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import jsonschema
import pytest

from tests.helpers import pgserver
from tests.helpers.loophelp import kill_hard_with_guards, processes_with_run_id, stop, wait_until
from tests.pg.clusterhelp import one, rows, run_cli, seed, start_host_loop

pytestmark = pytest.mark.slow

EVERY_SECOND = """
jobs:
  - name: tick
    every: 1s
    command: "echo $CRONCTL_SLOT >> {oracle}"
"""

LONG = """
jobs:
  - name: long
    every: 2s
    overlap: skip
    kill_grace: 1s
    command: "echo start $CRONCTL_RUN_ID >> {oracle}; sleep 300"
"""


def _oracle_lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_two_hosts_share_the_work_and_fire_each_slot_once(tmp_path: Path, store_url: str) -> None:
    oracle = tmp_path / "oracle.txt"
    seed(store_url, tmp_path, EVERY_SECOND.format(oracle=oracle))
    loops = [start_host_loop(tmp_path / host, store_url, host) for host in ("host-a", "host-b")]
    try:
        wait_until(lambda: len(_oracle_lines(oracle)) >= 6, timeout=60)
    finally:
        codes = [stop(proc) for proc in loops]
    assert codes == [0, 0]
    slots = Counter(_oracle_lines(oracle))
    assert slots and max(slots.values()) == 1, slots  # no slot ran twice
    loop_rows = rows(store_url, "SELECT host_id, stopped_at IS NOT NULL FROM cronctl_loops ORDER BY host_id")
    assert loop_rows == [("host-a", True), ("host-b", True)]
    dup = one(store_url, "SELECT count(*) FROM (SELECT job, slot, attempt FROM cronctl_runs"
                         " GROUP BY 1, 2, 3 HAVING count(*) > 1) AS d")
    assert dup == 0
    assert one(store_url, "SELECT count(*) FROM cronctl_audit WHERE event = 'scheduler.started'") == 2


def _running_run(store_url: str, host: str) -> str | None:
    return one(store_url, "SELECT run_id FROM cronctl_runs WHERE job = 'long' AND state = 'running'"
                          " AND host_id = %s", host)


def _kill_loop_and_children(proc: object, run_id: str) -> None:
    """A host dies: its loop and the run's processes go at once."""
    os.killpg(proc.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    for pid in processes_with_run_id(run_id):
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=10)  # type: ignore[attr-defined]


def test_a_dead_hosts_run_is_reclaimed_by_another_host_after_its_lease(tmp_path: Path, store_url: str) -> None:
    oracle = tmp_path / "oracle.txt"
    seed(store_url, tmp_path, LONG.format(oracle=oracle))
    a = start_host_loop(tmp_path / "a", store_url, "host-a", "--lease", "9s")  # the shortest kill_grace 1s allows
    b = None
    try:
        run_id = wait_until(lambda: _running_run(store_url, "host-a"), timeout=60)
        _kill_loop_and_children(a, run_id)
        died = time.monotonic()
        b = start_host_loop(tmp_path / "b", store_url, "host-b", "--lease", "9s")
        reason = wait_until(lambda: one(store_url, "SELECT reason FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                                                   " AND run_id = %s", run_id), timeout=90)
        took = time.monotonic() - died
        assert reason == "lease_expired"
        assert took >= 9.0  # never before the lease ran out (9 s) on the database clock
        # lease 9 s + margin 5 s + 1 tick; generous for a loaded machine (bench/ has the tight figure)
        assert took <= 9 + 5 + 1 + 20
        assert one(store_url, "SELECT state FROM cronctl_runs WHERE run_id = %s", run_id) == "lost"
        assert one(store_url, "SELECT host_id FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                              " AND run_id = %s", run_id) == "host-b"
        wait_until(lambda: _running_run(store_url, "host-b"), timeout=60)  # the job goes on, on host B
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                stop(proc)
        for run in rows(store_url, "SELECT run_id FROM cronctl_runs"):
            for pid in processes_with_run_id(run[0]):
                os.kill(pid, signal.SIGKILL)


def test_a_dead_owner_on_the_same_host_is_reclaimed_within_a_tick(tmp_path: Path, store_url: str) -> None:
    oracle = tmp_path / "oracle.txt"
    seed(store_url, tmp_path, LONG.format(oracle=oracle))
    first = start_host_loop(tmp_path / "a", store_url, "host-a")  # lease 60 s: only the owner's death counts
    again = None
    try:
        run_id = wait_until(lambda: _running_run(store_url, "host-a"), timeout=60)
        wait_until(lambda: f"start {run_id}" in (oracle.read_text() if oracle.exists() else ""), timeout=30)
        kill_hard_with_guards(first)  # the loop and its guards die; its child lives on
        assert processes_with_run_id(run_id)
        again = start_host_loop(tmp_path / "a", store_url, "host-a")
        reason = wait_until(lambda: one(store_url, "SELECT reason FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                                                   " AND run_id = %s", run_id), timeout=60)
        assert reason == "owner_dead"  # long before the 60 s lease
        wait_until(lambda: not processes_with_run_id(run_id), timeout=30)  # its orphan was ended too
    finally:
        for proc in (first, again):
            if proc is not None and proc.poll() is None:
                stop(proc)


def test_a_loop_survives_a_database_restart_and_fires_on(tmp_path: Path, own_server: pgserver.Server) -> None:
    server = own_server
    oracle = tmp_path / "oracle.txt"
    seed(server.url, tmp_path, EVERY_SECOND.format(oracle=oracle))
    loop = start_host_loop(tmp_path / "a", server.url, "host-a")
    try:
        wait_until(lambda: len(_oracle_lines(oracle)) >= 2, timeout=60)
        pgserver.restart(server, "immediate", down_s=3.0)
        back = time.monotonic()
        seen = len(_oracle_lines(oracle))
        wait_until(lambda: len(_oracle_lines(oracle)) >= seen + 3, timeout=60)
        assert time.monotonic() - back < 40
    finally:
        assert stop(loop) == 0
    log = (tmp_path / "a" / "loop.log").read_text()
    assert "out of reach" in log and "reachable again" in log, log
    assert one(server.url, "SELECT count(*) FROM cronctl_audit WHERE event = 'cluster.store_outage'") >= 1
    slots = Counter(_oracle_lines(oracle))
    assert max(slots.values()) == 1, slots


HOURLY_LONG = """
jobs:
  - name: long
    every: 1h
    overlap: skip
    kill_grace: 1s
    command: "echo start $CRONCTL_RUN_ID >> {oracle}; sleep 300"
"""


def test_force_run_and_kill_from_another_host_are_served_by_the_loop(tmp_path: Path, store_url: str) -> None:
    seed(store_url, tmp_path, HOURLY_LONG.format(oracle=tmp_path / "oracle.txt"))
    loop = start_host_loop(tmp_path / "a", store_url, "host-a")
    try:
        wait_until(lambda: one(store_url, "SELECT count(*) FROM cronctl_loops WHERE stopped_at IS NULL"), timeout=60)
        forced = run_cli(tmp_path / "b", store_url, "host-b", "force-run", "long")
        assert forced.returncode == 0, forced.stderr
        run_id = one(store_url, "SELECT run_id FROM cronctl_runs WHERE trigger = 'force'")
        assert run_id and run_id in forced.stdout + forced.stderr
        wait_until(lambda: _running_run(store_url, "host-a") == run_id, timeout=30)  # the loop on host A runs it
        status = json.loads(run_cli(tmp_path / "b", store_url, "host-b", "status", "--json").stdout)
        assert [(row["host"], row["state"]) for row in status["loops"]] == [("host-a", "ok")]
        schema = json.loads((Path(__file__).parents[2] / "docs" / "schemas" / "status.schema.json").read_text())
        jsonschema.validate(status, schema)
        assert status["loop"]["state"] == "ok" and not status["loop_stale"]
        killed = run_cli(tmp_path / "b", store_url, "host-b", "kill", "long")
        assert killed.returncode == 0, killed.stderr
        assert one(store_url, "SELECT state FROM cronctl_runs WHERE run_id = %s", run_id) == "killed"
        wait_until(lambda: not processes_with_run_id(run_id), timeout=30)
        served = rows(store_url, "SELECT kind, outcome FROM cronctl_requests ORDER BY id")
        assert served == [("force_run", f"started {run_id}"), ("kill", f"killed {run_id}")]
    finally:
        assert stop(loop) == 0
    stale = run_cli(tmp_path / "b", store_url, "host-b", "status", "--stale")
    assert stale.returncode == 3 and "no loop runs on this store" in stale.stdout  # jobs, and no live loop


NOISY = """
jobs:
  - name: noisy
    every: 1h
    command: ["python3", "-c", "import sys; sys.stdout.write('x' * 70000 + chr(0) + 'END')"]
"""


def test_a_runs_long_output_tail_is_kept_with_it_even_with_a_nul(tmp_path: Path, store_url: str) -> None:
    seed(store_url, tmp_path, NOISY)
    loop = start_host_loop(tmp_path / "a", store_url, "host-a")
    try:
        wait_until(lambda: one(store_url, "SELECT count(*) FROM cronctl_loops WHERE stopped_at IS NULL"), timeout=60)
        forced = run_cli(tmp_path / "b", store_url, "host-b", "force-run", "noisy", "--wait")
        assert forced.returncode == 0, forced.stderr
    finally:
        assert stop(loop) == 0
    state, tail, record = rows(store_url, "SELECT state, output_tail, record FROM cronctl_runs")[0]
    assert state == "success" and record["status"] == "success"
    assert len(tail.encode()) >= 64 * 1024 and tail.endswith("\ufffdEND")  # NUL: U+FFFD, never a refused write


def test_a_loop_cut_off_from_the_database_ends_its_runs_before_their_leases_run_out(
        tmp_path: Path, own_server: pgserver.Server) -> None:
    """Self-fence (SPEC §9): no renewal is possible, so the run is ended before another host
    could reclaim it and start the job again; recorded when the database is back."""
    server = own_server
    oracle = tmp_path / "oracle.txt"
    seed(server.url, tmp_path, HOURLY_LONG.format(oracle=oracle))
    loop = start_host_loop(tmp_path / "a", server.url, "host-a", "--lease", "9s")
    try:
        wait_until(lambda: one(server.url, "SELECT count(*) FROM cronctl_loops"), timeout=60)
        assert run_cli(tmp_path / "b", server.url, "host-b", "force-run", "long").returncode == 0
        run_id = wait_until(lambda: _running_run(server.url, "host-a"), timeout=30)
        wait_until(lambda: processes_with_run_id(run_id), timeout=30)
        pgserver.shut_down(server, "fast")
        cut = time.monotonic()
        wait_until(lambda: not processes_with_run_id(run_id), timeout=30)
        # Before another host may reclaim it: lease (9 s) + margin (5 s) after its last renewal,
        # which was before the cut (SIGTERM at lease - kill_grace - 5 s, SIGKILL at lease - 5 s).
        assert time.monotonic() - cut < 9.0 + 5.0
        pgserver.start_again(server)
        state = wait_until(lambda: one(server.url, "SELECT state FROM cronctl_runs WHERE run_id = %s"
                                                   " AND state NOT IN ('claimed', 'running')", run_id),
                           timeout=60)
        assert state == "killed"
    finally:
        assert stop(loop) == 0
    assert "self-fence" in (tmp_path / "a" / "loop.log").read_text()
    reason = one(server.url, "SELECT record ->> 'reason' FROM cronctl_runs WHERE run_id = %s", run_id)
    assert reason == "self_fenced"
