"""Forgetting hosts (SPEC §9): a silent loop whose runs were all reclaimed is forgotten after
--forget-after (`cluster.loop_forgotten`); `store forget-host HOST` forgets one at once; `doctor`
and `status --stale` agree about a dead loop."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from cronctl.store.pg.connect import Connection
from cronctl.store.pg.forget import forget_silent
from cronctl.store.pg.loops import LoopIdentity, register
from tests.helpers.loophelp import stop, wait_until
from tests.pg.clusterhelp import one, rows, run_cli, seed, start_host_loop

JOBS = """
jobs:
  - name: hourly
    every: 1h
    command: "true"
"""


def silent_loop(conn: Connection, host: str, silent_s: float, pid: int = 4242) -> LoopIdentity:
    """A loop row as a loop killed `silent_s` ago leaves it."""
    me = LoopIdentity(uuid.uuid4(), host, f"boot-{host}", pid, 1.0)
    register(conn, me, "/nowhere")
    with conn.transaction():
        conn.execute("UPDATE cronctl_loops SET heartbeat_at = clock_timestamp() - %s * interval '1 second'"
                     " WHERE loop_id = %s", (silent_s, me.loop_id))
    return me


@contextmanager
def beating(store_url: str, loop: LoopIdentity) -> Iterator[None]:
    """The loop's heartbeat renewed every 0.5 s until the block ends, as a live loop renews it
    every tick. Written once, it went stale (3 s) while a busy machine (the suite on several
    workers) started the CLI twice, and `forget-host` then rightly forgot a "live" host."""
    done = threading.Event()

    def beat() -> None:
        with psycopg.connect(store_url, autocommit=True) as own:
            while not done.is_set():
                own.execute("UPDATE cronctl_loops SET heartbeat_at = clock_timestamp() WHERE loop_id = %s",
                            (loop.loop_id,))
                done.wait(0.5)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=30)


def hosts(conn: Connection) -> list[str]:
    with conn.transaction():
        return [h for (h,) in conn.execute("SELECT host_id FROM cronctl_loops ORDER BY host_id")]


def test_a_silent_loop_is_forgotten_once_nothing_of_it_is_left_to_reclaim(conn: Connection) -> None:
    silent_loop(conn, "gone", 20 * 60)
    owner = silent_loop(conn, "holding", 20 * 60, pid=777)
    silent_loop(conn, "recent", 60)
    with conn.transaction():  # a run still claimed under the holding loop's owner
        conn.execute("INSERT INTO cronctl_jobs (name, spec, state, overlap) VALUES ('j', '{}', '{}', 'skip')")
        conn.execute("INSERT INTO cronctl_runs (run_id, job, trigger, exclusive, state, host_id, boot_id, claim)"
                     " VALUES ('r1', 'j', 'force', true, 'running', 'holding', %s, %s)",
                     (owner.boot_id, json.dumps({"owner": {"pid": 777}})))
    gone = forget_silent(conn, 15 * 60, None, "host-a")
    assert [(f.host, f.pid) for f in gone] == [("gone", 4242)]
    assert hosts(conn) == ["holding", "recent"]
    with conn.transaction():
        (row,) = conn.execute("SELECT reason, details FROM cronctl_audit WHERE event = 'cluster.loop_forgotten'")
    assert row[0] == "silent" and row[1]["host"] == "gone" and row[1]["silent_s"] >= 1200
    with conn.transaction():
        conn.execute("UPDATE cronctl_runs SET state = 'lost' WHERE run_id = 'r1'")  # reclaimed by another loop
    assert [f.host for f in forget_silent(conn, 15 * 60, None, None)] == ["holding"]


@pytest.mark.slow
def test_forget_host_forgets_at_once_refuses_a_live_host_and_names_an_unknown_one(
        conn: Connection, store_url: str, tmp_path: Path) -> None:
    silent_loop(conn, "web-3", 30)
    live = silent_loop(conn, "live", 0.0)
    with beating(store_url, live):
        done = run_cli(tmp_path / "h", store_url, "ops", "store", "forget-host", "web-3")
        assert done.returncode == 0 and "forgot 1 loop(s) of host web-3" in done.stdout, done.stderr
        assert hosts(conn) == ["live"]
        assert one(store_url, "SELECT reason FROM cronctl_audit WHERE event = 'cluster.loop_forgotten'") == "operator"
        refused = run_cli(tmp_path / "h", store_url, "ops", "store", "forget-host", "live")
    assert refused.returncode == 1 and "has a live loop" in refused.stderr and "Traceback" not in refused.stderr
    unknown = run_cli(tmp_path / "h", store_url, "ops", "store", "forget-host", "nope")
    assert unknown.returncode == 1 and "no loop of host 'nope'" in unknown.stderr and "live" in unknown.stderr


@pytest.mark.slow
def test_doctor_and_status_agree_about_a_dead_loop_until_it_is_forgotten(store_url: str, tmp_path: Path) -> None:
    seed(store_url, tmp_path, JOBS)
    home = tmp_path / "h"
    live = start_host_loop(tmp_path / "a", store_url, "host-a", "--forget-after", "10s")
    try:
        wait_until(lambda: one(store_url, "SELECT count(*) FROM cronctl_loops WHERE host_id = 'host-a'"), 30)
        from cronctl.store.pg.connect import connect, parse_store_url

        with connect(parse_store_url(store_url)) as conn:
            silent_loop(conn, "dead-host", 3.5)  # killed a moment ago, nothing left running
        status = run_cli(home, store_url, "ops", "status", "--stale")
        doctor = run_cli(home, store_url, "ops", "doctor")
        assert status.returncode == 3 and "dead-host" in status.stdout, status.stdout
        assert doctor.returncode != 0 and "dead-host" in doctor.stdout + doctor.stderr, doctor.stdout
        wait_until(lambda: one(store_url, "SELECT count(*) FROM cronctl_audit"
                                          " WHERE event = 'cluster.loop_forgotten'"), 30)
        status = run_cli(home, store_url, "ops", "status", "--stale")
        doctor = run_cli(home, store_url, "ops", "doctor")
        assert status.returncode == 0, status.stdout
        assert "dead-host" not in doctor.stdout and "loop(s) live" in doctor.stdout, doctor.stdout
    finally:
        stop(live)
    assert rows(store_url, "SELECT host_id FROM cronctl_loops WHERE host_id = 'dead-host'") == []


def test_a_dead_loop_of_this_host_is_forgotten_at_once_once_its_runs_are_reclaimed(conn: Connection) -> None:
    from cronctl.store.pg.forget import forget_dead_here

    me = silent_loop(conn, "here", 0.0, pid=100)
    dead = silent_loop(conn, "here", 5, pid=101)
    with conn.transaction():  # an earlier boot of this host
        conn.execute("UPDATE cronctl_loops SET boot_id = 'old-boot', pid = 102 WHERE loop_id = %s",
                     (silent_loop(conn, "here", 5, pid=999).loop_id,))
    silent_loop(conn, "here", 5, pid=103)  # alive (as the callback says)
    silent_loop(conn, "there", 5, pid=104)  # another host: its pids mean nothing here
    holding = silent_loop(conn, "here", 5, pid=105)
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_jobs (name, spec, state, overlap) VALUES ('j', '{}', '{}', 'skip')")
        conn.execute("INSERT INTO cronctl_runs (run_id, job, trigger, exclusive, state, host_id, boot_id, claim)"
                     " VALUES ('r1', 'j', 'force', true, 'running', 'here', %s, %s)",
                     (holding.boot_id, json.dumps({"owner": {"pid": 105}})))
    gone = forget_dead_here(conn, me, lambda pid, start: pid == 103)
    assert sorted(f.pid for f in gone) == [dead.pid, 102]
    with conn.transaction():
        left = sorted(pid for (pid,) in conn.execute("SELECT pid FROM cronctl_loops"))
        reasons = {r for (r,) in conn.execute("SELECT reason FROM cronctl_audit"
                                              " WHERE event = 'cluster.loop_forgotten'")}
    assert left == [100, 103, 104, 105] and reasons == {"owner_dead"}
