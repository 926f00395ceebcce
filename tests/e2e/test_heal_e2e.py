"""Self-healing with the real fault injected: kill -9, SIGSTOP, crash seams, decoy pids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psutil
import pytest

from cronctl.timefmt import to_iso
from tests.helpers.loophelp import (
    audit_rows,
    cli,
    kill_hard,
    kill_hard_with_guards,
    processes_with_run_id,
    start_loop,
    stop,
    store,
    wait_ticking,
    wait_until,
)

pytestmark = pytest.mark.slow


def edit_store(home: Path, change) -> None:  # type: ignore[no-untyped-def]
    """Operators may edit jobs.json while no loop runs (SPEC §2)."""
    doc = store(home)
    change(doc)
    (home / "jobs.json").write_text(json.dumps(doc, sort_keys=True, indent=1))


def test_loop_killed_mid_run_is_healed_on_restart(home: Path, tmp_path: Path) -> None:
    assert cli(home, "add", "long", "--every", "2s", "--kill-grace", "1s", "--", "sleep 30").returncode == 0
    loop = start_loop(home)
    try:
        claimed = wait_until(lambda: audit_rows(home, "run.started", "long"), 20)[0]
        run_id = claimed["run_id"]
        assert wait_until(lambda: processes_with_run_id(run_id), 10)
    finally:
        kill_hard_with_guards(loop)
    assert processes_with_run_id(run_id), "the job outlives a kill -9 of its loop and of its guard"
    restarted = time.monotonic()
    loop = start_loop(home)
    try:
        wait_until(lambda: not processes_with_run_id(run_id), 20)
        healed_after = time.monotonic() - restarted
        reclaimed = wait_until(lambda: audit_rows(home, "claim.reclaimed", "long"), 10)
        assert len(reclaimed) == 1 and reclaimed[0]["reason"] == "owner_dead" and reclaimed[0]["run_id"] == run_id
        finished = [r for r in audit_rows(home, "run.finished", "long") if r["run_id"] == run_id]
        assert finished[0]["status"] == "lost" and finished[0]["reason"] == "executor_lost_mid_run"
        # The next slot fires normally.
        wait_until(lambda: [r for r in audit_rows(home, "run.started", "long") if r["run_id"] != run_id], 15)
    finally:
        stop(loop)
    print(f"dead-owner heal after restart: {healed_after:.2f}s (includes interpreter start)")
    assert healed_after < 15


def test_loop_killed_between_claim_and_dispatch_leaves_a_run_that_provably_never_ran(home: Path,
                                                                                     tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    assert cli(home, "add", "once", "--every", "1s", "--", f"touch {marker}").returncode == 0
    loop = start_loop(home, env={"CRONCTL_FAULT_LOOP_CRASH": "after_claim"})
    assert loop.wait(timeout=30) == -signal.SIGKILL
    (claim_row,) = audit_rows(home, "run.claimed", "once")
    assert not marker.exists()
    loop = start_loop(home)
    try:
        rows = wait_until(lambda: [r for r in audit_rows(home, "run.finished", "once")
                                   if r["run_id"] == claim_row["run_id"]], 20)
        assert rows[0]["status"] == "not_started" and rows[0]["reason"] == "run_claimed_without_dispatch"
        reclaimed = audit_rows(home, "claim.reclaimed", "once")
        assert [r["reason"] for r in reclaimed] == ["owner_dead"]
        wait_until(marker.exists, 15)  # later slots run for real
    finally:
        stop(loop)
    history = json.loads(cli(home, "history", "once", "--json").stdout)["runs"]
    first = [r for r in history if r["run_id"] == claim_row["run_id"]][0]
    assert first["started_at"] is None and first["status"] == "not_started"


def test_persisted_error_wedge_fires_within_two_seconds_of_loop_start(home: Path) -> None:
    assert cli(home, "add", "wedgy", "--every", "10m", "--", "true").returncode == 0
    now = datetime.now(timezone.utc)

    def wedge(doc):  # type: ignore[no-untyped-def]
        doc["jobs"]["wedgy"]["state"].update(last_status="error", last_run_at=to_iso(now - timedelta(hours=1)),
                                             next_run_at=to_iso(now + timedelta(days=1)))

    edit_store(home, wedge)
    loop = start_loop(home)
    try:
        hb = wait_ticking(home, loop)
        started = wait_until(lambda: audit_rows(home, "run.finished", "wedgy"), 20)
        assert started[0]["status"] == "success"
        rearmed = audit_rows(home, "recovery.persisted_error_rearmed", "wedgy")
        assert len(rearmed) == 1
        fired = datetime.fromisoformat(audit_rows(home, "run.started", "wedgy")[0]["ts"])
        begun = datetime.fromisoformat(audit_rows(home, "scheduler.started")[-1]["ts"])
        print(f"wedge fired {(fired - begun).total_seconds():.3f}s after loop start (ticks {hb['ticks']})")
        assert (fired - begun).total_seconds() < 2.0
    finally:
        stop(loop)
    assert len(audit_rows(home, "recovery.persisted_error_rearmed", "wedgy")) == 1


def test_job_that_failed_a_minute_ago_is_not_rearmed(home: Path) -> None:
    assert cli(home, "add", "fresh", "--every", "10m", "--", "true").returncode == 0
    now = datetime.now(timezone.utc)
    tomorrow = to_iso(now + timedelta(days=1))

    def failed_recently(doc):  # type: ignore[no-untyped-def]
        doc["jobs"]["fresh"]["state"].update(last_status="error", last_run_at=to_iso(now - timedelta(minutes=1)),
                                             next_run_at=tomorrow)

    edit_store(home, failed_recently)
    loop = start_loop(home)
    try:
        wait_ticking(home, loop)
        time.sleep(2.5)
    finally:
        stop(loop)
    assert audit_rows(home, "recovery.persisted_error_rearmed") == []
    assert store(home)["jobs"]["fresh"]["state"]["next_run_at"] == tomorrow


def test_sigstopped_loop_is_wedged_and_resume_releases_its_run(home: Path, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    script = f'echo "start $CRONCTL_RUN_ID $(date +%s.%N)" >> {ledger}; sleep 60; echo "end $CRONCTL_RUN_ID" >> {ledger}'
    assert cli(home, "add", "held", "--every", "1s", "--kill-grace", "1s", "--", script).returncode == 0
    loop = start_loop(home)
    try:
        run_id = wait_until(lambda: audit_rows(home, "run.started", "held"), 20)[0]["run_id"]
        os.kill(loop.pid, signal.SIGSTOP)
        healthy = cli(home, "status", "--stale", "--json")
        stale = wait_until(lambda: (lambda r: r if r.returncode == 3 else None)(cli(home, "status", "--stale", "--json")), 40, 1.0)
        data = json.loads(stale.stdout)
        assert data["loop"]["state"] == "wedged", data
        assert healthy.returncode in (0, 3)
        released = cli(home, "resume", "held")
        assert released.returncode == 0, released.stderr
        wait_until(lambda: not processes_with_run_id(run_id), 15)
        reclaimed = audit_rows(home, "claim.reclaimed", "held")
        assert [r["reason"] for r in reclaimed] == ["operator"] and reclaimed[0]["run_id"] == run_id
        assert store(home)["jobs"]["held"]["state"]["claims"] == {}
        os.kill(loop.pid, signal.SIGCONT)
        fenced = wait_until(lambda: [r for r in audit_rows(home, "run.fenced", "held") if r["run_id"] == run_id], 20)
        assert fenced
    finally:
        os.kill(loop.pid, signal.SIGCONT)
        stop(loop)
    starts = [line for line in ledger.read_text().splitlines() if line.startswith("start")]
    runs = json.loads(cli(home, "history", "held", "--json", "-n", "100").stdout)["runs"]
    _assert_no_overlap(runs)
    assert len(starts) >= 1


def _assert_no_overlap(runs: list[dict]) -> None:  # type: ignore[type-arg]
    spans = sorted((r["started_at"], r["ended_at"]) for r in runs if r.get("started_at"))
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end, f"two runs overlapped: one ended {end}, the next started {start}"


def test_standby_takes_over_from_a_wedged_leader(home: Path) -> None:
    assert cli(home, "add", "busy", "--every", "1s", "--kill-grace", "1s", "--", "sleep 60").returncode == 0
    leader = start_loop(home)
    standby = None
    try:
        run_id = wait_until(lambda: audit_rows(home, "run.started", "busy"), 20)[0]["run_id"]
        standby = start_loop(home, "--standby", "--takeover-after", "3s")
        wait_until(lambda: audit_rows(home, "scheduler.standby"), 20)
        os.kill(leader.pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        takeover = wait_until(lambda: audit_rows(home, "scheduler.takeover"), 40)
        took = time.monotonic() - stopped_at
        assert takeover[0]["reason"] == "leader_wedged" and takeover[0]["previous_pid"] == leader.pid
        assert leader.wait(timeout=10) == -signal.SIGKILL
        reclaimed = wait_until(lambda: [r for r in audit_rows(home, "claim.reclaimed", "busy")
                                        if r["run_id"] == run_id], 20)
        assert reclaimed[0]["reason"] == "owner_dead"
        wait_until(lambda: not processes_with_run_id(run_id), 15)
        print(f"wedged-leader takeover {took:.2f}s after SIGSTOP (takeover-after 3s)")
    finally:
        if leader.poll() is None:
            os.kill(leader.pid, signal.SIGCONT)
            stop(leader)
        if standby is not None:
            stop(standby)


def test_status_stale_exit_codes(home: Path) -> None:
    assert cli(home, "add", "fine", "--every", "1h", "--", "true").returncode == 0
    loop = start_loop(home)
    try:
        wait_ticking(home, loop)
        healthy = cli(home, "status", "--stale")
        assert healthy.returncode == 0, healthy.stdout
    finally:
        kill_hard(loop)
    past = to_iso(datetime.now(timezone.utc) - timedelta(hours=3))
    edit_store(home, lambda doc: doc["jobs"]["fine"]["state"].update(next_run_at=past))
    late = cli(home, "status", "--stale", "--json")
    assert late.returncode == 3
    data = json.loads(late.stdout)
    assert data["loop"]["state"] == "dead"
    assert [(j["name"], j["state"]) for j in data["jobs"]] == [("fine", "late")]


def test_status_stale_shows_a_persisted_error_wedge_and_an_expired_claim(home: Path) -> None:
    assert cli(home, "add", "wedgy", "--every", "10m", "--", "true").returncode == 0
    assert cli(home, "add", "claimed", "--every", "10m", "--", "true").returncode == 0
    now = datetime.now(timezone.utc)
    me = psutil.Process()
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()

    def wedge(doc):  # type: ignore[no-untyped-def]
        doc["jobs"]["wedgy"]["state"].update(last_status="error", last_run_at=to_iso(now - timedelta(hours=1)),
                                             next_run_at=to_iso(now + timedelta(days=1)))
        doc["jobs"]["claimed"]["state"]["claims"] = {"r1": {
            "run_id": "r1", "slot": to_iso(now), "trigger": "schedule", "attempt": 1, "boot_id": boot,
            "owner": {"generation": "g", "pid": me.pid, "start_time": me.create_time(), "boot_id": boot},
            "claimed_at": to_iso(now), "lease_until_mono": time.monotonic() - 1, "lease_until": to_iso(now),
            "dispatched": False, "child": None, "started_at": None, "timeout": 60, "kill_grace": 1, "late": False}}

    edit_store(home, wedge)
    result = cli(home, "status", "--stale", "--json")
    assert result.returncode == 3
    states = {j["name"]: (j["state"], j["fault"]) for j in json.loads(result.stdout)["jobs"]}
    assert states == {"wedgy": ("wedged", "platform"), "claimed": ("wedged", "platform")}


def test_claim_pointing_at_a_reused_pid_never_signals_the_decoy(home: Path) -> None:
    """The claim names a live process, but with another start time: it is not the run's."""
    decoy = subprocess.Popen(["sleep", "60"])
    try:
        real_start = psutil.Process(decoy.pid).create_time()
        assert cli(home, "add", "victim", "--every", "1h", "--", "true").returncode == 0
        now = datetime.now(timezone.utc)
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        fake = {"pid": decoy.pid, "start_time": real_start - 1000.0}

        def claim_decoy(doc):  # type: ignore[no-untyped-def]
            doc["jobs"]["victim"]["state"]["claims"] = {"r-decoy": {
                "run_id": "r-decoy", "slot": to_iso(now), "trigger": "schedule", "attempt": 1, "boot_id": boot,
                "owner": {"generation": "g", **fake, "boot_id": boot}, "claimed_at": to_iso(now),
                "lease_until_mono": time.monotonic() + 3600, "lease_until": to_iso(now), "dispatched": True,
                "child": dict(fake), "started_at": to_iso(now), "started_mono": time.monotonic(),
                "timeout": 60, "kill_grace": 1, "late": False}}

        edit_store(home, claim_decoy)
        loop = start_loop(home)
        try:
            reclaimed = wait_until(lambda: audit_rows(home, "claim.reclaimed", "victim"), 20)
            assert reclaimed[0]["reason"] == "owner_dead", "a reused pid is not the owner"
        finally:
            stop(loop)
        assert decoy.poll() is None, "the decoy was signalled"
        assert psutil.Process(decoy.pid).status() != psutil.STATUS_ZOMBIE
    finally:
        decoy.kill()
        decoy.wait()


