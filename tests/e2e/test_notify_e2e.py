"""Issue 23, end to end: a real `cronctl run` notifying a local HTTP receiver and SMTP sink.

Each test injects its fault for real: a receiver answering 500 or hanging, a receiver down
for 30 s, the loop killed with SIGKILL between a run's end and its delivery (the engine's
crash seam), a job whose cwd is missing. Bounds are generous (a busy 2-core machine).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.loophelp import audit_rows, cli, kill_hard, start_loop, stop, wait_ticking, wait_until
from tests.helpers.receivers import Receiver, SmtpSink

pytestmark = pytest.mark.slow


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def write_jobs(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def events(receiver: Receiver) -> list[tuple[str, str]]:
    return [(body["job"], body["event"]) for body in receiver.bodies()]


def test_failing_then_passing_job_gives_failure_then_recovery(home: Path, tmp_path: Path,
                                                            receiver: Receiver) -> None:
    flag = tmp_path / "fixed"
    jobs = write_jobs(tmp_path / "jobs.yaml", f"""
notify:
  - url: {receiver.url}/hook/${{HOOK_TOKEN}}
jobs:
  - name: flaky
    every: 1s
    command: "test -e {flag}"
""")
    loop = start_loop(home, "-f", str(jobs), env={"HOOK_TOKEN": "s3cret"})
    try:
        wait_ticking(home, loop)
        wait_until(lambda: ("flaky", "failure") in events(receiver), 60)
        flag.touch()
        wait_until(lambda: ("flaky", "recovery") in events(receiver), 60)
    finally:
        assert stop(loop) == 0
    got = [event for _, event in events(receiver)]
    assert sorted(got[:2]) == ["failure", "stale"]  # alert_after 1: the first failure is stale (sent in parallel)
    assert got.count("recovery") == 1 and got.index("recovery") > got.index("failure")
    keys = [r.headers["Idempotency-Key"] for r in receiver.snapshot()]
    assert len(keys) == len(set(keys))  # one key each, each sent once (the receiver said 200)
    assert all(r.path == "/hook/s3cret" for r in receiver.snapshot())  # ${VAR} expanded at send time
    assert all("s3cret" not in str(row) for row in audit_rows(home))  # and never written down
    assert len(audit_rows(home, "notify.sent")) == len(keys)


def test_a_hanging_receiver_delays_no_fire(home: Path, tmp_path: Path) -> None:
    hanging = Receiver(hang=True)
    jobs = write_jobs(tmp_path / "jobs.yaml", f"""
jobs:
  - name: tick
    every: 1s
    command: "true"
    notify: [{{url: "{hanging.url}/slow", on: [start, success]}}]
""")
    loop = start_loop(home, "-f", str(jobs))
    try:
        wait_ticking(home, loop)
        time.sleep(12)
    finally:
        stop(loop)
        hanging.stop()
    started = audit_rows(home, "run.started", "tick")
    assert len(started) >= 8, len(started)  # about one a second, while every try hung for 10 s
    late = [row.get("late_ms") or 0.0 for row in started if row.get("held")]
    assert late and statistics.median(late) < 500, late
    assert hanging.snapshot()  # the tries did go out (one job's one at a time, in order), on the worker's threads


def test_kill_9_between_a_finish_and_its_delivery_delivers_after_restart(home: Path, tmp_path: Path,
                                                                         receiver: Receiver) -> None:
    jobs = write_jobs(tmp_path / "jobs.yaml", f"""
jobs:
  - name: once
    every: 1h
    command: "exit 7"
    notify: [{{url: "{receiver.url}", on: [failure]}}]
