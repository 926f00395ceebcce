"""Issue 15, with the real fault injected into a real `cronctl`:

1. a finished run never vanishes: killed (SIGKILL, by strace, at its audit write) right
   after the store recorded its end, the run still gets its run.finished row, its history
   record and its on_failure hook, once, from the next command that opens the store;
2. force-run without a loop never wedges its job: killed (the store's crash seam) or
   failed (EIO on the directory fsync, by strace) after writing its claim, the next
   force-run reclaims that dead owner's claim and runs;
3. a command the kernel cannot exec (E2BIG) is refused at definition time, and one that
   reached the store anyway ends `force-run --wait` with exit 1 and a record.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.faulthelp import strace_or_skip
from tests.helpers.loophelp import audit_rows, cli, store, wait_until

from tests.conftest import cronctl_bin, subprocess_env

pytestmark = pytest.mark.slow


@pytest.fixture
def strace() -> str:
    return strace_or_skip("strace is not installed: the fault cannot be injected")


def cli_under(home: Path, prefix: list[str], *args: str, env: dict[str, str] | None = None,
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *cronctl_bin(), *args], env={**subprocess_env(home), **(env or {})},
                          capture_output=True, text=True, timeout=60)


def kill_at_audit_write(strace: str, home: Path, which: int) -> list[str]:
    """SIGKILL the process at its `which`-th write to the audit log (before the bytes land)."""
    audit = home / "audit.jsonl"
    audit.touch()
    return [strace, "-f", "-qq", "-o", "/dev/null", "-P", str(audit), "-e", "trace=write",
            "-e", f"inject=write:signal=KILL:when={which}"]


def history_of(home: Path, job: str) -> list[dict[str, Any]]:
    path = home / "runs" / job / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows_of(home: Path, event: str, run_id: str) -> list[dict[str, Any]]:
    return [row for row in audit_rows(home, event) if row.get("run_id") == run_id]


# --- 1. a finished run never vanishes ---------------------------------------------------------


def test_a_run_whose_finisher_is_killed_after_the_store_write_is_delivered_once(
        home: Path, tmp_path: Path, strace: str) -> None:
    hooked = tmp_path / "hooked"
    assert cli(home, "add", "j", "--every", "1h", "--on-failure", f"echo $CRONCTL_RUN_ID >> {hooked}",
               "--", "echo ran; exit 3").returncode == 0
    # force-run's audit writes: force_run.requested, run.claimed, run.started, run.finished (killed there).
    killed = cli_under(home, kill_at_audit_write(strace, home, 4), "force-run", "j")
    assert killed.returncode == -9 or "Killed" in killed.stderr or killed.returncode == 137, killed
    first = store(home)["jobs"]["j"]["state"]
    run_id = first["last_run_id"]
    assert first["last_status"] == "error", "the store recorded the end before the kill"
    assert rows_of(home, "run.finished", run_id) == [] and history_of(home, "j") == []
    assert not hooked.exists()

    again = cli(home, "force-run", "j")
    assert again.returncode == 0, again.stderr

    finished = rows_of(home, "run.finished", run_id)
    assert [row["status"] for row in finished] == ["error"], "the lost row was delivered, once"
    assert [r["run_id"] for r in history_of(home, "j")].count(run_id) == 1
    wait_until(lambda: hooked.exists() and len(hooked.read_text().split()) == 2, 20)
    assert sorted(hooked.read_text().split()).count(run_id) == 1, "the owed on_failure ran, once"
    # Delivered entries leave the store with a later write; a third command doubles nothing.
    assert cli(home, "force-run", "j").returncode == 0
    assert len(rows_of(home, "run.finished", run_id)) == 1
    assert [r["run_id"] for r in history_of(home, "j")].count(run_id) == 1
    wait_until(lambda: len(hooked.read_text().split()) == 3, 20)
    assert hooked.read_text().split().count(run_id) == 1


def test_a_loop_started_after_the_kill_delivers_what_was_owed(home: Path, tmp_path: Path, strace: str) -> None:
    hooked = tmp_path / "hooked"
    assert cli(home, "add", "j", "--every", "1h", "--on-failure", f"echo $CRONCTL_RUN_ID >> {hooked}",
               "--", "exit 3").returncode == 0
    cli_under(home, kill_at_audit_write(strace, home, 4), "force-run", "j")
    run_id = store(home)["jobs"]["j"]["state"]["last_run_id"]
    assert rows_of(home, "run.finished", run_id) == []

    loop = subprocess.Popen([*cronctl_bin(), "run"], env=subprocess_env(home),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: rows_of(home, "run.finished", run_id), 20)
        wait_until(lambda: hooked.exists(), 20)
        wait_until(lambda: "pending" not in store(home)["jobs"]["j"]["state"], 20)
    finally:
        loop.terminate()
        loop.wait(30)
    assert len(rows_of(home, "run.finished", run_id)) == 1
    assert [r["run_id"] for r in history_of(home, "j")] == [run_id]
    assert hooked.read_text().split() == [run_id]


# --- 2. force-run without a loop never wedges ---------------------------------------------------


def test_force_run_killed_after_its_claim_does_not_wedge_the_job(home: Path) -> None:
    assert cli(home, "add", "j", "--every", "1h", "--", "echo ran").returncode == 0
    crashed = cli_under(home, [], "force-run", "j", env={"CRONCTL_FAULT_STORE_CRASH": "dirfsync"})
    assert crashed.returncode != 0
    claims = store(home)["jobs"]["j"]["state"]["claims"]
    assert len(claims) == 1, "the kill left the claim of the dead force-run"
    (left,) = claims

    again = cli(home, "force-run", "j", "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "is running" not in again.stdout + again.stderr
    assert store(home)["jobs"]["j"]["state"].get("claims") in ({}, None)
    reclaimed = rows_of(home, "claim.reclaimed", left)
    assert [row["reason"] for row in reclaimed] == ["owner_dead"]
    assert [row["status"] for row in rows_of(home, "run.finished", left)] == ["not_started"]


def test_force_run_whose_directory_fsync_fails_does_not_wedge_the_job(home: Path, strace: str) -> None:
    assert cli(home, "add", "j", "--every", "1h", "--", "echo ran").returncode == 0
    eio = [strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync", "-e", "inject=fsync:error=EIO:when=2"]
    failed = cli_under(home, eio, "force-run", "j")
    assert failed.returncode != 0
    assert "Traceback" not in failed.stderr
    again = cli(home, "force-run", "j", "--wait")
    assert again.returncode == 0, again.stdout + again.stderr
    assert store(home)["jobs"]["j"]["state"].get("claims") in ({}, None)
    assert [r["status"] for r in history_of(home, "j")][-1] == "success"


# --- 3. commands over the kernel's argument limit -----------------------------------------------


def test_a_command_over_the_argument_limit_is_refused_at_definition_time(home: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: big\n    every: 1h\n    command: \"echo " + "x" * 200_000 + "\"\n")
    for verb in ("validate", "apply"):
        result = cli(home, verb, "-f", str(jobs))
        assert result.returncode == 1, result.stdout + result.stderr
        assert "job 'big': field 'command':" in result.stderr and "E2BIG" in result.stderr
        assert "Traceback" not in result.stderr
    assert "big" not in store(home).get("jobs", {}) if (home / "jobs.json").exists() else True


def test_force_run_of_an_unspawnable_command_is_recorded_and_wait_returns(home: Path) -> None:
    assert cli(home, "add", "big", "--every", "1h", "--", "echo small").returncode == 0
    doc = store(home)  # a store written before the definition-time check existed
    doc["jobs"]["big"]["command"] = "echo " + "x" * 200_000
    (home / "jobs.json").write_text(json.dumps(doc, sort_keys=True, indent=1))

    waited = cli(home, "force-run", "big", "--wait", timeout=60)
    assert waited.returncode == 1, waited.stdout + waited.stderr
    assert "not_started (spawn_failed)" in waited.stdout
    plain = cli(home, "force-run", "big", timeout=60)
    assert "through the running loop" not in plain.stdout
    assert "not_started (spawn_failed)" in plain.stdout
    records = history_of(home, "big")
    assert [(r["status"], r["reason"]) for r in records] == [("not_started", "spawn_failed")] * 2
    assert len(audit_rows(home, "run.spawn_failed")) == 2
    assert store(home)["jobs"]["big"]["state"].get("claims") in ({}, None)
    assert os.path.exists(home / "jobs.json")


def test_force_run_without_a_loop_lets_the_on_failure_hook_finish_before_it_exits(home: Path, tmp_path: Path) -> None:
    hooked = tmp_path / "hooked"
    # The hook outlives the run by a second: force-run must not end it at its own exit.
    assert cli(home, "add", "j", "--every", "1h", "--on-failure", f"sleep 1; echo $CRONCTL_RUN_ID >> {hooked}",
               "--", "exit 3").returncode == 0
    assert cli(home, "force-run", "j").returncode == 0
    assert hooked.exists() and len(hooked.read_text().split()) == 1