def test_deadline_janitor_ends_a_real_run_whose_runner_timer_is_disabled(home: Path) -> None:
    """The runner-side timeout is switched off (a seam); the janitor must end the run for real."""
    from cronctl.store.claims import Owner
    from cronctl.context import Context
    from cronctl.loop.heal import DEADLINE_SLACK, Liveness, heal_pass
    from cronctl.proc.identity import boot_id, identify
    from cronctl.proc.kill import kill_run_processes
    from tests.helpers.enginehelp import running_engine

    assert cli(home, "add", "stuck", "--every", "1s", "--timeout", "1s", "--kill-grace", "1s", "--",
               "trap '' TERM; sleep 300").returncode == 0
    ctx = Context.open(home)
    me = identify(os.getpid())
    assert me is not None
    owner = Owner("janitor-test", os.getpid(), me.start_time, boot_id())
    with running_engine(ctx, owner, timeouts_enabled=False) as engine:
        run_id = wait_until(lambda: (engine.tick(), list(engine.active))[1], 20)[0]
        assert wait_until(lambda: processes_with_run_id(run_id), 10)
        time.sleep(2.5)  # far past timeout + kill_grace: only the disabled runner timer keeps it alive
        assert processes_with_run_id(run_id), "the runner really did not end it"
        offset = 1.0 + 1.0 + DEADLINE_SLACK + 5.0  # the janitor's deadline, reached without waiting 2 minutes
        live = Liveness(owner_alive=lambda owner: True, lease_expired=lambda claim: False,
                        monotonic=lambda: time.monotonic() + offset)
        report = heal_pass(ctx, ctx.clock.now(), live, kill_run_processes, supervised=set(engine.active))
        assert [r for _, r in report.deadline_terminated] == [run_id]
        wait_until(lambda: not processes_with_run_id(run_id), 15)
        rows = [r for r in audit_rows(home, "recovery.deadline_terminated") if r["run_id"] == run_id]
        assert len(rows) == 1
        finished = [r for r in audit_rows(home, "run.finished", "stuck") if r["run_id"] == run_id]
        assert finished[0]["status"] == "timeout" and finished[0]["reason"] == "deadline_janitor"
