"""The definition commands through the real entry point (main), with exact output.

Most tests run on a FakeClock put into the CLI's clock seam, so every instant,
relative time and audit stamp is exact. The few that run on the system clock
match relative times ("in 59m59s") with a regex and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from cronctl import __version__
from cronctl.clock import FakeClock

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
STAMP = "2026-03-01T12:00:00.000+00:00"


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The CLI's clock is this FakeClock (2026-03-01 12:00 UTC) until the test ends."""
    from cronctl.cli import app as cli_module

    fake = FakeClock(NOW)
    monkeypatch.setitem(cli_module._state, "clock", fake)
    return fake


def store_bytes(home: Path) -> bytes:
    return (home / "jobs.json").read_bytes()


def store(home: Path) -> dict[str, Any]:
    return json.loads(store_bytes(home))


def audit_rows(home: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]


def write_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def lines(*rows: str) -> str:
    return "".join(row + "\n" for row in rows)


def fake_claim(home: Path, job: str, run_id: str = "20260301T115900-deadbeef") -> None:
    """Give a job a live claim (owned by this test process), as a running loop would."""
    from cronctl.paths import Paths
    from cronctl.proc.identity import boot_id
    from cronctl.store.jsonstore import Store

    with Store(Paths(home)).transaction() as doc:
        doc["jobs"][job]["state"]["claims"][run_id] = {
            "run_id": run_id, "slot": STAMP, "trigger": "schedule", "attempt": 1,
            "owner": {"generation": "g1", "pid": os.getpid(), "start_time": 0.0, "boot_id": boot_id()},
            "boot_id": boot_id(), "claimed_at": STAMP, "lease_until_mono": time.monotonic() + 600,
            "lease_until": STAMP, "dispatched": True, "child": None, "started_at": STAMP,
            "started_mono": None, "timeout": 3600.0, "kill_grace": 10.0, "late": False,
        }


Cli = Callable[..., Any]

# --- --version -----------------------------------------------------------------------


def test_version_prints_the_package_version_and_touches_no_home(cli: Cli, home: Path) -> None:
    result = cli("--version")
    assert (result.code, result.out, result.err) == (0, f"cronctl {__version__}\n", "")
    assert not home.exists()


def test_help_shows_the_name_pattern_as_written_not_as_markup(cli: Cli) -> None:
    result = cli("add", "-h")
    assert result.code == 0
    assert "Job name: [a-z0-9][a-z0-9._-]*" in result.out


def test_status_stale_exits_3_when_a_job_is_late(cli: Cli, clock: FakeClock) -> None:
    cli("add", "tick", "--every", "1h", "--", "true")
    result = cli("status", "--stale")
    assert (result.code, result.out) == (0, "nothing is stale\n")
    clock.advance(2 * 3600)
    result = cli("status", "--stale")
    assert result.code == 3
    assert [line.rstrip() for line in result.out.splitlines()] == [
        "JOB   STATE  NEXT                           LAST  FAULT     REASON",
        "tick  late   2026-03-01T13:00:00.000+00:00  -     platform  due since 2026-03-01T13:00:00.000+00:00 and not "
        "started; is 'cronctl run' running?",
    ]


# --- add -----------------------------------------------------------------------------


def test_add_prints_the_schedule_and_the_next_fire_in_the_jobs_zone_and_in_utc(
    cli: Cli, home: Path, clock: FakeClock
) -> None:
    result = cli("add", "backup", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--",
                 "pg_dump db | gzip > /tmp/db.gz")
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        "added backup: 0 3 * * * (Europe/Berlin), next fire 2026-03-02T03:00:00+01:00 (2026-03-02T02:00:00Z)\n"
    )
    entry = store(home)["jobs"]["backup"]
    assert entry["command"] == "pg_dump db | gzip > /tmp/db.gz"
    assert entry["state"]["next_run_at"] == "2026-03-02T02:00:00.000+00:00"


def test_add_of_an_interval_job_fires_one_interval_later_plus_its_stable_jitter(
    cli: Cli, home: Path, clock: FakeClock
) -> None:
    result = cli("add", "tick", "--every", "5m", "--jitter", "30s", "--", "echo", "hi")
    # The slot is 12:05; the jitter of the name 'tick' in [0, 30s) is 10.036s, and it is the fire that is shown.
    assert result.out == "added tick: every 5m (UTC), next fire 2026-03-01T12:05:10.036+00:00 (2026-03-01T12:05:10.036Z)\n"
    state = store(home)["jobs"]["tick"]["state"]
    assert state["next_run_at"] == "2026-03-01T12:05:00.000+00:00"


def test_add_of_a_paused_job_says_it_will_not_fire(cli: Cli, clock: FakeClock) -> None:
    result = cli("add", "held", "--every", "1h", "--paused", "--", "true")
    assert (result.code, result.out) == (0, "added held: every 1h (UTC), paused (no fire until 'cronctl resume held')\n")


def test_add_of_a_one_shot_in_the_past_is_refused_unless_allow_past(cli: Cli, clock: FakeClock) -> None:
    refused = cli("add", "late", "--at", "2026-03-01T11:00:00+01:00", "--", "true")
    assert refused.code == 1 and refused.out == "" and "--allow-past" in refused.err
    assert refused.err.startswith("cronctl: error: job 'late': --at: 2026-03-01T10:00:00.000+00:00 is in the past")
    result = cli("add", "late", "--at", "2026-03-01T11:00:00+01:00", "--allow-past", "--", "true")
    assert result.code == 0
    assert result.out == ("added late: at 2026-03-01T10:00:00.000+00:00 (UTC), "
                          "next fire 2026-03-01T10:00:00+00:00 (2026-03-01T10:00:00Z)\n")
    assert result.err == ("cronctl: warning: late: 'at' 2026-03-01T10:00:00+00:00 is in the past; "
                          "a running loop fires it at once\n")


def test_add_json_is_the_stored_entry_plus_next_fire_and_health(cli: Cli, home: Path, clock: FakeClock) -> None:
    result = cli("add", "tick", "--every", "5m", "--env", "A=1", "--env", "B=x=y", "--retries", "2",
                 "--json", "--", "echo", "hi")
    assert (result.code, result.err) == (0, "")
    assert result.json() == {
        "name": "tick", "command": ["echo", "hi"], "cron": None, "every": "5m", "at": None, "timezone": "UTC",
        "cwd": None, "env": {"A": "1", "B": "x=y"}, "timeout": "1h", "kill_grace": "10s", "overlap": "skip",
        "catchup": "latest", "starting_deadline": None, "retries": 2, "retry_delay": "1m", "repeat": None,
        "jitter": "0s", "grace": None, "on_failure": None, "paused": False, "source": None,
        "next_fire_at": "2026-03-01T12:05:00.000+00:00",
        "health": {"state": "ok", "reason": "waiting for its first run", "fault": None},
        "state": {
            "next_run_at": "2026-03-01T12:05:00.000+00:00", "last_run_at": None, "last_status": None,
            "last_exit_code": None, "last_reason": None, "last_run_id": None, "last_slot": None,
            "last_duration": None, "last_late": False, "created_at": STAMP, "updated_at": STAMP,
            "paused": False, "completed": False, "runs_started": 0, "consecutive_failures": 0,
            "retry": None, "claims": {},
        },
    }
    stored = store(home)["jobs"]["tick"]
    assert {k: v for k, v in result.json().items() if k not in ("next_fire_at", "health")} == stored


def test_one_argument_after_the_dashes_is_a_shell_string_and_several_are_argv(cli: Cli, home: Path) -> None:
    assert cli("add", "shell", "--every", "1m", "--", "echo a | wc -c").code == 0
    assert cli("add", "argv", "--every", "1m", "--", "echo", "a | wc -c").code == 0
    jobs = store(home)["jobs"]
    assert jobs["shell"]["command"] == "echo a | wc -c"
    assert jobs["argv"]["command"] == ["echo", "a | wc -c"]


