"""doctor finds what needs action and --repair fixes it; secrets never leak into audit, status, history."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import cronctl_bin, subprocess_env


def run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cronctl_bin(), *args], env=subprocess_env(home), capture_output=True, text=True,
                          timeout=120)


def test_doctor_on_a_healthy_home_exits_zero(cli, home: Path) -> None:  # type: ignore[no-untyped-def]
    cli("add", "a", "--every", "1h", "--", "true")
    result = cli("doctor", "--json")
    data = json.loads(result.out)
    # No loop runs: that is a warning with its fix, not an action.
    assert result.code == 0, data
    loop = [f for f in data["findings"] if f["check"] == "loop"][0]
    assert loop["level"] == "warn" and loop["fix"] == "cronctl run"


def test_doctor_names_a_corrupt_store_and_repair_restores_the_last_good_copy(cli, home: Path) -> None:  # type: ignore[no-untyped-def]
    cli("add", "first", "--every", "1h", "--", "true")
    cli("add", "second", "--every", "1h", "--", "true")
    garbage = b"{not json"
    (home / "jobs.json").write_bytes(garbage)
    result = cli("doctor")
    assert result.code == 1
    assert "[action] store" in result.out and "cronctl doctor --repair" in result.out
    assert (home / "jobs.json").read_bytes() == garbage
    repaired = cli("doctor", "--repair")
    assert repaired.code == 0, repaired.out
    assert "restored" in repaired.out
    names = [job["name"] for job in json.loads(cli("list", "--json").out)["jobs"]]
    assert names == ["first"], "the last good copy is the document before the last write"
    kept = list(home.glob("jobs.json.corrupt-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == garbage


@pytest.mark.slow
def test_doctor_finds_orphaned_run_processes_of_this_home_and_repair_kills_them(home: Path,
                                                                                 tmp_path: Path) -> None:
    assert run(home, "add", "orphan", "--every", "1h", "--", "true").returncode == 0
    # A process of a finished run of this home (its log is here), left running by a crash.
    log = home / "runs" / "orphan" / "20260101T000000-deadbeef.log"
    log.parent.mkdir(parents=True)
    log.write_text("")
    env = {**os.environ, "CRONCTL_RUN_ID": "20260101T000000-deadbeef", "CRONCTL_JOB": "orphan"}
    orphan = subprocess.Popen(["sleep", "120"], env=env)
    # The same kind of process of ANOTHER home must never be touched.
    stranger = subprocess.Popen(["sleep", "120"], env={**env, "CRONCTL_RUN_ID": "20260101T000000-0ther000"})
    try:
        found = run(home, "doctor", "--json")
        assert found.returncode == 1
        orphans = [f for f in json.loads(found.stdout)["findings"] if f["check"] == "orphans"][0]
        assert orphans["level"] == "action" and f"pid {orphan.pid}" in orphans["message"]
        assert str(stranger.pid) not in orphans["message"]
        repaired = run(home, "doctor", "--repair")
        assert "killed 1 orphaned process" in repaired.stdout, repaired.stdout
        assert orphan.wait(timeout=20) is not None
        assert stranger.poll() is None
    finally:
        for proc in (orphan, stranger):
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_env_values_never_reach_audit_status_or_history_and_logs_are_private(home: Path) -> None:
    secret = "s3cr3t-value-never-logged"
    assert run(home, "add", "secretive", "--every", "1h", "--env", f"TOKEN={secret}", "--",
               "test -n \"$TOKEN\"; exit 3").returncode == 0
    waited = run(home, "force-run", "secretive", "--wait")
    assert waited.returncode == 3, waited.stderr
    for args in (["status", "--json"], ["status"], ["history", "--json"], ["history"], ["audit", "--json"]):
        out = run(home, *args)
        assert secret not in out.stdout + out.stderr, args
    assert secret not in (home / "audit.jsonl").read_text()
    assert secret not in (home / "runs" / "secretive" / "history.jsonl").read_text()
    for log in (home / "runs" / "secretive").glob("*.log"):
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    for name in ("jobs.json", "audit.jsonl"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600


def test_home_writable_by_others_is_refused_with_the_fix(tmp_path: Path) -> None:
    home = tmp_path / "open"
    home.mkdir()
    os.chmod(home, 0o777)
    result = run(home, "list")
    assert result.returncode == 1
    assert "chmod 700" in result.stderr and "Traceback" not in result.stderr
