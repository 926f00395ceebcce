"""A network that stalls (issue 20): one loop reaches PostgreSQL through a proxy that stops
forwarding but keeps every socket open (tests/pg/stallproxy.py), the fault that closes
nothing and so fires no timeout of libpq's or the kernel's.

Each job writes to a ledger and holds a flock while it runs: a second copy of an
`overlap: skip` job running beside the first writes `overlap` instead of sleeping. So
"0 overlap" is read from what the processes did, not from what the database says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.helpers.loophelp import processes_with_run_id, stop, wait_until
from tests.pg.clusterhelp import CRONCTL, host_env, one, rows, run_cli, seed, start_host_loop
from tests.pg.stallproxy import StallProxy, stall_proxy

pytestmark = pytest.mark.slow

LEASE = "20s"  # the shortest the default kill_grace (10 s) allows: 10 + 3 renewals + 5
LONG_SKIP = """
jobs:
  - name: long
    every: 2s
    overlap: skip
    {extra}
    command: "{trap}echo start $CRONCTL_RUN_ID >> {ledger};
      flock -n {lock} -c '{trap}sleep 300' || echo overlap $CRONCTL_RUN_ID >> {ledger}"
"""


def _ledger(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _running_on(store_url: str, host: str) -> str | None:
    return one(store_url, "SELECT run_id FROM cronctl_runs WHERE job = 'long' AND state = 'running' AND host_id = %s",
               host)


@pytest.fixture
def proxy(store_url: str) -> Iterator[tuple[StallProxy, str]]:
    with stall_proxy(store_url) as made:
        yield made


def _kill_every_run(store_url: str) -> None:
    for (run_id,) in rows(store_url, "SELECT run_id FROM cronctl_runs"):
        for pid in processes_with_run_id(str(run_id)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _start_a_then_b(tmp_path: Path, store_url: str, via: str) -> tuple[object, object, str]:
    """Host A (through the proxy) runs the long job; then host B (direct) joins."""
    a = start_host_loop(tmp_path / "a", via, "host-a", "--lease", LEASE)
    run_id = wait_until(lambda: _running_on(store_url, "host-a"), timeout=60)
    wait_until(lambda: processes_with_run_id(run_id), timeout=30)
    b = start_host_loop(tmp_path / "b", store_url, "host-b", "--lease", LEASE)
    wait_until(lambda: one(store_url, "SELECT count(*) FROM cronctl_loops WHERE host_id = 'host-b'"), timeout=60)
    return a, b, run_id


def _wait_for_reclaim(tmp_path: Path, store_url: str, run_id: str) -> None:
    """Host B's reclaim of the stalled host's run, normally at lease + 5 s.

    It once missed in about one run of four (issue 20): the stall came just after psycopg's
    executemany, a pipeline, between whose messages PostgreSQL times nothing, so host A's
    session kept the job row locked for as long as the stall lasted. Lease transactions no
    longer pipeline (test_a_stall_just_after_a_job_row_was_written...), and a session stuck so
    for longer than the lease plus margin is ended by the other loops' healer
    (tests/pg/test_pg_stuck.py). A miss fails, with the store's, the sessions' and both loops' view."""
    try:
        wait_until(lambda: one(store_url, "SELECT 1 FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                                          " AND run_id = %s", run_id), timeout=90)
    except AssertionError:
        run = rows(store_url, "SELECT state, host_id, lease_expires_at, clock_timestamp() FROM cronctl_runs"
                              " WHERE run_id = %s", run_id)
        logs = {host: (tmp_path / host / "loop.log").read_text()[-3000:] for host in ("a", "b")
                if (tmp_path / host / "loop.log").exists()}
        raise AssertionError(f"run {run_id} not reclaimed within 90 s: run {run}, sessions {_sessions(store_url)},"
                             f" logs {logs}") from None


def _sessions(store_url: str) -> list[tuple[object, ...]]:
    """Every session of the database with what it waits on and the locks it holds (a miss's evidence)."""
    return rows(store_url, """
        SELECT a.pid, a.application_name, a.state, a.wait_event_type, a.wait_event,
               round(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric, 1) AS xact_s,
               round(extract(epoch FROM clock_timestamp() - a.state_change)::numeric, 1) AS state_s,
               pg_blocking_pids(a.pid), left(a.query, 200),
               (SELECT array_agg(l.relation::regclass || ':' || l.mode || ':' || l.granted) FROM pg_locks AS l
                 WHERE l.pid = a.pid AND l.relation IS NOT NULL)
          FROM pg_stat_activity AS a WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()""")


@pytest.mark.timeout(420)
def test_a_stall_longer_than_the_lease_never_runs_a_skip_job_twice(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    stalling, via = proxy
    ledger, lock = tmp_path / "ledger", tmp_path / "lock"
    seed(store_url, tmp_path, LONG_SKIP.format(ledger=ledger, lock=lock, trap="", extra=""))
    a, b, run_id = _start_a_then_b(tmp_path, store_url, via)
    try:
        stalling.stall()
        stalled = time.monotonic()
        wait_until(lambda: not processes_with_run_id(run_id), timeout=60)
        ended = time.monotonic()
        _wait_for_reclaim(tmp_path, store_url, run_id)
        reclaimed_at = time.monotonic()
        assert ended < reclaimed_at  # the stalled host's child died before another host could take its run
        wait_until(lambda: _running_on(store_url, "host-b"), timeout=60)  # the job goes on, on host B
        time.sleep(max(0.0, stalled + 30.0 - time.monotonic()))  # the stall lasts lease + 10 s
        stalling.resume()
        # Recovery: host A beats again, says the outage ended, and its late record of the run is fenced.
        wait_until(lambda: one(store_url, "SELECT 1 FROM cronctl_audit WHERE event = 'cluster.store_outage'"
                                          " AND host_id = 'host-a'"), timeout=60)
        wait_until(lambda: one(store_url, "SELECT 1 FROM cronctl_audit WHERE event = 'run.fenced'"
                                          " AND run_id = %s", run_id), timeout=60)
        age = one(store_url, "SELECT extract(epoch FROM clock_timestamp() - heartbeat_at) FROM cronctl_loops"
                             " WHERE host_id = 'host-a'")
        assert float(age) < 10
    finally:
        codes = [stop(proc) for proc in (a, b)]  # type: ignore[arg-type]
        _kill_every_run(store_url)
    assert codes == [0, 0]
    lines = _ledger(ledger)
    assert not [line for line in lines if line.startswith("overlap")], lines
    assert one(store_url, "SELECT state FROM cronctl_runs WHERE run_id = %s", run_id) == "lost"
    # No false skew from the stalled round trips: the clocks are one.
    assert one(store_url, "SELECT count(*) FROM cronctl_audit WHERE event = 'cluster.clock_skew'") == 0
    assert "self-fence" in (tmp_path / "a" / "loop.log").read_text()


@pytest.mark.timeout(300)
def test_a_stall_just_after_a_job_row_was_written_does_not_keep_its_lock_from_the_other_host(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    """The stall that cost a reclaim: host A's statement writing its job row reaches the server,
    then nothing more does (its answer, the COMMIT). The row lock must not outlive the lease:
    host B reclaims the run at lease + margin, as after any stall."""
    stalling, via = proxy
    ledger, lock = tmp_path / "ledger", tmp_path / "lock"
    seed(store_url, tmp_path, LONG_SKIP.format(ledger=ledger, lock=lock, trap="", extra=""))
    a, b, run_id = _start_a_then_b(tmp_path, store_url, via)
    try:
        held = stalling.stalls
        # the call that writes a unit's job rows (store/pg/functions.py): the skip job's next slot, every 2 s
        stalling.stall_after(b"cronctl_end_unit")
        wait_until(lambda: stalling.stalls > held, timeout=30, interval=0.01)
        wait_until(lambda: not processes_with_run_id(run_id), timeout=60)
        ended = time.monotonic()
        try:
            wait_until(lambda: one(store_url, "SELECT 1 FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                                              " AND run_id = %s", run_id), timeout=90)
        except AssertionError:
            raise AssertionError(f"run {run_id} not reclaimed; sessions: {_sessions(store_url)}") from None
        assert ended < time.monotonic()
        wait_until(lambda: _running_on(store_url, "host-b"), timeout=60)
        stalling.resume()
        wait_until(lambda: one(store_url, "SELECT 1 FROM cronctl_audit WHERE event = 'run.fenced'"
                                          " AND run_id = %s", run_id), timeout=60)
    finally:
        stalling.resume()
        codes = [stop(proc) for proc in (a, b)]  # type: ignore[arg-type]
        _kill_every_run(store_url)
    assert codes == [0, 0]
    lines = _ledger(ledger)
    assert not [line for line in lines if line.startswith("overlap")], lines


def test_a_job_that_ignores_sigterm_is_dead_before_a_fast_outage_lets_another_host_reclaim(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    cutting, via = proxy
    ledger, lock = tmp_path / "ledger", tmp_path / "lock"
    seed(store_url, tmp_path, LONG_SKIP.format(ledger=ledger, lock=lock, trap="trap \\\"\\\" TERM; ",
                                               extra="kill_grace: 3s"))
    a, b, run_id = _start_a_then_b(tmp_path, store_url, via)
    try:
        cutting.cut()  # connections closed, new ones refused at once
        wait_until(lambda: not processes_with_run_id(run_id), timeout=60)
        ended = time.monotonic()
        wait_until(lambda: one(store_url, "SELECT 1 FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                                          " AND run_id = %s", run_id), timeout=60)
        assert ended < time.monotonic()
        wait_until(lambda: _running_on(store_url, "host-b"), timeout=60)
        cutting.resume()
    finally:
        codes = [stop(proc) for proc in (a, b)]  # type: ignore[arg-type]
        _kill_every_run(store_url)
    assert codes == [0, 0]
    lines = _ledger(ledger)
    assert len([line for line in lines if line.startswith("start")]) >= 2, lines  # both hosts ran it, in turn
    assert not [line for line in lines if line.startswith("overlap")], lines


def test_sigterm_during_a_stall_ends_the_runs_and_the_loop_within_kill_grace(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    stalling, via = proxy
    ledger, lock = tmp_path / "ledger", tmp_path / "lock"
    seed(store_url, tmp_path, LONG_SKIP.format(ledger=ledger, lock=lock, trap="", extra="kill_grace: 2s"))
    a = start_host_loop(tmp_path / "a", via, "host-a", "--lease", LEASE)
    try:
        run_id = wait_until(lambda: _running_on(store_url, "host-a"), timeout=60)
        wait_until(lambda: processes_with_run_id(run_id), timeout=30)
        stalling.stall()
        wait_until(lambda: "out of reach" in (tmp_path / "a" / "loop.log").read_text(), timeout=30)
        asked = time.monotonic()
        a.send_signal(signal.SIGTERM)
        code = a.wait(timeout=60)
        took = time.monotonic() - asked
        assert code == 0
        assert not processes_with_run_id(run_id)
        assert took < 2.0 + 2.0 + 6.0  # kill_grace + 2 s, generous for a busy machine
    finally:
        stalling.resume()
        if a.poll() is None:
            stop(a)
        _kill_every_run(store_url)


def test_apply_through_a_stalled_store_exits_1_within_its_deadline_and_changes_nothing(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    stalling, via = proxy
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: fresh\n    every: 1h\n    command: 'true'\n")
    assert run_cli(tmp_path / "h", via, "seed", "list").returncode == 0  # schema in place, through the proxy
    stalling.stall_on(b"COPY cronctl_jobs")  # the statement is in flight when the stall begins
    began = time.monotonic()
    done = run_cli(tmp_path / "h", via, "seed", "apply", "-f", str(jobs), timeout=60)
    took = time.monotonic() - began
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the PostgreSQL store did not answer within 5 s; nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert took < 5.0 + 10.0  # the deadline, plus start-up on a busy machine
    assert stalling.stalls == 1
    assert one(store_url, "SELECT count(*) FROM cronctl_jobs") == 0


def test_import_json_through_a_stalled_store_says_so_as_apply_does(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    stalling, via = proxy
    home = tmp_path / "json-home"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: old\n    every: 1h\n    command: 'true'\n")
    env_free = run_cli(home, "", "seed", "apply", "-f", str(jobs))  # a JSON home to import
    assert env_free.returncode == 0, env_free.stderr
    assert run_cli(tmp_path / "h", via, "seed", "list").returncode == 0
    stalling.stall_on(b"INSERT INTO cronctl_jobs")
    done = run_cli(home, via, "seed", "store", "import-json", timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "did not answer within 5 s; nothing was changed" in done.stderr
    assert "internal error" not in done.stderr
    assert one(store_url, "SELECT count(*) FROM cronctl_jobs") == 0


QUICK = """
jobs:
""" + "".join(f"""  - name: q{i}
    every: 5s
    overlap: skip
    kill_grace: 1s
    command: "echo $CRONCTL_JOB $CRONCTL_SLOT >> {{ledger}}"
""" for i in range(4))


def test_a_stall_shorter_than_the_lease_loses_no_slot_held_ahead_and_skips_none_as_overlap(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    stalling, via = proxy
    ledger = tmp_path / "ledger"
    seed(store_url, tmp_path, QUICK.format(ledger=ledger))
    a = start_host_loop(tmp_path / "a", via, "host-a", "--lease", LEASE)
    b = None
    try:
        wait_until(lambda: len(_ledger(ledger)) >= 4, timeout=60)  # host A at work, alone: it claims ahead
        # Stall host A while it holds slots claimed ahead (children at their gates, not dispatched);
        # host B, healthy, comes in beside it.
        wait_until(lambda: one(store_url, "SELECT 1 FROM cronctl_runs WHERE host_id = 'host-a' AND state = 'claimed'"
                                          " AND claim ? 'held_until'"), timeout=60, interval=0.01)
        stalling.stall()
        stalled = time.monotonic()
        b = start_host_loop(tmp_path / "b", store_url, "host-b", "--lease", LEASE)
        time.sleep(max(0.0, stalled + 10.0 - time.monotonic()))  # shorter than the lease (20 s)
        stalling.resume()
        seen = len(_ledger(ledger))
        wait_until(lambda: len(_ledger(ledger)) >= seen + 8, timeout=60)  # both go on
    finally:
        codes = [stop(proc) for proc in (a, b) if proc is not None]
        _kill_every_run(store_url)
    assert codes == [0, 0]
    skipped = rows(store_url, "SELECT job, details FROM cronctl_audit WHERE event = 'run.skipped'"
                              " AND reason = 'overlap'")
    assert skipped == []  # no slot skipped because of a run that had not started
    assert one(store_url, "SELECT count(*) FROM cronctl_audit WHERE event = 'claim.reclaimed'"
                          " AND reason = 'owner_unreachable'") >= 1  # the held claim was taken over
    by_job: dict[str, list[str]] = {}
    for line in _ledger(ledger):
        job, slot = line.split()
        by_job.setdefault(job, []).append(slot)
    for job, slots in by_job.items():
        assert len(slots) == len(set(slots)), (job, slots)  # no slot ran twice
        instants = sorted(datetime.fromisoformat(slot.replace("Z", "+00:00")) for slot in slots)
        gaps = [(later - earlier).total_seconds() for earlier, later in zip(instants, instants[1:], strict=False)]
        assert all(abs(gap - 5.0) < 0.01 for gap in gaps), (job, slots)  # no slot lost between first and last


def test_a_lease_with_no_room_for_the_self_fence_is_refused_before_the_loop_starts(
        tmp_path: Path, store_url: str) -> None:
    seed(store_url, tmp_path, "jobs:\n  - name: slow\n    every: 1h\n    kill_grace: 30s\n    command: 'true'\n")
    done = run_cli(tmp_path / "a", store_url, "host-a", "run", "--lease", "20s", timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "--lease 20s is too short on the PostgreSQL store: job 'slow' has kill_grace 30s" in done.stderr
    assert "use --lease 38s or more" in done.stderr
    assert one(store_url, "SELECT count(*) FROM cronctl_loops") == 0  # nothing announced


def test_import_json_cut_off_mid_transaction_says_so_as_apply_does(
        tmp_path: Path, store_url: str, proxy: tuple[StallProxy, str]) -> None:
    cutting, via = proxy
    home = tmp_path / "json-home"
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: old\n    every: 1h\n    command: 'true'\n")
    assert run_cli(home, "", "seed", "apply", "-f", str(jobs)).returncode == 0
    assert run_cli(tmp_path / "h", via, "seed", "list").returncode == 0
    cutting.stall_on(b"INSERT INTO cronctl_jobs")
    importing = subprocess.Popen([*CRONCTL, "--home", str(home), "store", "import-json"],
                                 env=host_env(via, "seed"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until(lambda: cutting.stalls == 1, timeout=30)
    cutting.cut()  # the connection is closed under it (a terminated backend, a restarted pooler)
    _, err = importing.communicate(timeout=60)
    assert importing.returncode == 1, err
    assert "cannot write the PostgreSQL store" in err and "nothing was changed" in err
    assert "internal error" not in err
    assert one(store_url, "SELECT count(*) FROM cronctl_jobs") == 0
