"""Issue 15, last items: doctor names dead claims and free space; a loop that cannot write is
told from a hung one; `run` checks before it announces; `run -f` prunes what its file dropped."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.helpers import loophelp
import psutil
import pytest

from cronctl.paths import Paths
from cronctl.proc.identity import boot_id
from cronctl.store.jsonstore import Store

STAMP = "2026-03-01T11:59:00Z"


@pytest.fixture
def small_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 4 MB tmpfs (we run as root in CI); skipped where mounting is not allowed."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _claim(home: Path, job: str, run_id: str, owner: dict[str, Any], lease_until_mono: float) -> None:
    with Store(Paths(home)).transaction() as doc:
        doc["jobs"][job]["state"]["claims"][run_id] = {
            "run_id": run_id, "slot": STAMP, "trigger": "schedule", "attempt": 1,
            "owner": {"generation": "g1", "boot_id": boot_id(), **owner}, "boot_id": boot_id(),
            "claimed_at": STAMP, "lease_until_mono": lease_until_mono, "lease_until": STAMP,
            "dispatched": True, "child": None, "started_at": STAMP, "started_mono": None,
            "timeout": 3600.0, "kill_grace": 10.0, "late": False,
        }


def test_doctor_names_a_claim_whose_owner_died_and_one_whose_lease_expired(cli, home: Path) -> None:  # type: ignore[no-untyped-def]
    cli("add", "orphaned", "--every", "1h", "--", "true")
    cli("add", "expired", "--every", "1h", "--", "true")
    cli("add", "healthy", "--every", "1h", "--", "true")
    gone = subprocess.Popen(["true"])
    gone_start = psutil.Process(gone.pid).create_time() if gone.poll() is None else time.time()
    gone.wait()
    me = psutil.Process()
    _claim(home, "orphaned", "r-dead", {"pid": gone.pid, "start_time": gone_start}, time.monotonic() + 600)
    _claim(home, "expired", "r-late", {"pid": me.pid, "start_time": me.create_time()}, time.monotonic() - 5)
    _claim(home, "healthy", "r-fine", {"pid": me.pid, "start_time": me.create_time()}, time.monotonic() + 600)

    result = cli("doctor", "--json")
    assert result.code == 1
    claims = [f for f in json.loads(result.out)["findings"] if f["check"] == "claims"]
    by_job = {f["fix"].split()[2]: f for f in claims}
    assert set(by_job) == {"orphaned", "expired"}
    assert all(f["level"] == "action" for f in claims)
    assert f"pid {gone.pid}" in by_job["orphaned"]["message"] and "r-dead" in by_job["orphaned"]["message"]
    assert "lease expired" in by_job["expired"]["message"] and "r-late" in by_job["expired"]["message"]
    assert by_job["expired"]["fix"].startswith("cronctl resume expired")


def test_doctor_with_only_live_claims_reports_claims_ok(cli, home: Path) -> None:  # type: ignore[no-untyped-def]
    cli("add", "healthy", "--every", "1h", "--", "true")
    me = psutil.Process()
    _claim(home, "healthy", "r-fine", {"pid": me.pid, "start_time": me.create_time()}, time.monotonic() + 600)
    findings = json.loads(cli("doctor", "--json").out)["findings"]
    assert [f["level"] for f in findings if f["check"] == "claims"] == ["ok"]


def _fill(directory: Path) -> None:
    """Write until the filesystem says ENOSPC: a full disk, for real."""
    with open(directory / "filler", "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError:
            pass


def test_doctor_reports_the_free_space_of_the_homes_filesystem(cli, small_fs: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    home = small_fs / "home"
    monkeypatch.setenv("CRONCTL_HOME", str(home))
    cli("add", "a", "--every", "1h", "--", "true")
    disk = [f for f in json.loads(cli("doctor", "--json").out)["findings"] if f["check"] == "disk"]
    assert disk[0]["level"] == "warn" and "MB free" in disk[0]["message"], "a 4 MB filesystem is low"
    _fill(small_fs)
    result = cli("doctor", "--json")
    assert result.code == 1
    disk = [f for f in json.loads(result.out)["findings"] if f["check"] == "disk"]
    assert disk[0]["level"] == "action" and str(home) in disk[0]["message"]


def _loop_state(home: Path) -> dict[str, Any]:
    result = loophelp.cli(home, "status", "--json")
    return dict(json.loads(result.stdout)["loop"])


@pytest.mark.slow
def test_a_full_disk_is_told_from_a_hung_loop_and_a_standby_never_kills_the_leader(small_fs: Path) -> None:
    home = small_fs / "home"
    assert loophelp.cli(home, "add", "hourly", "--every", "1h", "--", "true").returncode == 0
    leader = loophelp.start_loop(home)
    standby = None
    try:
        loophelp.wait_ticking(home, leader)
        standby = loophelp.start_loop(home, "--standby", "--takeover-after", "2s")
        loophelp.wait_until(lambda: (home / "standby.json").exists(), 20)
        _fill(small_fs)
        # Past HEARTBEAT_STALE_AFTER (10 s): the heartbeat is silent, the tick record is not.
        loop = loophelp.wait_until(lambda: (s := _loop_state(home))["state"] == "cannot_write" and s, 40)
        assert loop["pid"] == leader.pid
        assert "scheduler.json: No space left on device" in loop["reason"] and "kill" not in loop["reason"]
        time.sleep(3)  # longer than --takeover-after: a standby that took this for a hang would have killed it
        assert leader.poll() is None and standby.poll() is None, "the healthy leader was killed"
        assert _loop_state(home)["state"] == "cannot_write"
        (small_fs / "filler").unlink()
        loophelp.wait_until(lambda: _loop_state(home)["state"] == "ok", 20)
    finally:
        if standby is not None:
            loophelp.stop(standby)
        loophelp.stop(leader)
    err = leader.stderr.read().decode() if leader.stderr else ""
    assert err.count("cannot write the heartbeat (scheduler.json: No space left on device)") == 1, err
    assert "the heartbeat is written again" in err


def test_run_on_a_corrupt_store_refuses_before_announcing(home: Path) -> None:
    assert loophelp.cli(home, "add", "a", "--every", "1h", "--", "true").returncode == 0
    (home / "jobs.json").write_text("{not json")
    result = loophelp.cli(home, "run", "--once")
    assert result.returncode == 1
    assert result.stderr.startswith("cronctl: error: cannot parse store") and "internal error" not in result.stderr
    assert loophelp.audit_rows(home, "scheduler.started") == []
    assert not (home / "scheduler.json").exists(), "no heartbeat: status must not report a crashed loop"


@pytest.fixture
def read_only_home(home: Path):  # type: ignore[no-untyped-def]
    """`home` bind-mounted read-only over itself (chmod does not stop root)."""
    assert loophelp.cli(home, "add", "a", "--every", "1h", "--", "true").returncode == 0
    if subprocess.run(["mount", "--bind", str(home), str(home)], capture_output=True).returncode != 0:
        pytest.skip("cannot bind-mount here (needs root)")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(home)], check=True, capture_output=True)
        yield home
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


def test_run_on_a_read_only_home_says_which_path_and_why(read_only_home: Path) -> None:
    result = loophelp.cli(read_only_home, "run", "--once")
    assert result.returncode == 1
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    assert result.stderr.startswith("cronctl: error: the loop cannot run on ")
    assert f"{read_only_home}/" in result.stderr and "Read-only file system" in result.stderr


def _jobs_file(path: Path, *jobs: tuple[str, str]) -> None:
    lines = "".join(f"  - {{name: {name}, every: 1h, command: '{command}'}}\n" for name, command in jobs)
    path.write_text("jobs:\n" + lines)


@pytest.mark.slow
def test_run_f_prunes_a_job_removed_or_renamed_in_the_watched_file(home: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    _jobs_file(jobs, ("keep", "true"), ("old-name", "true"), ("dropped", "true"))
    assert loophelp.cli(home, "add", "by-hand", "--every", "1h", "--", "true").returncode == 0
    loop = loophelp.start_loop(home, "-f", str(jobs))
    try:
        loophelp.wait_ticking(home, loop)
        assert sorted(loophelp.store(home)["jobs"]) == ["by-hand", "dropped", "keep", "old-name"]
        time.sleep(0.05)  # a new mtime even on coarse clocks
        _jobs_file(jobs, ("keep", "true"), ("new-name", "true"))
        loophelp.wait_until(lambda: "new-name" in loophelp.store(home)["jobs"], 20)
        assert sorted(loophelp.store(home)["jobs"]) == ["by-hand", "keep", "new-name"], \
            "the file's dropped jobs are gone; a job the file never defined stays"
        # The audit rows follow the store's commit (a few milliseconds later): wait for them too.
        removed = loophelp.wait_until(lambda: len(rows := loophelp.audit_rows(home, "job.removed")) >= 2 and rows, 20)
        assert sorted((r["job"], r["by"], r["source"]) for r in removed) == [
            ("dropped", "run -f", str(jobs)), ("old-name", "run -f", str(jobs))]
    finally:
        assert loophelp.stop(loop) == 0


@pytest.mark.slow
def test_run_f_removes_a_dropped_job_that_is_running_once_its_run_ends(home: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    _jobs_file(jobs, ("keep", "true"), ("long", "sleep 3"))
    loop = loophelp.start_loop(home, "-f", str(jobs))
    try:
        loophelp.wait_ticking(home, loop)
        assert loophelp.cli(home, "force-run", "long").returncode == 0
        loophelp.wait_until(lambda: loophelp.store(home)["jobs"]["long"]["state"]["claims"], 20)
        time.sleep(0.05)
        _jobs_file(jobs, ("keep", "true"))
        # The running run is not killed and the loop goes on: the job goes once the run has ended.
        loophelp.wait_until(lambda: "long" not in loophelp.store(home)["jobs"], 30)
        finished = loophelp.audit_rows(home, "run.finished", "long")
        assert [r["status"] for r in finished] == ["success"]
        # The JSON store appends a change's audit rows once its document is in place: just after.
        removed = loophelp.wait_until(lambda: loophelp.audit_rows(home, "job.removed", "long"), 10)
        assert [r["by"] for r in removed] == ["run -f"]
        assert loop.poll() is None
    finally:
        assert loophelp.stop(loop) == 0
    err = loop.stderr.read().decode() if loop.stderr else ""
    assert err.count("no longer defines long, still running: removed when the run ends") == 1, err


def test_run_on_a_full_disk_refuses_before_announcing_and_names_the_file(small_fs: Path) -> None:
    home = small_fs / "home"
    assert loophelp.cli(home, "add", "a", "--every", "1h", "--", "true").returncode == 0
    _fill(small_fs)
    result = loophelp.cli(home, "run", "--once")
    assert result.returncode == 1 and "internal error" not in result.stderr
    assert f"{home}/heartbeat.tick: No space left on device" in result.stderr
    assert loophelp.audit_rows(home, "scheduler.started") == []
    assert not (home / "scheduler.json").exists()