def test_a_relative_cwd_is_made_absolute_against_the_current_directory(
    cli: Cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli("add", "here", "--every", "1m", "--cwd", "work", "--", "true").code == 0
    assert store(home)["jobs"]["here"]["cwd"] == str(tmp_path / "work")


def test_add_refuses_an_existing_name_and_changes_nothing(cli: Cli, home: Path) -> None:
    cli("add", "backup", "--every", "1h", "--", "true")
    before = store_bytes(home)
    result = cli("add", "backup", "--every", "5m", "--", "false")
    assert (result.code, result.out) == (1, "")
    assert result.err == "cronctl: error: job 'backup' already exists; change it with 'cronctl edit backup'\n"
    assert store_bytes(home) == before


def test_add_reports_every_bad_option_once_and_creates_no_store(cli: Cli, home: Path) -> None:
    result = cli("add", "Bad_Name", "--every", "5", "--overlap", "sometimes", "--retries=-1",
                 "--tz", "Mars/Base", "--", "true")
    assert (result.code, result.out) == (1, "")
    assert result.err == lines(
        "cronctl: error: job 'Bad_Name': --name: 'Bad_Name' is not a valid name: use lowercase letters, digits, "
        "'.', '_' or '-', starting with a letter or digit",
        "cronctl: error: job 'Bad_Name': --every: bad duration '5': a bare number is ambiguous; "
        "use a number with a unit, e.g. 500ms, 30s, 5m, 1h30m, 2d",
        "cronctl: error: job 'Bad_Name': --timezone: unknown time zone 'Mars/Base': use an IANA name like "
        "Europe/Berlin or UTC",
        "cronctl: error: job 'Bad_Name': --overlap: 'sometimes' is not one of skip | allow | replace",
        "cronctl: error: job 'Bad_Name': --retries: must be at least 0 and at most 100, got -1",
    )
    assert not (home / "jobs.json").exists()


def test_add_needs_exactly_one_schedule_and_a_command(cli: Cli) -> None:
    result = cli("add", "x")
    assert (result.code, result.err) == (1, lines(
        "cronctl: error: job 'x': -- COMMAND: missing (a shell string or an argv list)",
        "cronctl: error: job 'x': --cron: missing schedule: give exactly one of cron, every, at, after",
    ))
    result = cli("add", "x", "--cron", "0 3 * * *", "--every", "1m", "--", "true")
    assert (result.code, result.err) == (
        1, "cronctl: error: job 'x': --every: give exactly one of cron, every, at (found cron, every)\n")


def test_add_refuses_a_cron_expression_that_never_fires(cli: Cli) -> None:
    result = cli("add", "never", "--cron", "0 0 30 2 *", "--", "true")
    assert (result.code, result.err) == (
        1, "cronctl: error: job 'never': --cron: cron '0 0 30 2 *': never fires: day-of-month 30 does not occur in Feb\n")


def test_an_env_option_without_equals_is_a_usage_error(cli: Cli, home: Path) -> None:
    result = cli("add", "x", "--every", "1m", "--env", "PGHOST", "--", "true")
    assert (result.code, result.out, result.err) == (2, "", "cronctl: error: --env expects NAME=VALUE, got 'PGHOST'\n")


def test_an_unknown_option_is_a_usage_error_with_the_usage_line(cli: Cli) -> None:
    result = cli("add", "x", "--every", "1m", "--colour", "red", "--", "true")
    assert result.code == 2
    assert result.out == ""
    assert "No such option: --colour" in result.err
    assert "Traceback" not in result.err


def test_arguments_that_are_not_utf8_are_refused_before_they_reach_the_store(cli: Cli, home: Path) -> None:
    # Python hands undecodable argv bytes (b"\xff") over as lone surrogates.
    result = cli("add", "s", "--every", "1m", "--", "echo \udcff")
    assert (result.code, result.err) == (
        1, "cronctl: error: job 's': -- COMMAND: is not valid UTF-8 text ('echo \\udcff')\n")
    result = cli("add", "s", "--every", "1m", "--env", "A=\x00", "--", "true")
    assert (result.code, result.err) == (1, "cronctl: error: job 's': --env: contains a NUL character\n")
    assert not (home / "jobs.json").exists()


def test_a_jitter_as_long_as_the_interval_is_refused(cli: Cli) -> None:
    result = cli("add", "j", "--every", "1m", "--jitter", "2m", "--", "true")
    assert (result.code, result.err) == (
        1, "cronctl: error: job 'j': --jitter: must be shorter than the interval (2m >= every 1m)\n")


def test_rich_markup_and_emoji_codes_in_a_command_are_printed_as_written(cli: Cli, clock: FakeClock) -> None:
    assert cli("add", "odd", "--every", "1h", "--", "echo [/x] [bold]b[/bold] :smile:").code == 0
    result = cli("list")
    assert (result.code, result.err) == (0, "")
    assert "echo [/x] [bold]b[/bold] :smile:" in result.out
    assert "command                     echo [/x] [bold]b[/bold] :smile:\n" in cli("show", "odd").out


# --- edit ----------------------------------------------------------------------------


def test_edit_prints_the_changed_fields_and_keeps_next_run_when_the_schedule_stays(
    cli: Cli, home: Path, clock: FakeClock
) -> None:
    cli("add", "backup", "--cron", "0 3 * * *", "--", "true")
    clock.advance(3600)
    result = cli("edit", "backup", "--timeout", "2h", "--retries", "1", "--env", "A=b")
    assert (result.code, result.err) == (0, "")
    assert result.out == "updated backup: env, retries, timeout; next fire 2026-03-02T03:00:00+00:00 (2026-03-02T03:00:00Z)\n"
    entry = store(home)["jobs"]["backup"]
    assert (entry["timeout"], entry["retries"], entry["env"]) == ("2h", 1, {"A": "b"})
    assert entry["state"]["next_run_at"] == "2026-03-02T03:00:00.000+00:00"
    assert entry["state"]["updated_at"] == "2026-03-01T13:00:00.000+00:00"


def test_a_schedule_edit_counts_from_now_and_never_fires_a_missed_slot(
    cli: Cli, home: Path, clock: FakeClock
) -> None:
    cli("add", "hourly", "--cron", "0 * * * *", "--", "true")
    cli("add", "tick", "--every", "1h", "--", "true")
    # The loop was down for 5h30m: both jobs have slots overdue.
    clock.advance(5 * 3600 + 1800)
    assert store(home)["jobs"]["hourly"]["state"]["next_run_at"] == "2026-03-01T13:00:00.000+00:00"
    result = cli("edit", "hourly", "--cron", "15 * * * *")
    assert result.out == "updated hourly: cron; next fire 2026-03-01T18:15:00+00:00 (2026-03-01T18:15:00Z)\n"
    result = cli("edit", "tick", "--every", "30m")
    assert result.out == "updated tick: every; next fire 2026-03-01T18:00:00+00:00 (2026-03-01T18:00:00Z)\n"
    jobs = store(home)["jobs"]
    assert jobs["hourly"]["state"]["next_run_at"] == "2026-03-01T18:15:00.000+00:00"
    assert jobs["tick"]["state"]["next_run_at"] == "2026-03-01T18:00:00.000+00:00"


def test_a_timezone_edit_is_a_schedule_change(cli: Cli, home: Path, clock: FakeClock) -> None:
    cli("add", "backup", "--cron", "0 3 * * *", "--", "true")
    result = cli("edit", "backup", "--tz", "America/New_York")
    assert result.out == ("updated backup: timezone; next fire 2026-03-02T03:00:00-05:00 "
                          "(2026-03-02T08:00:00Z)\n")


def test_switching_the_kind_of_schedule_drops_the_old_one(cli: Cli, home: Path, clock: FakeClock) -> None:
    cli("add", "backup", "--cron", "0 3 * * *", "--", "true")
    result = cli("edit", "backup", "--at", "2026-12-24T09:00:00", "--tz", "Europe/Berlin")
    assert result.out == ("updated backup: at, cron, timezone; next fire 2026-12-24T09:00:00+01:00 "
                          "(2026-12-24T08:00:00Z)\n")
    entry = store(home)["jobs"]["backup"]
    assert (entry["cron"], entry["at"]) == (None, "2026-12-24T08:00:00.000+00:00")


def test_edit_with_nothing_new_writes_nothing(cli: Cli, home: Path, clock: FakeClock) -> None:
    cli("add", "backup", "--every", "1h", "--timeout", "5m", "--", "true")
    before = store_bytes(home)
    result = cli("edit", "backup", "--every", "60m", "--timeout", "300s")
    assert (result.code, result.out, result.err) == (0, "backup: nothing changed\n", "")
    assert store_bytes(home) == before
    assert [row["event"] for row in audit_rows(home)] == ["job.added"]


def test_edit_json_lists_the_changed_fields(cli: Cli, clock: FakeClock) -> None:
    cli("add", "backup", "--every", "1h", "--", "true")
    data = cli("edit", "backup", "--unset", "timeout", "--overlap", "allow", "--json").json()
    assert data["changed"] == ["overlap"]
    assert (data["job"]["overlap"], data["job"]["timeout"]) == ("allow", "1h")


def test_unset_restores_the_default_of_an_optional_field(cli: Cli, home: Path, clock: FakeClock) -> None:
    cli("add", "backup", "--every", "1h", "--timeout", "5m", "--repeat", "3", "--", "true")
    result = cli("edit", "backup", "--unset", "timeout", "--unset", "repeat")
    assert result.out == "updated backup: repeat, timeout; next fire 2026-03-01T13:00:00+00:00 (2026-03-01T13:00:00Z)\n"
    entry = store(home)["jobs"]["backup"]
    assert (entry["timeout"], entry["repeat"]) == ("1h", None)


@pytest.mark.parametrize(("field", "message"), [
    ("colour", "--unset colour: not a job field (one of: timezone, cwd, env, timeout, kill_grace, overlap, "
               "catchup, starting_deadline, retries, retry_delay, repeat, jitter, grace, on_failure, paused, "
                   "requires, user, env_file, limits, keep_runs, keep_log, alert_after, notify)"),
    ("command", "--unset command: a job always has a command; give a new value instead"),
    ("cron", "--unset cron: a job always has a schedule; give a new value instead"),
    ("name", "--unset name: a job always has a name; give a new value instead"),
])
def test_unset_of_a_field_that_cannot_be_unset_is_a_usage_error(
    cli: Cli, home: Path, field: str, message: str
) -> None:
    cli("add", "backup", "--cron", "0 3 * * *", "--", "true")
    before = store_bytes(home)
    result = cli("edit", "backup", "--unset", field)
    assert (result.code, result.out, result.err) == (2, "", f"cronctl: error: {message}\n")
    assert store_bytes(home) == before


def test_edit_of_a_job_from_a_file_warns_that_the_next_apply_wins(
    cli: Cli, home: Path, tmp_path: Path, clock: FakeClock
) -> None:
    path = write_file(tmp_path / "jobs.yaml", "jobs:\n  - {name: nightly, cron: '30 2 * * *', command: 'true'}\n")
    cli("apply", "-f", str(path))
    result = cli("edit", "nightly", "--timeout", "2h")
    assert (result.code, result.out) == (0, "updated nightly: timeout; next fire 2026-03-02T02:30:00+00:00 "
                                            "(2026-03-02T02:30:00Z)\n")
    assert result.err == (f"cronctl: warning: nightly is defined by {path}; "
                          "the next apply of that file overrides this edit\n")


def test_edit_rejects_bad_values_and_changes_nothing(cli: Cli, home: Path) -> None:
    cli("add", "backup", "--every", "1h", "--", "true")
    before = store_bytes(home)
    result = cli("edit", "backup", "--every", "0", "--catchup", "all")
    assert (result.code, result.out) == (1, "")
    assert result.err == lines(
        "cronctl: error: job 'backup': --every: interval must be at least 100ms, got '0'",
        "cronctl: error: job 'backup': --catchup: 'all' is not one of latest | skip",
    )
    assert store_bytes(home) == before


def test_edit_of_an_unknown_job_says_where_to_look(cli: Cli) -> None:
    result = cli("edit", "ghost", "--every", "1m")
    assert (result.code, result.err) == (1, "cronctl: error: no job named 'ghost' (see 'cronctl list')\n")


# --- remove --------------------------------------------------------------------------


def test_remove_deletes_the_job(cli: Cli, home: Path) -> None:
    cli("add", "backup", "--every", "1h", "--", "true")
    result = cli("remove", "backup")
    assert (result.code, result.out, result.err) == (0, "removed backup\n", "")
    assert store(home)["jobs"] == {}


def test_remove_refuses_a_running_job_and_changes_nothing(cli: Cli, home: Path) -> None:
    cli("add", "backup", "--every", "1h", "--", "true")
    fake_claim(home, "backup", "20260301T115900-deadbeef")
    before = store_bytes(home)
    result = cli("remove", "backup")
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "cronctl: error: job 'backup' is running (run 20260301T115900-deadbeef); wait for it, "
        "'cronctl kill backup', or 'cronctl remove backup --force'\n"
    )
    assert store_bytes(home) == before
    assert "job.removed" not in [row["event"] for row in audit_rows(home)]


