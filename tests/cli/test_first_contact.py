"""First contact, third pass (issue 26): what a new user trips on, each fixed and kept."""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import cronctl_bin, subprocess_env

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")


@pytest.fixture
def demo(cli, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.delenv("COLUMNS", raising=False)
    assert cli("apply", "-f", str(REPO / "jobs.example.yaml")).code == 0
    assert cli("add", "a-job-with-a-rather-long-name", "--every", "1m", "--", "false").code == 0
    return cli


def test_status_fits_80_columns_with_relative_times(demo, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COLUMNS", "80")
    out = demo("status").out
    table = out.splitlines()[1:]
    assert table[0].split() == ["JOB", "STATE", "NEXT", "REASON"]  # FAULT and LAST dropped first
    assert all(len(line) <= 80 for line in table), out
    assert re.search(r"^heartbeat\s+ok\s+in \d+s\s", out, re.M), out
    assert not ISO.search("\n".join(table)), out
    assert not ANSI.search(out)


def test_status_on_a_pipe_keeps_whole_rows_and_json_stays_absolute(demo) -> None:  # type: ignore[no-untyped-def]
    out = demo("status").out
    assert "FAULT" in out and ISO.search(out)
    jobs = demo("status", "--json").json()["jobs"]
    assert all(ISO.match(job["next_run_at"]) for job in jobs if job["next_run_at"])


def _status_on_a_pty(home: Path, **extra: str) -> str:
    env = {k: v for k, v in subprocess_env(home).items() if k not in ("NO_COLOR", "COLUMNS")}
    env.update(TERM="xterm-256color", **extra)
    return _on_a_pty([*cronctl_bin(), "status"], env).decode()


def _on_a_pty(argv: list[str], env: dict[str, str]) -> bytes:
    """All that `argv` writes to a terminal (a pty as stdin, stdout and stderr) until it exits."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    screen = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        screen += chunk
    proc.wait(timeout=60)
    os.close(leader)
    return screen


@pytest.mark.slow
def test_status_has_colour_on_a_terminal_and_none_with_no_color(demo, home: Path) -> None:  # type: ignore[no-untyped-def]
    coloured = _status_on_a_pty(home)
    assert "\x1b[32mok\x1b[0m" in coloured and "\x1b[33mstopped" in coloured, coloured
    assert re.search(r"in \d+s", coloured)
    plain = _status_on_a_pty(home, NO_COLOR="1")
    assert not ANSI.search(plain) and "heartbeat" in plain, plain


def test_audit_event_matches_a_prefix_and_refuses_an_unknown_event(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("add", "tick", "--every", "1m", "--", "true").code == 0
    assert cli("pause", "tick").code == 0
    rows = cli("audit", "--event", "job", "--json").json()["rows"]
    assert [row["event"] for row in rows] == ["job.added", "job.paused"]
    starred = cli("audit", "--event", "job.*", "--json").json()["rows"]
    assert [r["event"] for r in starred] == ["job.added", "job.paused"]
    assert [r["event"] for r in cli("audit", "--event", "job.added", "--json").json()["rows"]] == ["job.added"]
    assert cli("audit", "--event", "chain").code == 0  # a known group with no rows yet: fine
    bad = cli("audit", "--event", "nonsense")
    assert bad.code == 1 and bad.out == ""
    assert bad.err.startswith("cronctl: error: --event 'nonsense' matches no audit event") and "run.finished" in bad.err
    assert cli("audit", "--event", "job.add").code == 1  # no event is named that, and it is no group


@pytest.mark.slow
@pytest.mark.parametrize("args", [["history", "-n", "x"], ["audit", "-n", "-1"], ["list", "--bogus"], ["bogus"]])
def test_a_command_line_that_does_not_parse_is_one_error_line_exit_2(home: Path, args: list[str]) -> None:
    done = subprocess.run([*cronctl_bin(), *args], env=subprocess_env(home), capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.startswith("cronctl: error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "Usage:" not in done.stderr and "--help" in done.stderr


def test_remove_of_a_job_from_a_file_says_the_next_apply_creates_it_again(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: tick\n    every: 1m\n    command: 'true'\n")
    assert cli("apply", "-f", str(jobs)).code == 0
    gone = cli("remove", "tick")
    assert gone.code == 0 and gone.out == "removed tick\n"
    assert f"came from {jobs}" in gone.err and "creates it again" in gone.err
    assert cli("add", "hand", "--every", "1m", "--", "true").code == 0
    assert cli("remove", "hand").err == ""


def test_show_escapes_terminal_sequences_in_command_and_on_failure(cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("add", "esc", "--every", "1m", "--on-failure", "echo \x1b]0;title\x07", "--",
               "echo \x1b[2J\x1b[H").code == 0
    out = cli("show", "esc").out
    assert "\x1b" not in out and "\x07" not in out
    assert "echo \\x1b[2J\\x1b[H" in out and "echo \\x1b]0;title\\x07" in out


def test_an_error_quoting_a_name_with_a_newline_is_one_escaped_line(cli) -> None:  # type: ignore[no-untyped-def]
    bad = cli("add", "bad\nname\x1b[2J", "--every", "1m", "--", "true")
    assert bad.code == 1 and bad.err.count("\n") == 1 and "\x1b" not in bad.err
    assert "'bad\\nname\\x1b[2J'" in bad.err
    missing = cli("show", "x\ny")
    assert missing.err.count("\n") == 1 and "'x\\ny'" in missing.err


def test_terminal_safe_passes_colours_and_escapes_every_other_control() -> None:
    from cronctl.cli.safeout import TerminalSafe

    safe = TerminalSafe()
    out = safe.feed(b"ok \x1b[31mred\x1b[0m\tx\n\x1b[2J\x1b]0;t\x07\r") + safe.end()
    assert out == b"ok \x1b[31mred\x1b[0m\tx\n\\x1b[2J\\x1b]0;t\\x07\\x0d"
    split = TerminalSafe()  # a colour cut between two chunks stays a colour
    assert split.feed(b"a\x1b[3") + split.feed(b"1mb") + split.end() == b"a\x1b[31mb"
    cut = TerminalSafe()  # and a lone ESC at the very end is escaped at the end
    assert cut.feed(b"a\x1b") + cut.end() == b"a\\x1b"


@pytest.mark.slow
def test_logs_on_a_terminal_escapes_the_jobs_control_sequences_unless_raw(home: Path) -> None:
    env = subprocess_env(home)
    assert subprocess.run([*cronctl_bin(), "add", "esc", "--every", "1h", "--",
                           "printf 'a\\033[2Jb\\033[32mgreen\\033[0m\\n'"],
                          env=env, capture_output=True, timeout=60).returncode == 0
    assert subprocess.run([*cronctl_bin(), "force-run", "esc", "--wait"], env=env, capture_output=True,
                          timeout=60).returncode == 0

    def logs_on_a_pty(*extra: str) -> bytes:
        return _on_a_pty([*cronctl_bin(), "logs", "esc", *extra], env)

    assert b"a\\x1b[2Jb\x1b[32mgreen\x1b[0m" in logs_on_a_pty()
    assert b"a\x1b[2Jb" in logs_on_a_pty("--raw")
    piped = subprocess.run([*cronctl_bin(), "logs", "esc"], env=env, capture_output=True, timeout=60)
    assert piped.stdout == b"a\x1b[2Jb\x1b[32mgreen\x1b[0m\n"


def test_doctor_on_an_unwritable_home_is_not_ok(cli, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    assert cli("add", "tick", "--every", "1m", "--", "true").code == 0
    assert cli("doctor").code == 0
    if os.geteuid() != 0:  # the real thing; root writes through a mode of 0500
        home.chmod(0o500)
        (home / "audit.jsonl").chmod(0o400)
        try:
            real = cli("doctor", "--json")
        finally:
            home.chmod(0o700)
            (home / "audit.jsonl").chmod(0o600)
        assert real.code == 1 and "writable" in real.out
    import cronctl.ops.doctor as doctor

    def refused(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(doctor, "probe_write", refused)
    result = cli("doctor")
    assert result.code == 1
    assert f"[action] writable: cannot create a file in {home}: Permission denied" in result.out


def test_doctor_reads_the_demo_chain_jobs_cleanly(demo) -> None:  # type: ignore[no-untyped-def]
    out = demo("doctor").out
    assert "[ok] jobs:" in out and "load" not in out


def test_import_crontab_warns_of_the_default_zone_only_for_jobs_without_one() -> None:
    from cronctl.interop.crontab_import import import_crontab
    from cronctl.interop.crontab_yaml import report_lines

    zoned = import_crontab("CRON_TZ=Europe/Berlin\n0 3 * * * /opt/backup.sh\n", "x", default_zone="Etc/UTC")
    assert not any("CRON_TZ" in line for line in report_lines(zoned))
    mixed = import_crontab("0 1 * * * /opt/a.sh\nCRON_TZ=Europe/Berlin\n0 3 * * * /opt/b.sh\n", "x",
                           default_zone="Etc/UTC")
    assert "1 job(s) without CRON_TZ/TZ run in Etc/UTC" in "\n".join(report_lines(mixed))


def test_import_crontab_keeps_the_case_of_what_it_quotes_and_names_jobs_readably() -> None:
    from cronctl.interop.crontab_import import import_crontab

    result = import_crontab("0 0 L * * /usr/bin/echo hi\n*/5 * * * * /opt/backup.sh --full\n"
                            "0 3 * * 1 /opt/backup.sh\n0 3 * * 1 /opt/backup.sh --other\n", "x")
    assert "day-of-month 'L' is not a number" in result.skipped[0].reason
    names = [job.entry["name"] for job in result.jobs]
    assert names[:2] == ["backup-every-5m", "backup-mon-0300"]
    assert names[2].startswith("backup-mon-0300-") and len(set(names)) == 3


@pytest.mark.slow
def test_import_crontab_o_removes_the_temp_file_a_killed_run_left(home: Path, tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text("0 3 * * * /opt/backup.sh\n")
    dead = subprocess.Popen(["true"])
    dead.wait()  # a writer killed mid-write left its temp file; its pid is gone
    stale = tmp_path / f".out.yaml.{dead.pid}.tmp"
    stale.write_text("half a file")
    done = subprocess.run([*cronctl_bin(), "import-crontab", str(crontab), "-o", str(tmp_path / "out.yaml")],
                          env=subprocess_env(home), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not stale.exists() and (tmp_path / "out.yaml").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_export_of_the_loop_unit_on_an_empty_home_does_not_warn(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("export", "--format", "systemd-service")
    assert result.code == 0 and "TimeoutStopSec=" in result.out
    assert "no jobs to export" not in result.err
    assert "no jobs to export" in cli("export", "--format", "crontab").err


def test_doctor_finds_an_installed_unit_whose_stop_timeout_no_longer_covers_the_jobs(
        cli, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    import cronctl.ops.unitcheck as unitcheck

    units = tmp_path / "units"
    units.mkdir()
    monkeypatch.setattr(unitcheck, "UNIT_DIRS", (units,))
    assert cli("add", "quick", "--every", "1h", "--kill-grace", "5s", "--", "true").code == 0
    (units / "cronctl.service").write_text(cli("export", "--format", "systemd-service").out)
    assert "TimeoutStopSec=27s" in (units / "cronctl.service").read_text()
    fine = cli("doctor")
    assert fine.code == 0 and "[ok] unit:" in fine.out
    assert cli("add", "slow", "--every", "1h", "--kill-grace", "10m", "--", "true").code == 0
    stale = cli("doctor")
    assert stale.code == 1
    assert "[action] unit:" in stale.out and "TimeoutStopSec=27s is below the 622s" in stale.out
    assert "cronctl export --format systemd-service" in stale.out
    other = units / "cronctl.service"  # a unit of another home is none of this home's business
    other.write_text(other.read_text().replace(f"--home {home} ", "--home /elsewhere "))
    assert "unit:" not in cli("doctor").out


def test_the_container_runs_as_a_user_and_its_health_check_asks_livez() -> None:
    dockerfile = (REPO / "docs" / "container" / "Dockerfile").read_text()
    users = re.findall(r"^USER\s+(\S+)", dockerfile, re.M)
    assert users and users[-1] not in ("root", "0")
    health = re.search(r"^HEALTHCHECK (?:.*\\\n)*.*", dockerfile, re.M)
    assert health and "/livez" in health.group() and "--stale" not in health.group()
    entry = dockerfile.index("ENTRYPOINT")
    assert dockerfile.rindex("USER") < entry


def test_benchmarks_doc_is_a_reference_with_one_current_table_per_area() -> None:
    text = (REPO / "docs" / "benchmarks.md").read_text()
    assert len(text.splitlines()) < 250, "history belongs in bench/results/HISTORY.md"
    assert (REPO / "bench" / "results" / "HISTORY.md").exists()
    areas = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(areas) >= 6
    for area in areas:
        title = area.splitlines()[0]
        if title == "Method":
            continue
        assert re.search(r"[Rr]un\s+20\d\d-\d\d-\d\d\s+at\s+[0-9a-f]{7}", area), f"{title}: no date and commit"
        assert re.search(r"`python bench/\w+\.py[^`]*`", area), f"{title}: no command that reproduces it"
        header = next(line for line in area.splitlines() if line.startswith("| "))
        assert "target" in header, f"{title}: no target column"
        assert area.count("\n| ") >= 3, f"{title}: no table"
    for history in ("second pass", "third pass", "before this change", "after two changes"):
        assert history not in text.lower(), f"'{history}': passes are history (bench/results/HISTORY.md)"
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Benchmarks"):]
    section = section[:section.index("\n## ", 5)]
    assert "| figure | cronctl | peers, same run | target |" in section and "docs/benchmarks.md" in section


@pytest.mark.slow
def test_run_f_refuses_a_new_past_at_and_says_how_to_fire_it(home: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text('jobs:\n  - name: old\n    at: "2020-01-01T00:00:00Z"\n    command: "true"\n')
    env = subprocess_env(home)
    refused = subprocess.run([*cronctl_bin(), "run", "-f", str(jobs), "--once"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"{jobs}:3: job 'old': field 'at'" in refused.stderr
    assert f"cronctl apply -f {jobs} --allow-past" in refused.stderr
    applied = subprocess.run([*cronctl_bin(), "apply", "-f", str(jobs), "--allow-past"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert applied.returncode == 0, applied.stderr
    again = subprocess.run([*cronctl_bin(), "run", "-f", str(jobs), "--once"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0, again.stderr  # stored: it keeps its catch-up, and fires now
