"""Issue 15, items 8 and 11: the smaller things a first use runs into.

Each test here failed before its fix. Most drive the CLI in-process through its real entry
point (the `cli` fixture); the kill test runs a real process, because only a real kill
shows what a file looks like when a write is cut short.
"""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.models import RunStatus
from cronctl.ops import definitions as ops
from cronctl.store import claims
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.timefmt import from_iso
from tests.conftest import subprocess_env

Cli = Callable[..., Any]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
OWNER = Owner("gen-a", 1001, 111.0, "boot-1")

CRONTAB = "0 3 * * * /usr/bin/backup --all\n*/5 * * * * /usr/bin/poll\n"
OLD_JOBS = "jobs:\n  - {name: old, every: 1h, command: 'true'}\n"


# --- item 8: import-crontab -o writes atomically ------------------------------------------


# Python ignores SIGXFSZ (a write past the limit fails with EFBIG instead); this entry
# restores the default action, so the write past the limit kills the process outright.
KILLED_BY_SIGXFSZ = ("import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
                     "from cronctl.entry import main; main()")


def _limit_file_size() -> None:
    # A write past RLIMIT_FSIZE is answered with SIGXFSZ, whose default action kills the
    # process: a real kill at the first write of more than 16 bytes to a regular file.
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))


def test_a_kill_at_the_first_write_leaves_the_output_of_import_crontab_as_it_was(tmp_path: Path) -> None:
    crontab, out = tmp_path / "crontab", tmp_path / "jobs.yaml"
    crontab.write_text(CRONTAB)
    out.write_text(OLD_JOBS)
    env = {**subprocess_env(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", KILLED_BY_SIGXFSZ, "import-crontab", str(crontab), "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=60, preexec_fn=_limit_file_size)
    assert done.returncode == -signal.SIGXFSZ, done.stderr  # killed mid-write, as intended
    assert out.read_text() == OLD_JOBS


def test_a_write_cut_short_leaves_the_output_as_it_was_and_says_why(tmp_path: Path) -> None:
    crontab, out = tmp_path / "crontab", tmp_path / "jobs.yaml"
    crontab.write_text(CRONTAB)
    out.write_text(OLD_JOBS)
    env = {**subprocess_env(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "cronctl", "import-crontab", str(crontab), "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=60, preexec_fn=_limit_file_size)
    assert (done.returncode, done.stderr) == (1, f"cronctl: error: {out}: cannot write: File too large\n")
    assert out.read_text() == OLD_JOBS
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_import_crontab_replaces_the_output_whole_and_keeps_its_mode(cli: Cli, tmp_path: Path) -> None:
    crontab, out = tmp_path / "crontab", tmp_path / "jobs.yaml"
    crontab.write_text(CRONTAB)
    out.write_text(OLD_JOBS)
    out.chmod(0o640)
    result = cli("import-crontab", str(crontab), "-o", str(out), "--tz", "UTC")
    assert result.code == 0, result.err
    assert "/usr/bin/backup --all" in out.read_text() and "old" not in out.read_text()
    assert out.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_import_crontab_into_a_file_it_cannot_write_says_so(cli: Cli, tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(CRONTAB)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = cli("import-crontab", str(crontab), "-o", str(blocker / "jobs.yaml"), "--tz", "UTC")
    assert result.code == 1
    assert result.err.startswith(f"cronctl: error: {blocker / 'jobs.yaml'}: cannot write: ")
    assert "internal error" not in result.err


# --- metrics -o into a missing directory ------------------------------------------------------


def test_metrics_into_a_missing_directory_is_a_clear_error(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "cronctl.prom"
    result = cli("metrics", "-o", str(target))
    assert (result.code, result.out) == (1, "")
    assert result.err == f"cronctl: error: metrics -o {target}: cannot write: No such file or directory\n"
    assert not target.parent.exists()


def test_metrics_output_is_written_whole_and_readable(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "cronctl.prom"
    assert cli("metrics", "-o", str(target)).code == 0
    assert "cronctl_loop_state" in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# --- the lateness of a retry is measured from the retry's due time --------------------------


def test_a_retry_is_late_from_its_own_due_time_not_from_its_slot(tmp_path: Path) -> None:
    ctx = Context.open(tmp_path / "home", clock=FakeClock(T0))
    ops.add_job(ctx, ops.spec_from_options("a", {"command": "false", "every": "1h", "retries": 1,
                                                 "retry_delay": "20m"}))
    first = _claim_and_start(ctx, T0 + timedelta(hours=1))  # on time: lateness 0
    with ctx.store.transaction() as doc:
        claims.finish(doc, "a", first, OWNER, Outcome(RunStatus.ERROR, "exit_code_nonzero", exit_code=1,
                                                       duration=1.0), T0 + timedelta(hours=1, seconds=1))
    due = from_iso(ctx.store.read()["jobs"]["a"]["state"]["retry"]["due_at"])
    assert due is not None and due >= T0 + timedelta(hours=1, minutes=20)
    _claim_and_start(ctx, due + timedelta(seconds=0.5))  # the retry, half a second after its due time
    histogram = ctx.store.read()["metrics"]["fire_lateness_seconds"]
    assert (histogram["count"], histogram["sum"]) == (2, 0.5)


def _claim_and_start(ctx: Context, now: datetime) -> str:
    with ctx.store.transaction() as doc:
        batch = claims.claim_due(doc, now, OWNER, Lease(10_000.0, now + timedelta(seconds=60)))
        [claim] = batch.claims
        claims.mark_dispatched(doc, OWNER, [Dispatched(claim.job, claim.run_id, 40_000, 1.0, 5_000.0)], now)
    return claim.run_id


# --- a run that a signal ended is said so, never "exited with code None" -----------------------


def _run_killed_by(home: Path, signal_number: int) -> None:
    """Job `a` ran a moment ago and was ended by `signal_number`, as the loop records it.
    (`status` reads the real clock: the run is placed now, so the job is not late.)"""
    defined = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
    ctx = Context.open(home, clock=FakeClock(defined))
    ops.add_job(ctx, ops.spec_from_options("a", {"command": "sleep 60", "every": "1h"}))
    run_id = _claim_and_start(ctx, defined + timedelta(hours=1))
    with ctx.store.transaction() as doc:
        claims.finish(doc, "a", run_id, OWNER, Outcome(RunStatus.ERROR, "killed_by_signal", signal=signal_number,
                                                       duration=2.0), defined + timedelta(hours=1, seconds=2))


def test_status_says_which_signal_killed_the_last_run(cli: Cli, home: Path) -> None:
    _run_killed_by(home, signal.SIGKILL)
    result = cli("status", "--json")
    [job] = result.json()["jobs"]
    assert job["state"] == "failing"
    assert job["reason"].startswith("the job was killed by signal 9 (SIGKILL)")
    assert "None" not in cli("show", "a").out


def test_an_unnamed_signal_is_said_by_its_number() -> None:
    from cronctl.jobs.words import signal_text

    assert signal_text(15) == "killed by signal 15 (SIGTERM)"
    assert signal_text(200) == "killed by signal 200"


def test_history_and_the_loop_line_name_the_signal(capsys: pytest.CaptureFixture[str]) -> None:
    from cronctl.cli import render

    record = {"job": "a", "run_id": "r1", "slot": "2026-03-01T13:00:00.000+00:00", "trigger": "schedule",
              "started_at": "2026-03-01T13:00:00.000+00:00", "duration": 2.0, "status": "error",
              "exit_code": None, "signal": 9, "reason": "killed_by_signal"}
    render.history_table([record])
    assert capsys.readouterr().out.splitlines()[1].endswith("  error   killed by signal 9 (SIGKILL)")
    row = {"ts": "2026-03-01T13:00:02.000+00:00", "event": "run.finished", "job": "a", "status": "error",
           "exit_code": None, "signal": 9, "reason": "killed_by_signal", "duration_s": 2.0}
    assert render.loop_line(row) == "13:00:02 a                finished  error in 2.00s — killed by signal 9 (SIGKILL)"


# --- list fits the terminal --------------------------------------------------------------------

LONG_COMMAND = "/usr/local/bin/backup --source /var/lib/postgresql --target s3://bucket/nightly --verbose"


def _three_jobs(cli: Cli) -> None:
    cli("add", "backup", "--cron", "30 2 * * 1-5", "--tz", "Europe/Berlin", "--", LONG_COMMAND)
    cli("add", "poll", "--every", "5m", "--", "curl -fsS https://example.com/health")
    cli("add", "wide-名前", "--cron", "0 */4 * * *", "--", "echo 日本語のコマンド " * 8)


def test_list_fits_the_terminal_dropping_columns_first_then_cutting_the_command(
        cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.cells import cell_len

    _three_jobs(cli)
    monkeypatch.setenv("COLUMNS", "80")
    lines = cli("list").out.splitlines()
    assert all(cell_len(line) <= 80 for line in lines), lines
    assert lines[0].split() == ["NAME", "NEXT", "STATUS", "COMMAND"]  # WHEN, TZ, LAST, SCHEDULE went first
    backup = next(line for line in lines if line.startswith("backup"))
    assert backup.endswith("…") and LONG_COMMAND[:20] in backup


def test_list_drops_only_the_columns_it_must(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("add", "backup", "--cron", "30 2 * * 1-5", "--tz", "Europe/Berlin", "--", LONG_COMMAND)
    monkeypatch.setenv("COLUMNS", "160")  # whole rows take about 183 cells; without WHEN, about 150
    lines = cli("list").out.splitlines()
    assert lines[0].split() == ["NAME", "SCHEDULE", "TZ", "NEXT", "LAST", "STATUS", "COMMAND"]
    assert lines[1].endswith(LONG_COMMAND) and all(len(line) <= 160 for line in lines)


def test_list_on_a_wide_terminal_and_on_a_pipe_shows_whole_rows(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _three_jobs(cli)
    monkeypatch.setenv("COLUMNS", "400")
    wide = cli("list").out
    monkeypatch.delenv("COLUMNS")
    piped = cli("list").out
    assert wide == piped
    assert piped.splitlines()[0].split() == ["NAME", "SCHEDULE", "WHEN", "TZ", "NEXT", "LAST", "STATUS", "COMMAND"]
    assert any(line.endswith(LONG_COMMAND) for line in piped.splitlines())
    assert "…" not in piped


# --- history -n 0 ---------------------------------------------------------------------------------


def test_history_n_0_prints_no_rows_and_does_not_claim_there_are_none(cli: Cli, home: Path) -> None:
    from cronctl.store.history import append_record

    cli("add", "a", "--every", "1h", "--", "true")
    append_record(Context.open(home).paths, {
        "job": "a", "run_id": "r1", "slot": "2026-03-01T13:00:00.000+00:00", "trigger": "schedule",
        "started_at": "2026-03-01T13:00:00.000+00:00", "ended_at": "2026-03-01T13:00:01.000+00:00",
        "duration": 1.0, "status": "success", "exit_code": 0, "signal": None, "reason": None})
    assert "r1" in cli("history", "-n", "1").out
    assert cli("history", "-n", "0").out == ""
    assert cli("history", "a", "-n", "0", "--json").json() == {"runs": []}


# --- a bad time is bad input (exit 1) wherever it is given --------------------------------------


@pytest.mark.parametrize("args", [("next", "--from", "tomorrow"), ("audit", "--since", "tomorrow"),
                                  ("audit", "--since", "2026-13-01T00:00:00")])
def test_a_time_that_does_not_parse_exits_1_in_every_command(cli: Cli, args: tuple[str, ...]) -> None:
    result = cli(*args)
    assert (result.code, result.out) == (1, "")
    assert result.err.startswith("cronctl: error: ") and repr(args[-1]) in result.err


# --- resume of a job that is not paused keeps its schedule ---------------------------------------


def test_resume_of_a_job_that_is_not_paused_keeps_its_next_slot(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    ctx = Context.open(tmp_path / "home", clock=clock)
    ops.add_job(ctx, ops.spec_from_options("a", {"command": "true", "every": "1h"}))
    before = ctx.store.read()["jobs"]["a"]["state"]["next_run_at"]
    clock.advance(1234.5)
    [result] = ops.resume_jobs(ctx, ["a"])
    assert (result.cleared, result.next_run_at) == ([], before)
    assert ctx.store.read()["jobs"]["a"]["state"]["next_run_at"] == before


def test_resume_of_a_paused_job_still_rearms_it_from_now(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    ctx = Context.open(tmp_path / "home", clock=clock)
    ops.add_job(ctx, ops.spec_from_options("a", {"command": "true", "every": "1h"}))
    ops.pause_job(ctx, "a")
    clock.advance(1800)
    [result] = ops.resume_jobs(ctx, ["a"])
    assert result.cleared == ["paused"]
    assert result.next_run_at == "2026-03-01T13:30:00.000+00:00"


# --- a naive next --from is a wall time in the job's zone ---------------------------------------------


def test_a_naive_from_is_read_in_each_jobs_zone(cli: Cli) -> None:
    cli("add", "berlin", "--cron", "0 * * * *", "--tz", "Europe/Berlin", "--", "true")
    cli("add", "utc", "--cron", "0 * * * *", "--", "true")
    data = cli("next", "-n", "1", "--from", "2026-07-01T09:30:00", "--json").json()
    fires = {job["name"]: job["fires"][0] for job in data["jobs"]}
    assert fires["berlin"] == {"local": "2026-07-01T10:00:00+02:00", "utc": "2026-07-01T08:00:00.000+00:00"}
    assert fires["utc"]["local"] == "2026-07-01T10:00:00+00:00"


def test_a_zoned_from_is_an_instant_for_every_job(cli: Cli) -> None:
    cli("add", "berlin", "--cron", "0 * * * *", "--tz", "Europe/Berlin", "--", "true")
    data = cli("next", "berlin", "-n", "1", "--from", "2026-07-01T09:30:00Z", "--json").json()
    assert data["jobs"][0]["fires"][0]["local"] == "2026-07-01T12:00:00+02:00"


# --- export says when it leaves jobs out, and exits 1 unless --allow-partial ----------------------------


def test_export_that_leaves_a_job_out_names_it_and_exits_1(cli: Cli, tmp_path: Path) -> None:
    cli("add", "nightly", "--cron", "0 3 * * *", "--", "true")
    cli("add", "once", "--at", "2030-01-01T09:00:00Z", "--", "true")  # Kubernetes has no one-shot CronJob
    result = cli("export", "--format", "kubernetes")
    assert result.code == 1
    assert "name: nightly" in result.out  # what translates is still there
    assert result.err.endswith("cronctl: error: 1 of 2 job(s) not exported: once; the others were; "
                               "--allow-partial accepts a partial export\n")
    as_json = cli("export", "--format", "kubernetes", "--json")
    assert (as_json.code, as_json.json()["omitted"]) == (1, ["once"])
    out = tmp_path / "k8s"
    written = cli("export", "--format", "kubernetes", "-o", str(out))
    assert written.code == 1 and [p.name for p in out.iterdir()] != []


def test_export_allow_partial_accepts_what_was_left_out(cli: Cli) -> None:
    cli("add", "nightly", "--cron", "0 3 * * *", "--", "true")
    cli("add", "once", "--at", "2030-01-01T09:00:00Z", "--", "true")
    result = cli("export", "--format", "kubernetes", "--allow-partial")
    assert result.code == 0
    assert "once: not exported" in result.err and "cronctl: error" not in result.err
    assert cli("export", "--format", "kubernetes", "nightly").code == 0  # nothing left out: exit 0


def test_a_store_from_before_last_signal_still_says_a_signal_ended_the_run(cli: Cli, home: Path) -> None:
    _run_killed_by(home, signal.SIGKILL)
    with Context.open(home).store.transaction() as doc:  # as a store written before the key was kept
        del doc["jobs"]["a"]["state"]["last_signal"]
    [job] = cli("status", "--json").json()["jobs"]
    assert job["reason"].startswith("the job was killed by a signal")