def test_remove_force_kills_the_running_processes_first(cli: Cli, home: Path) -> None:
    from cronctl.proc.identity import identify

    cli("add", "backup", "--every", "1h", "--kill-grace", "2s", "--", "true")
    run_id = "20260301T115900-cafef00d"
    child = subprocess.Popen(["sleep", "60"], start_new_session=True, env={**os.environ, "CRONCTL_RUN_ID": run_id})
    try:
        fake_claim(home, "backup", run_id)
        from cronctl.paths import Paths
        from cronctl.store.jsonstore import Store

        ident = identify(child.pid)
        assert ident is not None
        with Store(Paths(home)).transaction() as doc:
            doc["jobs"]["backup"]["state"]["claims"][run_id]["child"] = {"pid": child.pid,
                                                                         "start_time": ident.start_time}
        result = cli("remove", "backup", "--force")
        assert (result.code, result.out, result.err) == (0, "removed backup (killed 1 running run(s))\n", "")
        assert child.wait(timeout=5) == -signal.SIGTERM
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert store(home)["jobs"] == {}
    rows = audit_rows(home)
    assert [(r["event"], r.get("reason"), r.get("forced")) for r in rows[-2:]] == [
        ("run.killed", "removed", None), ("job.removed", None, True)]


def test_remove_of_an_unknown_job_is_an_error(cli: Cli) -> None:
    result = cli("remove", "ghost")
    assert (result.code, result.out, result.err) == (1, "", "cronctl: error: no job named 'ghost' (see 'cronctl list')\n")


# --- list and show -------------------------------------------------------------------


def test_list_of_an_empty_home_says_how_to_add_a_job(cli: Cli) -> None:
    result = cli("list")
    assert (result.code, result.out) == (0, "no jobs defined (add one with 'cronctl add' or 'cronctl apply -f FILE')\n")
    assert cli("list", "--json").json() == {"jobs": []}