""")
    assert cli(home, "apply", "-f", str(jobs)).returncode == 0
    # The engine's crash seam: SIGKILL right after the store committed the run's end.
    loop = start_loop(home, env={"CRONCTL_FAULT_LOOP_CRASH": "after_finish"})
    try:
        wait_ticking(home, loop)
        assert cli(home, "force-run", "once").returncode == 0
        loop.wait(timeout=60)
        assert loop.returncode == -9
    finally:
        if loop.poll() is None:
            kill_hard(loop)
    assert receiver.snapshot() == []  # died before delivering
    again = start_loop(home)
    try:
        wait_until(lambda: events(receiver) == [("once", "failure")], 60)
    finally:
        assert stop(again) == 0
    assert receiver.bodies()[0]["exit_code"] == 7


def test_a_wedged_job_gives_stale_with_no_command_run(home: Path, tmp_path: Path, receiver: Receiver) -> None:
    marker = tmp_path / "ran"
    jobs = write_jobs(tmp_path / "jobs.yaml", f"""
jobs:
  - name: wedged
    every: 1s
    cwd: {tmp_path / "missing"}
    command: "touch {marker}"
    notify: [{{url: "{receiver.url}"}}]
""")
    loop = start_loop(home, "-f", str(jobs))
    try:
        wait_until(lambda: ("wedged", "stale") in events(receiver), 60)
        time.sleep(3)
    finally:
        assert stop(loop) == 0
    assert not marker.exists()
    assert events(receiver).count(("wedged", "stale")) == 1  # once per episode, not per refusal


def test_receiver_down_30s_gets_everything_afterwards(home: Path, tmp_path: Path) -> None:
    receiver = Receiver()
    port = receiver.port
    receiver.down()
    jobs = write_jobs(tmp_path / "jobs.yaml", f"""
jobs:
  - name: fails
    every: 2s
    command: "exit 1"
    notify: [{{url: "http://127.0.0.1:{port}", on: [failure]}}]
""")
    loop = start_loop(home, "-f", str(jobs), env={"CRONCTL_NOTIFY_BACKOFF": "1s,4s,10m"})
    try:
        wait_ticking(home, loop)
        time.sleep(30)
        assert cli(home, "pause", "fails").returncode == 0
        time.sleep(2)  # the run in progress, if any, ends
        owed = {row["run_id"] for row in audit_rows(home, "run.finished", "fails")}
        assert len(owed) >= 5
        assert audit_rows(home, "notify.failed")  # tries were made and refused
        receiver.up()  # the same port, held while it was down
        wait_until(lambda: {b["run_id"] for b in receiver.bodies()} >= owed, 60)
    finally:
        assert stop(loop) == 0
        receiver.stop()
    keys = [r.headers["Idempotency-Key"] for r in receiver.snapshot()]
    assert len(keys) == len(set(keys))


def test_mailto_import_round_trips_to_an_email(home: Path, tmp_path: Path) -> None:
    sink = SmtpSink()
    crontab = tmp_path / "crontab"
    crontab.write_text("MAILTO=ops@example.com\n* * * * * echo hello from cron\n")
    done = cli(home, "import-crontab", str(crontab), "-o", str(tmp_path / "jobs.yaml"))
    assert done.returncode == 0, done.stderr
    assert 'email: "ops@example.com"' in (tmp_path / "jobs.yaml").read_text()
    assert cli(home, "apply", "-f", str(tmp_path / "jobs.yaml")).returncode == 0
    name = cli(home, "list", "--json").stdout.split('"name": "')[1].split('"')[0]
    loop = start_loop(home, env={"CRONCTL_SMTP": sink.url})
    try:
        wait_ticking(home, loop)
        forced = cli(home, "force-run", name)
        # The job runs every minute: when its own run has just started, a forced run of a skip
        # job is refused (seen on a busy machine); that run mails all the same.
        assert forced.returncode == 0 or "is running and its overlap is skip" in forced.stderr, forced.stderr
        wait_until(lambda: sink.messages, 60)
    finally:
        assert stop(loop) == 0
        sink.stop()
    mail: Any = sink.messages[0]
    assert mail["To"] == "ops@example.com" and "hello from cron" in mail.get_payload()
