"""Loop features end to end: -f re-applied on change, --once, on_failure, blocked config, clock steps."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.helpers.loophelp import audit_rows, cli, start_loop, stop, store, wait_ticking, wait_until

pytestmark = pytest.mark.slow


def test_run_f_applies_the_file_at_start_and_again_when_it_changes(home: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {name: first, every: 1h, command: 'true'}\n")
    loop = start_loop(home, "-f", str(jobs))
    try:
        wait_ticking(home, loop)
        assert list(store(home)["jobs"]) == ["first"]
        time.sleep(0.05)  # a new mtime even on coarse clocks
        jobs.write_text("jobs:\n  - {name: first, every: 1h, command: 'true'}\n"
                        "  - {name: second, every: 1h, command: 'true'}\n")
        wait_until(lambda: "second" in store(home)["jobs"], 20)
        jobs.write_text("jobs:\n  - {name: first, every: soon, command: 'true'}\n")  # a bad edit
        time.sleep(2.5)
        assert sorted(store(home)["jobs"]) == ["first", "second"], "a bad edit changes nothing"
        assert loop.poll() is None, "and the loop goes on"
    finally:
        assert stop(loop) == 0
    assert loop.stderr is not None
    assert "was not applied" in loop.stderr.read().decode()


def test_a_bad_file_at_start_exits_1_and_changes_nothing(home: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {name: x, every: nope, command: 'true'}\n")
    loop = start_loop(home, "-f", str(jobs))
    assert loop.wait(timeout=60) == 1
    assert loop.stderr is not None and "field 'every'" in loop.stderr.read().decode()


def test_once_fires_what_is_due_waits_for_it_and_exits(home: Path, tmp_path: Path) -> None:
    marker = tmp_path / "done"
    assert cli(home, "add", "due", "--every", "1s", "--", f"sleep 0.5; touch {marker}").returncode == 0
    time.sleep(1.2)
    loop = start_loop(home, "--once")
    assert loop.wait(timeout=60) == 0
    assert marker.exists(), "--once waited for the run"
    finished = audit_rows(home, "run.finished", "due")
    assert len(finished) == 1 and finished[0]["status"] == "success"


def test_on_failure_runs_after_a_definitive_failure_with_the_run_in_its_environment(home: Path,
                                                                                  tmp_path: Path) -> None:
    note = tmp_path / "note"
    hook = f'echo "$CRONCTL_JOB $CRONCTL_STATUS $CRONCTL_EXIT_CODE $CRONCTL_RUN_ID" > {note}; cat "$CRONCTL_LOG" >> {note}'
    assert cli(home, "add", "flaky", "--every", "1h", "--on-failure", hook, "--",
               "echo boom; exit 5").returncode == 0
    loop = start_loop(home)
    try:
        wait_ticking(home, loop)
        assert cli(home, "force-run", "flaky", "--wait").returncode == 5
        wait_until(note.exists, 20)
        run_id = audit_rows(home, "run.finished", "flaky")[0]["run_id"]
        first, *rest = wait_until(lambda: note.read_text().splitlines() if len(note.read_text().splitlines()) > 1
                                  else None, 20)
        assert first == f"flaky error 5 {run_id}"
        assert rest == ["boom"]
    finally:
        stop(loop)


def test_a_missing_cwd_is_recorded_once_then_skipped_until_fixed(home: Path, tmp_path: Path) -> None:
    workdir = tmp_path / "not-yet"
    assert cli(home, "add", "blocked", "--every", "1s", "--cwd", str(workdir), "--", "pwd").returncode == 0
    loop = start_loop(home)
    try:
        first = wait_until(lambda: audit_rows(home, "run.finished", "blocked"), 20)
        assert first[0]["status"] == "not_started" and first[0]["reason"] == "blocked_config"
        skipped = wait_until(lambda: [r for r in audit_rows(home, "run.skipped", "blocked")
                                      if r.get("reason") == "blocked_config"], 20)
        assert skipped
        assert len(audit_rows(home, "run.finished", "blocked")) == 1, "recorded once, not every slot"
        workdir.mkdir()
        wait_until(lambda: [r for r in audit_rows(home, "run.finished", "blocked") if r["status"] == "success"], 20)
    finally:
        stop(loop)
    history = json.loads(cli(home, "history", "blocked", "--json").stdout)["runs"]
    assert history[0]["reason"] == "blocked_config" and history[0]["fault"] == "job"


def test_the_wall_clock_stepping_back_never_fires_a_slot_again(tmp_path: Path) -> None:
    from cronctl.store import claims as claims_mod
    from cronctl.store.audit import AuditLog
    from cronctl.store.claims import Lease, Owner
    from cronctl.clock import FakeClock
    from cronctl.context import Context
    from cronctl.jobs.state import entry_from, new_state
    from cronctl.models import JobSpec
    from cronctl.paths import open_home
    from cronctl.store.jsonstore import Store
    from cronctl.timefmt import to_iso

    start = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
    paths = open_home(tmp_path / "h")
    clock = FakeClock(start)
    ctx = Context(paths, Store(paths), AuditLog(paths.audit), clock)
    with ctx.store.transaction() as doc:
        doc["jobs"]["m"] = entry_from(JobSpec(name="m", command="true", cron="* * * * *"), new_state(start, start))
    owner = Owner("g", 1, 1.0, "b")
    slots = []
    for step in (0, 60, -3600, 30, 60):  # a one-hour step back in the middle
        if step < 0:
            clock.set_wall(clock.now() + timedelta(seconds=step))
        else:
            clock.advance(step)
        with ctx.store.transaction() as doc:
            batch = claims_mod.claim_due(doc, clock.now(), owner, Lease(1e9, clock.now()))
            for new in batch.claims:
                slots.append(to_iso(new.slot))
                del doc["jobs"]["m"]["state"]["claims"][new.run_id]
    assert len(slots) == len(set(slots)), f"a slot fired twice: {slots}"