def test_list_shows_schedule_zone_next_fire_state_and_command(cli: Cli, clock: FakeClock) -> None:
    cli("add", "backup", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--", "pg_dump db | gzip > /tmp/db.gz")
    cli("add", "tick", "--every", "5m", "--", "echo", "hi there")
    cli("add", "held", "--every", "1h", "--paused", "--", "true")
    cli("add", "once", "--at", "2026-12-24T09:00:00+01:00", "--", "true")
    clock.advance(90)
    result = cli("list")
    assert (result.code, result.err) == (0, "")
    assert [line.rstrip() for line in result.out.splitlines()] == [
        "NAME    SCHEDULE                          WHEN                           TZ             NEXT      LAST  STATUS  COMMAND",
        "backup  0 3 * * *                         At 03:00                       Europe/Berlin  in 13h    -     ok      pg_dump db | gzip > /tmp/db.gz",
        "held    every 1h                          Every 1h                       UTC            -         -     paused  true",
        "once    at 2026-12-24T08:00:00.000+00:00  Once, at 2026-12-24 08:00 UTC  UTC            in 297d   -     ok      true",
        "tick    every 5m                          Every 5m                       UTC            in 3m30s  -     ok      echo 'hi there'",
    ]
    data = cli("list", "--json").json()
    assert [job["name"] for job in data["jobs"]] == ["backup", "held", "once", "tick"]
    assert [job["next_fire_at"] for job in data["jobs"]] == [
        "2026-03-02T02:00:00.000+00:00", None, "2026-12-24T08:00:00.000+00:00", "2026-03-01T12:05:00.000+00:00"]
    assert [job["health"]["state"] for job in data["jobs"]] == ["ok", "paused", "ok", "ok"]


def test_list_on_the_system_clock_shows_how_far_away_the_next_fire_is(cli: Cli) -> None:
    cli("add", "hourly", "--every", "1h", "--", "true")
    result = cli("list")
    assert re.fullmatch(r"NAME    SCHEDULE  WHEN      TZ   NEXT +LAST  STATUS  COMMAND *\n"
                        r"hourly  every 1h  Every 1h  UTC  in (59m|1h) +-     ok      true *\n", result.out), result.out


def test_show_prints_every_field_health_and_state(cli: Cli, clock: FakeClock) -> None:
    cli("add", "backup", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--env", "PGHOST=db", "--retries", "2",
        "--on-failure", "notify-send failed", "--", "pg_dump", "my db")
    result = cli("show", "backup")
    assert (result.code, result.err) == (0, "")
    assert result.out == lines(
        "name                        backup",
        "command                     pg_dump 'my db'",
        "cron                        0 3 * * *",
        "in words                    At 03:00",
        "timezone                    Europe/Berlin",
        'env                         {"PGHOST": "db"}',
        "timeout                     1h",
        "kill_grace                  10s",
        "overlap                     skip",
        "catchup                     latest",
        "retries                     2",
        "retry_delay                 1m",
        "jitter                      0s",
        "on_failure                  notify-send failed",
        "paused                      false",
        "next_fire_at                2026-03-02T02:00:00.000+00:00",
        "health                      ok: waiting for its first run",
        "state.claims                -",
        "state.completed             false",
        "state.consecutive_failures  0",
        f"state.created_at            {STAMP}",
        "state.last_duration         -",
        "state.last_exit_code        -",
        "state.last_late             false",
        "state.last_reason           -",
        "state.last_run_at           -",
        "state.last_run_id           -",
        "state.last_slot             -",
        "state.last_status           -",
        "state.next_run_at           2026-03-02T02:00:00.000+00:00",
        "state.paused                false",
        "state.retry                 -",
        "state.runs_started          0",
        f"state.updated_at            {STAMP}",
    )


def test_show_json_is_the_same_job_as_in_list_json(cli: Cli, clock: FakeClock) -> None:
    cli("add", "backup", "--cron", "0 3 * * *", "--", "true")
    assert cli("show", "backup", "--json").json() == cli("list", "--json").json()["jobs"][0]


def test_show_of_an_unknown_job_is_an_error(cli: Cli) -> None:
    result = cli("show", "ghost")
    assert (result.code, result.out, result.err) == (1, "", "cronctl: error: no job named 'ghost' (see 'cronctl list')\n")


# --- next ----------------------------------------------------------------------------


def test_next_across_the_autumn_fold_fires_a_fixed_time_once_in_the_first_fold(cli: Cli) -> None:
    cli("add", "dst", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--", "true")
    result = cli("next", "dst", "-n", "3", "--from", "2026-10-24T00:00:00+02:00")
    assert (result.code, result.err) == (0, "")
    assert result.out == lines(
        "dst (Europe/Berlin) — At 02:30:",
        "  2026-10-24T02:30:00+02:00   2026-10-24T00:30:00Z",
        "  2026-10-25T02:30:00+02:00   2026-10-25T00:30:00Z",
        "  2026-10-26T02:30:00+01:00   2026-10-26T01:30:00Z",
    )


def test_next_across_the_spring_gap_fires_once_at_the_end_of_the_gap(cli: Cli) -> None:
    cli("add", "dst", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--", "true")
    result = cli("next", "dst", "-n", "3", "--from", "2026-03-28T00:00:00+01:00")
    assert result.out == lines(
        "dst (Europe/Berlin) — At 02:30:",
        "  2026-03-28T02:30:00+01:00   2026-03-28T01:30:00Z",
        "  2026-03-29T03:00:00+02:00   2026-03-29T01:00:00Z",
        "  2026-03-30T02:30:00+02:00   2026-03-30T00:30:00Z",
    )


def test_next_of_wildcard_schedules_skips_the_gap_and_fires_in_both_folds(cli: Cli) -> None:
    # Debian's rule: a minute or hour field that begins with `*` follows the clock as it runs.
    cli("add", "half", "--cron", "30 * * * *", "--tz", "Europe/Berlin", "--", "true")
    cli("add", "quarters", "--cron", "*/16 2 * * *", "--tz", "Europe/Berlin", "--", "true")
    spring = cli("next", "half", "-n", "3", "--from", "2026-03-29T01:00:00+01:00", "--json").json()
    assert [fire["local"] for fire in spring["jobs"][0]["fires"]] == [
        "2026-03-29T01:30:00+01:00", "2026-03-29T03:30:00+02:00", "2026-03-29T04:30:00+02:00"]
    autumn = cli("next", "quarters", "-n", "5", "--from", "2026-10-25T01:00:00+02:00", "--json").json()
    assert [fire["local"] for fire in autumn["jobs"][0]["fires"]] == [
        "2026-10-25T02:00:00+02:00", "2026-10-25T02:16:00+02:00", "2026-10-25T02:32:00+02:00",
        "2026-10-25T02:48:00+02:00", "2026-10-25T02:00:00+01:00"]


def test_next_json_gives_each_instant_in_the_jobs_zone_and_in_utc(cli: Cli) -> None:
    cli("add", "dst", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--", "true")
    result = cli("next", "dst", "-n", "2", "--from", "2026-03-29T00:00:00Z", "--json")
    assert result.json() == {"jobs": [{"name": "dst", "timezone": "Europe/Berlin", "paused": False, "fires": [
        {"local": "2026-03-29T03:00:00+02:00", "utc": "2026-03-29T01:00:00.000+00:00"},
        {"local": "2026-03-30T02:30:00+02:00", "utc": "2026-03-30T00:30:00.000+00:00"},
    ]}]}


def test_next_from_an_instant_on_a_slot_never_counts_that_instant(cli: Cli) -> None:
    # cron started at an instant never fires at that instant itself (issue 26)
    cli("add", "daily", "--cron", "@daily", "--", "true")
    result = cli("next", "daily", "-n", "1", "--from", "2026-05-01T00:00:00Z")
    assert result.out == "daily (UTC) — At 00:00:\n  2026-05-02T00:00:00+00:00   2026-05-02T00:00:00Z\n"
    cli("add", "once", "--at", "2027-05-01T00:00:00Z", "--", "true")
    assert cli("next", "once", "--from", "2027-05-01T00:00:00Z").out == "once: no further fires\n"


def test_next_without_from_starts_at_the_stored_next_run_and_adds_jitter(cli: Cli, clock: FakeClock) -> None:
    cli("add", "tick", "--every", "90s", "--jitter", "30s", "--", "true")
    result = cli("next", "tick", "-n", "3")
    assert result.out == lines(
        "tick (UTC) — Every 1m30s:",
        "  2026-03-01T12:01:40.036+00:00   2026-03-01T12:01:40.036Z",
        "  2026-03-01T12:03:10.036+00:00   2026-03-01T12:03:10.036Z",
        "  2026-03-01T12:04:40.036+00:00   2026-03-01T12:04:40.036Z",
    )


def test_next_without_a_name_lists_every_job_and_a_spent_one_shot_has_no_fires(cli: Cli, clock: FakeClock) -> None:
    cli("add", "once", "--at", "2026-12-24T09:00:00", "--tz", "Europe/Berlin", "--", "true")
    cli("add", "weekly", "--cron", "0 9 * * mon", "--tz", "America/New_York", "--", "true")
    result = cli("next", "-n", "2")
    assert result.out == lines(
        "once (Europe/Berlin) — Once, at 2026-12-24 09:00 Europe/Berlin:",
        "  2026-12-24T09:00:00+01:00   2026-12-24T08:00:00Z",
        "weekly (America/New_York) — At 09:00, only on Monday:",
        "  2026-03-02T09:00:00-05:00   2026-03-02T14:00:00Z",
        "  2026-03-09T09:00:00-04:00   2026-03-09T13:00:00Z",
    )
    assert cli("next", "once", "--from", "2027-01-01T00:00:00Z").out == "once: no further fires\n"


def test_next_of_a_paused_job_says_that_none_of_its_instants_fire(cli: Cli, clock: FakeClock) -> None:
    cli("add", "held", "--every", "1h", "--", "true")
    cli("pause", "held")
    result = cli("next", "held", "-n", "1")
    assert result.out == lines(
        "held (UTC, paused: none of these fire until 'cronctl resume held') — Every 1h:",
        "  2026-03-01T13:00:00+00:00   2026-03-01T13:00:00Z",
    )
    assert cli("next", "held", "-n", "1", "--json").json()["jobs"][0]["paused"] is True


def test_next_stops_at_the_end_of_the_calendar_instead_of_failing(cli: Cli) -> None:
    cli("add", "daily", "--cron", "0 3 * * *", "--", "true")
    result = cli("next", "daily", "--from", "9999-12-30T12:00:00Z")
    assert (result.code, result.err) == (0, "")
    assert result.out == "daily (UTC) — At 03:00:\n  9999-12-31T03:00:00+00:00   9999-12-31T03:00:00Z\n"


@pytest.mark.parametrize(("args", "code", "err"), [
    (("--from", "tomorrow"), 1,
     "cronctl: error: 'tomorrow' is not an ISO 8601 instant like 2026-12-24T09:00:00+01:00\n"),
    (("--from", "9999-12-31T23:59:59-01:00"), 1,
     "cronctl: error: '9999-12-31T23:59:59-01:00' is outside the dates cronctl can handle (years 1 to 9999 in UTC)\n"),
])
def test_next_rejects_a_bad_from(cli: Cli, args: tuple[str, ...], code: int, err: str) -> None:
    cli("add", "daily", "--cron", "0 3 * * *", "--", "true")
    result = cli("next", "daily", *args)
    assert (result.code, result.out, result.err) == (code, "", err)


def test_next_count_must_be_positive(cli: Cli) -> None:
    result = cli("next", "-n", "0")
    assert result.code == 2
    assert "Invalid value for '-n'" in result.err


# --- apply ---------------------------------------------------------------------------

FILE_A = """\
defaults: {timezone: Europe/Berlin}
jobs:
  - {name: nightly, cron: "30 2 * * *", command: "backup.sh"}
  - {name: hourly, cron: "0 * * * *", command: ["echo", "hi"]}
  - {name: spare, every: 10m, command: "true"}
"""


def test_apply_creates_the_jobs_of_a_file(cli: Cli, home: Path, tmp_path: Path, clock: FakeClock) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    result = cli("apply", "-f", str(path))
    assert (result.code, result.err) == (0, "")
    assert result.out == lines(
        "+ create nightly",
        "+ create hourly",
        "+ create spare",
        f"{path}: did create 3, update 0, prune 0, unchanged 0",
    )
    jobs = store(home)["jobs"]
    assert {name: job["source"] for name, job in jobs.items()} == {n: str(path) for n in ("nightly", "hourly", "spare")}
    assert jobs["nightly"]["state"]["next_run_at"] == "2026-03-02T01:30:00.000+00:00"
    assert [(r["event"], r["job"], r["schedule"]) for r in audit_rows(home)] == [
        ("job.added", "nightly", "30 2 * * *"), ("job.added", "hourly", "0 * * * *"), ("job.added", "spare", "every 10m")]


def test_applying_the_same_file_again_changes_nothing(cli: Cli, home: Path, tmp_path: Path, clock: FakeClock) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    cli("apply", "-f", str(path))
    before = store_bytes(home)
    clock.advance(600)
    result = cli("apply", "-f", str(path), "--prune")
    assert result.out == f"{path}: did create 0, update 0, prune 0, unchanged 3\n"
    assert store_bytes(home) == before


def test_apply_updates_changed_jobs_keeps_their_run_state_and_prunes_only_its_own(
    cli: Cli, home: Path, tmp_path: Path, clock: FakeClock
) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    other = write_file(tmp_path / "b.yaml", "jobs:\n  - {name: other, every: 5m, command: 'true'}\n")
    cli("apply", "-f", str(path))
    cli("apply", "-f", str(other))
    cli("add", "hand", "--every", "1h", "--", "true")
    from cronctl.paths import Paths
    from cronctl.store.jsonstore import Store

    with Store(Paths(home)).transaction() as doc:  # as if the loop had run it
        doc["jobs"]["nightly"]["state"].update(last_run_at=STAMP, last_status="success", runs_started=4)
    write_file(path, """\
defaults: {timezone: Europe/Berlin}
jobs:
  - {name: nightly, cron: "30 2 * * *", command: "backup.sh", timeout: 2h}
  - {name: hourly, cron: "15 * * * *", command: ["echo", "hi"]}
  - {name: fresh, every: 1m, command: "true"}
""")
    clock.advance(60)
    result = cli("apply", "-f", str(path), "--prune")
    assert (result.code, result.err) == (0, "")
    assert result.out == lines(
        "+ create fresh",
        "~ update nightly (timeout)",
        "~ update hourly (cron)",
        "- prune spare",
        f"{path}: did create 1, update 2, prune 1, unchanged 0",
    )
    jobs = store(home)["jobs"]
    assert sorted(jobs) == ["fresh", "hand", "hourly", "nightly", "other"]
    nightly = jobs["nightly"]["state"]
    assert (nightly["last_run_at"], nightly["last_status"], nightly["runs_started"]) == (STAMP, "success", 4)
    assert nightly["next_run_at"] == "2026-03-02T01:30:00.000+00:00"  # schedule unchanged: not recomputed
    assert jobs["hourly"]["state"]["next_run_at"] == "2026-03-01T12:15:00.000+00:00"  # from now (12:01)
    removed = [row for row in audit_rows(home) if row["event"] == "job.removed"]
    assert [(r["job"], r["by"]) for r in removed] == [("spare", "apply --prune")]


def test_apply_dry_run_prints_the_plan_and_leaves_the_store_byte_identical(
    cli: Cli, home: Path, tmp_path: Path, clock: FakeClock
) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    cli("apply", "-f", str(path))
    cli("add", "hand", "--every", "1h", "--", "true")
    write_file(path, "jobs:\n  - {name: nightly, cron: '45 2 * * *', command: backup.sh, timezone: Europe/Berlin}\n"
                     "  - {name: hand, every: 1h, command: 'true'}\n  - {name: brand-new, every: 1m, command: x}\n")
    before, audit_before = store_bytes(home), (home / "audit.jsonl").read_bytes()
    result = cli("apply", "-f", str(path), "--prune", "--dry-run")
    assert (result.code, result.err) == (0, "")
    assert result.out == lines(
        "+ create brand-new",
        "~ update nightly (cron)",
        "~ adopt hand (added by hand, now defined by this file)",
        "- prune hourly",
        "- prune spare",
        f"{path}: would create 1, update 2, prune 2, unchanged 0",
    )
    assert cli("apply", "-f", str(path), "--prune", "--dry-run", "--json").json() == {
        "file": str(path), "create": ["brand-new"], "update": {"nightly": ["cron"]}, "adopt": ["hand"],
        "unchanged": [], "prune": ["hourly", "spare"], "applied": False,
    }
    assert store_bytes(home) == before
    assert (home / "audit.jsonl").read_bytes() == audit_before


def test_prune_never_removes_hand_added_jobs_or_jobs_of_another_file(
    cli: Cli, home: Path, tmp_path: Path, clock: FakeClock
) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    other = write_file(tmp_path / "b.yaml", "jobs:\n  - {name: other, every: 5m, command: 'true'}\n")
    cli("apply", "-f", str(path))
    cli("apply", "-f", str(other))
    cli("add", "hand", "--every", "1h", "--", "true")
    write_file(path, "jobs: []\n")
    result = cli("apply", "-f", str(path), "--prune")
    assert result.out == lines("- prune hourly", "- prune nightly", "- prune spare",
                               f"{path}: did create 0, update 0, prune 3, unchanged 0")
    assert sorted(store(home)["jobs"]) == ["hand", "other"]


def test_the_same_file_by_another_spelling_of_its_path_is_the_same_source(
    cli: Cli, home: Path, tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    (tmp_path / "sub").mkdir()
    cli("apply", "-f", str(path))
    monkeypatch.chdir(tmp_path / "sub")
    result = cli("apply", "-f", "../sub/../a.yaml", "--prune")
    assert (result.code, result.err) == (0, "")
    assert result.out == f"{path}: did create 0, update 0, prune 0, unchanged 3\n"


def test_apply_without_prune_keeps_jobs_the_file_no_longer_has(
    cli: Cli, home: Path, tmp_path: Path, clock: FakeClock
) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    cli("apply", "-f", str(path))
    write_file(path, "jobs: []\n")
    assert cli("apply", "-f", str(path)).out == f"{path}: did create 0, update 0, prune 0, unchanged 0\n"
    assert sorted(store(home)["jobs"]) == ["hourly", "nightly", "spare"]


def test_a_job_of_another_file_is_a_conflict_and_nothing_changes(
    cli: Cli, home: Path, tmp_path: Path, clock: FakeClock
) -> None:
    first = write_file(tmp_path / "a.yaml", FILE_A)
    second = write_file(tmp_path / "b.yaml", "jobs:\n  - {name: spare, every: 5m, command: 'true'}\n"
                                              "  - {name: extra, every: 5m, command: 'true'}\n")
    cli("apply", "-f", str(first))
    before = store_bytes(home)
    result = cli("apply", "-f", str(second))
    assert (result.code, result.out) == (1, "")
    assert result.err == (f"cronctl: error: {second}: job 'spare': field 'name': already defined by {first}; "
                          "rename it here or remove it there\n")
    assert store_bytes(home) == before


def test_apply_of_a_bad_file_reports_every_problem_and_changes_nothing(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    cli("add", "hand", "--every", "1h", "--", "true")
    before = store_bytes(home)
    path = write_file(tmp_path / "bad.yaml", BAD_FILE)
    result = cli("apply", "-f", str(path), "--prune")
    assert (result.code, result.out) == (1, "")
    assert result.err == bad_file_errors(path)
    assert store_bytes(home) == before


def test_apply_refuses_to_prune_a_running_job(cli: Cli, home: Path, tmp_path: Path) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    cli("apply", "-f", str(path))
    fake_claim(home, "spare")
    before = store_bytes(home)
    write_file(path, "jobs: []\n")
    result = cli("apply", "-f", str(path), "--prune")
    assert (result.code, result.err) == (
        1, "cronctl: error: cannot prune running job(s) spare; wait for them or kill them first\n")
    assert store_bytes(home) == before


# --- validate ------------------------------------------------------------------------

BAD_FILE = """\
defaults:
  timeout: 5
jobs:
  - name: backup
    cron: "0 3 * * *"
    command: "true"
    timout: 5m
  - name: Bad
    every: 5x
    command: ""
  - name: backup
    every: 1m
    command: "true"
    timezone: Mars/Base
"""


def bad_file_errors(path: Path) -> str:
    return lines(
        f"cronctl: error: {path}:2: defaults: field 'timeout': bad duration 5: a bare number is "
        "ambiguous; use a number with a unit, e.g. 500ms, 30s, 5m, 1h30m, 2d",
        f"cronctl: error: {path}:7: job 'backup': field 'timout': unknown field (did you mean 'timeout'?)",
        f"cronctl: error: {path}:8: job 'Bad': field 'name': 'Bad' is not a valid name: use lowercase letters, "
        "digits, '.', '_' or '-', starting with a letter or digit",
        f"cronctl: error: {path}:9: job 'Bad': field 'every': bad duration '5x': use a number with "
        "a unit, e.g. 500ms, 30s, 5m, 1h30m, 2d",
        f"cronctl: error: {path}:10: job 'Bad': field 'command': is empty",
        f"cronctl: error: {path}:14: job 'backup': field 'timezone': unknown time zone 'Mars/Base': use an IANA "
        "name like Europe/Berlin or UTC",
    )


def test_validate_of_a_good_file_names_its_jobs(cli: Cli, home: Path, tmp_path: Path) -> None:
    path = write_file(tmp_path / "a.yaml", FILE_A)
    result = cli("validate", "-f", str(path))
    assert (result.code, result.out, result.err) == (0, f"{path}: 3 job(s) valid: nightly, hourly, spare\n", "")
    assert cli("validate", "-f", str(path), "--json").json() == {
        "file": str(path), "valid": True, "jobs": ["nightly", "hourly", "spare"]}
    assert not (home / "jobs.json").exists()


def test_validate_of_a_file_without_jobs_says_so(cli: Cli, tmp_path: Path) -> None:
    path = write_file(tmp_path / "empty.yaml", "jobs: []\n")
    assert cli("validate", "-f", str(path)).out == f"{path}: 0 job(s) valid (the file defines no jobs)\n"


def test_validate_reports_one_message_per_problem_on_stderr(cli: Cli, home: Path, tmp_path: Path) -> None:
    path = write_file(tmp_path / "bad.yaml", BAD_FILE)
    result = cli("validate", "-f", str(path))
    assert (result.code, result.out) == (1, "")
    assert result.err == bad_file_errors(path)


@pytest.mark.parametrize(("text", "problem"), [
    ("jobs: [\n", "{path}:2: invalid YAML: expected the node content, but found '<stream end>'"),
    ("- a\n- b\n", "{path}: expected a mapping with a 'jobs' list at the top level"),
    ("jobs:\n  - {? [a, b] : 1}\n", "{path}:2: invalid YAML: a list cannot be a mapping key"),
    ("jobs:\n  - {name: a, every: 1m, command: x}\n  - {name: a, every: 2m, command: y}\n",
     "{path}:3: job 'a': field 'name': duplicate name (first defined at line 2)"),
    ("jobs:\n  - {name: off, every: 1m, command: x}\n",
     "{path}:2: jobs[1]: field 'name': False is not a valid name: YAML reads an unquoted off, no, yes or on "
     "as a boolean; quote it"),
    ('jobs:\n  - {name: a, at: "9999-12-31T23:59:59-01:00", command: x}\n',
     "{path}:2: job 'a': field 'at': 9999-12-31T23:59:59-01:00 is outside the dates cronctl can handle "
     "(years 1 to 9999 in UTC)"),
    ('jobs:\n  - {name: a, every: 1m, command: "\\udcff"}\n',
     "{path}:2: job 'a': field 'command': is not valid UTF-8 text ('\\udcff')"),
])
def test_validate_names_the_file_and_line_of_structural_problems(
    cli: Cli, tmp_path: Path, text: str, problem: str
) -> None:
    path = write_file(tmp_path / "bad.yaml", text)
    result = cli("validate", "-f", str(path))
    assert (result.code, result.out, result.err) == (1, "", "cronctl: error: " + problem.format(path=path) + "\n")


def test_validate_of_a_missing_file_is_an_error(cli: Cli, tmp_path: Path) -> None:
    result = cli("validate", "-f", str(tmp_path / "nope.yaml"))
    assert (result.code, result.err) == (1, f"cronctl: error: {tmp_path / 'nope.yaml'}: no such file\n")


def test_validate_and_apply_need_a_file(cli: Cli) -> None:
    for command in ("validate", "apply"):
        result = cli(command)
        assert result.code == 2
        assert "Missing option '-f'" in result.err


# --- pause and resume ----------------------------------------------------------------


def test_pause_and_resume_say_what_they_did(cli: Cli, home: Path, clock: FakeClock) -> None:
    cli("add", "tick", "--every", "1h", "--", "true")
    assert cli("pause", "tick").out == "paused tick\n"
    assert store(home)["jobs"]["tick"]["state"]["paused"] is True
    before = store_bytes(home)
    assert cli("pause", "tick").out == "tick was already paused\n"
    assert store_bytes(home) == before
    assert cli("list", "--json").json()["jobs"][0]["next_fire_at"] is None
    clock.advance(7200)
    result = cli("resume", "tick")
    assert (result.code, result.err) == (0, "")
    assert result.out == "resumed tick (cleared paused); next fire 2026-03-01T15:00:00+00:00 (2026-03-01T15:00:00Z)\n"
    state = store(home)["jobs"]["tick"]["state"]
    assert (state["paused"], state["next_run_at"]) == (False, "2026-03-01T15:00:00.000+00:00")


def test_resume_all_re_arms_every_job_from_now(cli: Cli, clock: FakeClock) -> None:
    cli("add", "a", "--every", "1h", "--paused", "--", "true")
    cli("add", "b", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--", "true")
    cli("pause", "b")
    result = cli("resume", "--all")
    assert result.out == lines(
        "resumed a (cleared paused); next fire 2026-03-01T13:00:00+00:00 (2026-03-01T13:00:00Z)",
        "resumed b (cleared paused); next fire 2026-03-02T03:00:00+01:00 (2026-03-02T02:00:00Z)",
    )
    assert cli("resume", "--all", "--json").json() == {"jobs": [
        {"name": "a", "next_run_at": "2026-03-01T13:00:00.000+00:00", "cleared": [], "still_paused_by": None,
         "next_fire_at": "2026-03-01T13:00:00.000+00:00", "timezone": "UTC"},
        {"name": "b", "next_run_at": "2026-03-02T02:00:00.000+00:00", "cleared": [], "still_paused_by": None,
         "next_fire_at": "2026-03-02T02:00:00.000+00:00", "timezone": "Europe/Berlin"},
    ], "released_runs": []}


def test_resume_of_a_job_paused_by_its_file_warns_that_it_stays_paused(
    cli: Cli, tmp_path: Path, clock: FakeClock
) -> None:
    path = write_file(tmp_path / "a.yaml", "jobs:\n  - {name: held, every: 1h, command: x, paused: true}\n")
    cli("apply", "-f", str(path))
    result = cli("resume", "held")
    assert (result.code, result.out) == (0, "resumed held; next fire -\n")
    assert result.err == f"cronctl: warning: held stays paused: its file {path} says paused: true\n"


@pytest.mark.parametrize("args", [(), ("tick", "--all")])
def test_resume_needs_a_name_or_all_but_not_both(cli: Cli, args: tuple[str, ...]) -> None:
    cli("add", "tick", "--every", "1h", "--", "true")
    result = cli("resume", *args)
    assert (result.code, result.out, result.err) == (2, "", "cronctl: error: give a job name or --all\n")


def test_pause_of_an_unknown_job_is_an_error(cli: Cli) -> None:
    for command in ("pause", "resume"):
        result = cli(command, "ghost")
        assert (result.code, result.err) == (1, "cronctl: error: no job named 'ghost' (see 'cronctl list')\n")


# --- audit ---------------------------------------------------------------------------


def test_every_definition_command_writes_its_audit_row(cli: Cli, home: Path, tmp_path: Path, clock: FakeClock) -> None:
    path = write_file(tmp_path / "a.yaml", "jobs:\n  - {name: filed, every: 1h, command: x}\n")
    cli("add", "tick", "--every", "1h", "--", "true")
    clock.advance(1)
    cli("edit", "tick", "--timeout", "5m")
    clock.advance(1)
    cli("pause", "tick")
    clock.advance(1)
    cli("resume", "tick")
    clock.advance(1)
    cli("apply", "-f", str(path))
    clock.advance(1)
    cli("remove", "tick")
    result = cli("audit", "--json")
    assert (result.code, result.err) == (0, "")
    assert result.json() == {"rows": [
        {"ts": "2026-03-01T12:00:00.000+00:00", "event": "job.added", "job": "tick", "schedule": "every 1h"},
        {"ts": "2026-03-01T12:00:01.000+00:00", "event": "job.updated", "job": "tick", "fields": ["timeout"],
         "by": "edit"},
        {"ts": "2026-03-01T12:00:02.000+00:00", "event": "job.paused", "job": "tick"},
        {"ts": "2026-03-01T12:00:03.000+00:00", "event": "job.resumed", "job": "tick", "cleared": ["paused"],
         "next_run_at": "2026-03-01T13:00:03.000+00:00"},
        {"ts": "2026-03-01T12:00:04.000+00:00", "event": "job.added", "job": "filed", "source": str(path),
         "schedule": "every 1h"},
        {"ts": "2026-03-01T12:00:05.000+00:00", "event": "job.removed", "job": "tick"},
    ]}
    assert cli("audit", "--job", "tick", "--event", "job.paused").out == (
        "2026-03-01T12:00:02.000+00:00 job.paused job=tick\n")


AUDIT_LOG = [
    {"ts": "2026-03-01T09:00:00.000+00:00", "event": "job.added", "job": "a", "schedule": "every 1h"},
    {"ts": "2026-03-01T10:00:00.000+00:00", "event": "run.claimed", "job": "a", "run_id": "r1",
     "slot": "2026-03-01T10:00:00.000+00:00"},
    {"ts": "2026-03-01T10:00:01.000+00:00", "event": "run.finished", "job": "a", "run_id": "r1",
     "status": "success"},
    {"ts": "2026-03-01T11:00:00.000+00:00", "event": "job.added", "job": "b", "schedule": "0 3 * * *"},
    {"ts": "2026-03-01T11:30:00.000+00:00", "event": "run.claimed", "job": "b", "run_id": "r2",
     "slot": "2026-03-01T11:30:00.000+00:00"},
]


@pytest.fixture
def audit_log(home: Path) -> Path:
    home.mkdir(mode=0o700)
    path = home / "audit.jsonl"
    text = "".join(json.dumps(row) + "\n" for row in AUDIT_LOG)
    path.write_text(text + '{"ts": "2026-03-01T11:59:00.000+00:00", "event": "run.fin')  # torn last line
    return path


@pytest.mark.parametrize(("args", "expected"), [
    ((), [0, 1, 2, 3, 4]),
    (("--job", "a"), [0, 1, 2]),
    (("--event", "job.added"), [0, 3]),
    (("--event", "run.*"), [1, 2, 4]),
    (("--event", "run."), [1, 2, 4]),
    (("--event", "run"), [1, 2, 4]),  # a bare group matches its events (issue 26)
    (("--since", "2026-03-01T10:00:01Z"), [2, 3, 4]),
    (("--since", "1h"), [3, 4]),
    (("--since", "2026-03-01T11:00:00+01:00"), [1, 2, 3, 4]),
    (("-n", "2"), [3, 4]),
    (("-n", "0"), []),
    (("--job", "a", "--event", "run.*", "-n", "1"), [2]),
])
def test_audit_filters_by_job_event_time_and_count(
    cli: Cli, audit_log: Path, clock: FakeClock, args: tuple[str, ...], expected: list[int]
) -> None:
    result = cli("audit", *args, "--json")
    assert (result.code, result.err) == (0, "")
    assert result.json() == {"rows": [AUDIT_LOG[i] for i in expected]}


def test_audit_prints_one_line_per_row_with_its_details(cli: Cli, audit_log: Path) -> None:
    result = cli("audit", "--job", "a")
    assert (result.code, result.err) == (0, "")
    assert result.out == lines(
        '2026-03-01T09:00:00.000+00:00 job.added job=a schedule="every 1h"',
        '2026-03-01T10:00:00.000+00:00 run.claimed job=a run=r1 slot="2026-03-01T10:00:00.000+00:00"',
        '2026-03-01T10:00:01.000+00:00 run.finished job=a run=r1 status="success"',
    )


def test_audit_since_must_be_an_instant_or_a_duration(cli: Cli, audit_log: Path) -> None:
    result = cli("audit", "--since", "yesterday")
    assert (result.code, result.out) == (1, "")
    assert result.err == ("cronctl: error: --since 'yesterday': expected an ISO 8601 instant like "
                          "2026-12-24T09:00:00+01:00 or a duration ago like 30m, 1h, 2d\n")


# --- a store that does not parse -----------------------------------------------------

STORE_COMMANDS = [
    ("list",), ("list", "--json"), ("show", "backup"), ("add", "x", "--every", "1m", "--", "true"),
    ("edit", "backup", "--every", "2m"), ("remove", "backup"), ("remove", "backup", "--force"),
    ("apply", "-f", "{file}"), ("apply", "-f", "{file}", "--dry-run"), ("pause", "backup"),
    ("resume", "backup"), ("resume", "--all"), ("next",), ("next", "backup"), ("status",), ("status", "--stale"),
    ("history",), ("history", "backup"), ("force-run", "backup"), ("kill", "backup"), ("logs", "backup"),
]


@pytest.mark.parametrize("garbage", [b"garbage{", b"", b'{"version": 1, "jobs": []}', b"\xff\xfe"],
                         ids=["text", "empty", "wrong-shape", "not-utf8"])
@pytest.mark.parametrize("args", STORE_COMMANDS, ids=lambda a: " ".join(a))
def test_every_command_that_needs_a_corrupt_store_exits_1_naming_it_and_leaves_it_alone(
    cli: Cli, home: Path, tmp_path: Path, args: tuple[str, ...], garbage: bytes
) -> None:
    path = write_file(tmp_path / "a.yaml", "jobs:\n  - {name: backup, every: 1h, command: 'true'}\n")
    home.mkdir(mode=0o700)
    (home / "jobs.json").write_bytes(garbage)
    result = cli(*(arg.format(file=path) for arg in args))
    assert result.code == 1, result
    assert result.out == ""
    assert result.err.startswith("cronctl: error: ")
    assert str(home / "jobs.json") in result.err
    assert "Traceback" not in result.err and "internal error" not in result.err
    assert result.err.count("\n") == 1
    assert (home / "jobs.json").read_bytes() == garbage
    assert not (home / "jobs.json.bak").exists()


def test_a_corrupt_store_error_says_how_to_recover(cli: Cli, home: Path) -> None:
    home.mkdir(mode=0o700)
    (home / "jobs.json").write_text("garbage{")
    result = cli("list")
    assert result.err == (
        f"cronctl: error: cannot parse store {home}/jobs.json: Expecting value at line 1 column 1; nothing was "
        f"changed. There is no backup to restore: fix the file by hand ('cronctl doctor' explains)\n"
    )


# --- the home directory --------------------------------------------------------------


def test_the_home_is_created_private_on_first_use(cli: Cli, home: Path) -> None:
    assert cli("list").code == 0
    assert (home.stat().st_mode & 0o777) == 0o700


@pytest.mark.parametrize("mode", [0o770, 0o720, 0o707, 0o702, 0o777])
def test_a_home_others_can_write_is_refused_with_the_chmod_that_fixes_it(cli: Cli, home: Path, mode: int) -> None:
    home.mkdir()
    home.chmod(mode)
    for args in (("list",), ("add", "x", "--every", "1m", "--", "true"), ("audit",)):
        result = cli(*args)
        assert (result.code, result.out) == (1, "")
        assert result.err == (f"cronctl: error: cronctl home {home} is writable by group or others "
                              f"(mode {mode:04o}); fix it with: chmod 700 {home}\n")
    assert os.listdir(home) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a directory to another user")
def test_a_home_owned_by_another_user_is_refused(cli: Cli, home: Path) -> None:
    home.mkdir(mode=0o700)
    os.chown(home, 12345, -1)
    result = cli("list")
    assert (result.code, result.out) == (1, "")
    assert result.err == (f"cronctl: error: cronctl home {home} is owned by uid 12345, not by you (uid 0); "
                          f"use your own directory with --home or fix it with: chown 0 {home}\n")


def test_home_option_wins_over_the_environment(cli: Cli, home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    assert cli("--home", str(other), "add", "x", "--every", "1m", "--", "true").code == 0
    assert "x" in json.loads((other / "jobs.json").read_text())["jobs"]
    assert not home.exists()


def test_relative_times_are_written_the_way_an_operator_reads_them() -> None:
    from cronctl.cli.render import relative

    base = NOW
    cases = {0.2: "now", 59: "in 59s", 90: "in 1m30s", 3600: "in 1h", 5400: "in 1h30m", 36000: "in 10h",
             86400 * 3 + 3600 * 5: "in 3d5h", -125: "2m5s ago", -86400 * 12: "12d ago"}
    for seconds, text in cases.items():
        assert relative(base + timedelta(seconds=seconds), base) == text, seconds


def test_list_with_a_name_prefix_shows_only_the_jobs_whose_name_starts_with_it(cli: Cli, clock: FakeClock) -> None:
    for name in ("backup-db", "backup-home", "backup_x", "report", "back"):
        cli("add", name, "--every", "1h", "--", "true")
    data = cli("list", "backup-", "--json").json()
    assert [job["name"] for job in data["jobs"]] == ["backup-db", "backup-home"]
    # the prefix is plain text: `_` and `.` match only themselves (PostgreSQL's LIKE must not see wildcards)
    assert [job["name"] for job in cli("list", "backup_", "--json").json()["jobs"]] == ["backup_x"]
    assert [job["name"] for job in cli("list", "back", "--json").json()["jobs"]] == [
        "back", "backup-db", "backup-home", "backup_x"]
    result = cli("list", "backup-h")
    assert (result.code, [line.split()[0] for line in result.out.splitlines()]) == (0, ["NAME", "backup-home"])
    assert cli("list", "nothing").out == "no job name starts with 'nothing' (see 'cronctl list')\n"
    assert cli("list", "nothing", "--json").json() == {"jobs": []}
    assert [job["name"] for job in cli("list", "", "--json").json()["jobs"]] == [
        "back", "backup-db", "backup-home", "backup_x", "report"]
