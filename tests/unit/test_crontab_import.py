"""import-crontab: Debian's own crontabs and a user's crontab become cronctl jobs, nothing silently lost.

Schedules are checked against croniter reading the original line on its own
(with Debian's day rule), so the importer is never its own oracle.
"""

from __future__ import annotations

import re

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from croniter import croniter

from cronctl.jobs.jobfile import load_jobs_file
from cronctl.interop.crontab_import import (
    import_crontab,
    program_slug,
    split_percent,
    unique_name,
)
from cronctl.interop.crontab_yaml import quote, render_yaml
from cronctl.schedule.cron import cron_next
from cronctl.schedule.cronexpr import parse_cron

UTC = timezone.utc
SAMPLES = Path(__file__).parents[1] / "data" / "crontabs"
SYSTEM_SAMPLES = ["debian-etc-crontab", "cron.d-e2scrub_all", "cron.d-php", "cron.d-sysstat",
                  "cron.d-anacron", "cron.d-certbot", "cron.d-mdadm"]
ALL_SAMPLES = [(name, True) for name in SYSTEM_SAMPLES] + [("user-crontab", False)]
STARTS = [datetime(2026, 1, 1, tzinfo=UTC), datetime(2027, 2, 27, 23, 59, 30, tzinfo=UTC)]
USER_SKIPPED = {13, 27, 28, 30, 31, 32, 33, 34, 35}


def imported(name: str, user_field: bool, prefix: str = ""):  # type: ignore[no-untyped-def]
    path = SAMPLES / name
    return import_crontab(path.read_text(encoding="utf-8"), str(path), user_field=user_field,
                          prefix=prefix, default_zone="UTC")


def original_schedule(line: str) -> str:
    """The time fields of a crontab line, read with nothing but str.split."""
    words = line.split()
    return words[0] if words[0].startswith("@") else " ".join(words[:5])


def croniter_fires(expr: str, start: datetime, count: int) -> list[datetime]:
    fields = expr.split()
    # Debian: the day fields combine with OR only when neither begins with `*`.
    day_or = len(fields) < 5 or not (fields[2].startswith("*") or fields[4].startswith("*"))
    it = croniter(expr, start, day_or=day_or)
    return [it.get_next(datetime).astimezone(UTC) for _ in range(count)]


def cronctl_fires(expr: str, start: datetime, count: int) -> list[datetime]:
    parsed, out, when = parse_cron(expr), [], start
    for _ in range(count):
        when = cron_next(parsed, "UTC", when)
        out.append(when)
    return out


@pytest.mark.parametrize(("name", "user_field"), ALL_SAMPLES)
def test_every_imported_schedule_fires_when_croniter_says_the_original_line_does(name: str, user_field: bool) -> None:
    result = imported(name, user_field)
    lines = (SAMPLES / name).read_text(encoding="utf-8").split("\n")
    assert result.jobs
    for job in result.jobs:
        original = original_schedule(lines[job.line - 1])
        for start in STARTS:
            assert cronctl_fires(job.entry["cron"], start, 20) == croniter_fires(original, start, 20), job.line


@pytest.mark.parametrize(("name", "user_field"), ALL_SAMPLES)
def test_every_sample_becomes_a_jobs_file_that_validates(name: str, user_field: bool, tmp_path: Path) -> None:
    result = imported(name, user_field)
    path = tmp_path / "jobs.yaml"
    path.write_text(render_yaml(result), encoding="utf-8")
    specs = load_jobs_file(path).specs
    assert [s.name for s in specs] == [j.entry["name"] for j in result.jobs]
    assert len({s.name for s in specs}) == len(specs)


@pytest.mark.parametrize("name", SYSTEM_SAMPLES)
def test_debian_system_files_import_whole_with_their_user_reported(name: str) -> None:
    result = imported(name, user_field=True)
    job_lines = [n for n, line in enumerate((SAMPLES / name).read_text().split("\n"), 1)
                 if line.strip() and not line.lstrip().startswith("#") and "=" not in line.split()[0]]
    assert result.skipped == []
    assert [job.line for job in result.jobs] == job_lines
    assert {job.user for job in result.jobs} == {"root"}


def test_debian_crontab_becomes_four_run_parts_jobs_with_its_path() -> None:
    result = imported("debian-etc-crontab", user_field=True)
    assert [job.entry["cron"] for job in result.jobs] == ["17 * * * *", "25 6 * * *", "47 6 * * 7", "52 6 1 * *"]
    assert all(job.entry["name"].startswith("run-parts-") for job in result.jobs)
    assert result.jobs[0].entry["command"] == "cd / && run-parts --report /etc/cron.hourly"
    assert result.jobs[1].entry["command"] == "test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }"
    assert all(job.entry["env"] == {"PATH": "/usr/local/sbin:/usr/local/bin:/sbin:/bin:/usr/sbin:/usr/bin"}
               for job in result.jobs)


def test_names_come_from_the_program_the_line_runs() -> None:
    # program, then the schedule in words where it has some (issue 26: no hash)
    names = {name: [job.entry["name"] for job in imported(name, True).jobs] for name in SYSTEM_SAMPLES}
    assert names["debian-etc-crontab"] == ["run-parts-hourly-17", "run-parts-daily-0625", "run-parts-sun-0647",
                                           "run-parts-monthly-1-0652"]
    assert names["cron.d-e2scrub_all"] == ["e2scrub-all-cron-sun-0330", "e2scrub-all-daily-0310"]
    assert names["cron.d-php"] == ["sessionclean-09.39_x_x_x_x"]
    assert names["cron.d-sysstat"] == ["debian-sa1-5-55by10_x_x_x_x", "debian-sa1-daily-2359"]
    assert names["cron.d-anacron"] == ["invoke-rc-d-30_7-23_x_x_x"]
    assert names["cron.d-certbot"] == ["certbot-0_every12_x_x_x"]
    assert names["cron.d-mdadm"] == ["checkarray-sun-0057"]


def test_mdadm_escaped_percent_reaches_the_shell_as_a_plain_percent() -> None:
    (job,) = imported("cron.d-mdadm", user_field=True).jobs
    assert "$(date +%d) -le 7" in job.entry["command"]
    assert "\\%" not in job.entry["command"]


def test_unsupported_user_crontab_lines_are_reported_by_number_and_the_rest_imported() -> None:
    result = imported("user-crontab", user_field=False)
    assert {s.line for s in result.skipped} == USER_SKIPPED
    reasons = {s.line: s.reason for s in result.skipped}
    assert "@reboot" in reasons[13]
    assert "Mars/Olympus_Mons" in reasons[27] and "line 27" in reasons[28]
    assert "@every" in reasons[30] and "never fires" in reasons[32] and "61" in reasons[33]
    lines = (SAMPLES / "user-crontab").read_text().split("\n")
    job_like = {n for n, line in enumerate(lines, 1) if line and line[0] in "0123456789*@t" and "=" not in line.split()[0]}
    assert {job.line for job in result.jobs} == job_like - USER_SKIPPED


def test_mailto_and_a_non_default_shell_are_reported_with_their_line() -> None:
    notes = {n.line: n.message for n in imported("user-crontab", user_field=False).notes}
    assert "MAILTO" in notes[3] and "email on output" in notes[3]
    assert "/bin/bash" in notes[20]


def test_env_lines_apply_to_the_jobs_below_them_with_quotes_removed() -> None:
    jobs = {job.line: job.entry for job in imported("user-crontab", user_field=False).jobs}
    assert jobs[9]["env"] == {"PATH": "/home/alice/bin:/usr/local/bin:/usr/bin:/bin", "LANG": "en_US.UTF-8",
                              "BACKUP_DIR": "/srv/backup dir "}
    assert jobs[25]["env"]["TZ"] == "Europe/Berlin"
    assert "MAILTO" not in jobs[9]["env"] and "SHELL" not in jobs[22]["env"]


def test_cron_tz_and_tz_set_the_zone_of_the_jobs_below() -> None:
    jobs = {job.line: job.entry for job in imported("user-crontab", user_field=False).jobs}
    assert "timezone" not in jobs[9]
    assert jobs[22]["timezone"] == jobs[23]["timezone"] == "America/New_York"
    assert jobs[25]["timezone"] == "Europe/Berlin"
    assert "timezone" not in jobs[36]  # CRON_TZ=UTC again


def test_lines_without_cron_tz_take_the_zone_given_for_the_file() -> None:
    text = "0 3 * * * backup\nCRON_TZ=UTC\n0 4 * * * other\n"
    result = import_crontab(text, "x", default_zone="Europe/Berlin")
    assert [j.entry.get("timezone") for j in result.jobs] == [None, "UTC"]
    assert "timezone: \"Europe/Berlin\"" in render_yaml(result)


def test_a_shell_other_than_sh_runs_the_command_as_its_argv() -> None:
    jobs = {job.line: job.entry for job in imported("user-crontab", user_field=False).jobs}
    assert jobs[22]["command"] == ["/bin/bash", "-c", "/home/alice/bin/standup-reminder"]
    assert isinstance(jobs[36]["command"], str)  # SHELL=/bin/sh again


@pytest.mark.parametrize(("text", "command", "stdin"), [
    ("echo hi", "echo hi", None),
    ("cat%a%b", "cat", "a\nb"),
    ("date +\\%F", "date +%F", None),
    ("mail joe%Joe,%%Where?%", "mail joe", "Joe,\n\nWhere?\n"),
    ("cat%100\\% sure", "cat", "100% sure"),
    ("echo a\\b%x\\y", "echo a\\b", "x\\y"),
    ("echo \\\\%in", "echo \\\\", "in"),
    ("cat%trailing\\", "cat", "trailing\\"),
    ("cat%", "cat", ""),
])
def test_percent_splits_command_and_input_as_debian_cron_does(text: str, command: str, stdin: str | None) -> None:
    assert split_percent(text) == (command, stdin)


def test_percent_input_reaches_the_whole_command_on_stdin() -> None:
    (job,) = import_crontab("* * * * * echo 100\\% done; cat; echo end%line one%line two\n", "x").jobs
    out = subprocess.run(["/bin/sh", "-c", job.entry["command"]], capture_output=True, text=True, check=True)
    assert out.stdout == "100% done\nline one\nline twoend\n"


def test_names_are_stable_unique_and_prefixed() -> None:
    first = imported("user-crontab", user_field=False, prefix="alice")
    again = imported("user-crontab", user_field=False, prefix="alice")
    names = [job.entry["name"] for job in first.jobs]
    assert names == [job.entry["name"] for job in again.jobs]
    assert len(set(names)) == len(names)
    assert all(name.startswith("alice-") for name in names)
    by_line = {job.line: job.entry["name"] for job in first.jobs}
    assert by_line[36] != by_line[9]
    assert by_line[9] == "alice-poll-feeds-every-15m" and by_line[22] == "alice-standup-reminder-weekdays-0900"
    # the same program on the same schedule: told apart by a digest of the command (stable)
    assert by_line[36] == "alice-poll-feeds-daily-0600" and re.fullmatch(by_line[36] + "-[0-9a-f]{4}", by_line[37])


def test_a_name_does_not_change_when_other_lines_move() -> None:
    a = import_crontab("0 1 * * * /opt/a.sh\n0 2 * * * /opt/b.sh\n", "x").jobs
    b = import_crontab("0 2 * * * /opt/b.sh\n# moved\n0 1 * * * /opt/a.sh\n", "x").jobs
    assert {j.entry["name"] for j in a} == {j.entry["name"] for j in b}


def test_long_programs_still_give_valid_names() -> None:
    name = unique_name("p" * 40, "/x/" + "y" * 200, "* * * * *", set())
    assert len(name) <= 64 and name.startswith("p" * 40 + "-")


@pytest.mark.parametrize(("command", "slug"), [
    ("cd / && run-parts --report /etc/cron.hourly", "run-parts"),
    ("sudo -u bob nice -n 10 flock -n /tmp/l /opt/x/backup.sh", "backup"),
    ("FOO=1 python3 -u /srv/app/manage.py clearsessions", "manage"),
    ("perl -e 'sleep int(rand(60))' && certbot renew", "certbot"),
    (": nothing", "job"),
])
def test_program_slug_skips_guards_wrappers_and_inline_code(command: str, slug: str) -> None:
    assert program_slug(command) == slug


def test_a_system_crontab_read_without_user_field_gets_a_hint() -> None:
    result = imported("debian-etc-crontab", user_field=False)
    assert any(n.line == 0 and "--user-field" in n.message for n in result.notes)


def test_bad_variable_names_and_reserved_ones_are_reported_not_applied() -> None:
    result = import_crontab("CRONCTL_JOB=x\n\"MY VAR\"=1\n* * * * * true\n", "x")
    assert {s.line for s in result.skipped} == {1, 2}
    assert "env" not in result.jobs[0].entry


def test_strings_are_quoted_so_yaml_reads_them_back_exactly() -> None:
    for text in ['a "b" \\c', "tab\there", "line\nbreak", "nel\x85", "del\x7f", "ls\u2028", "ünï", "#x: y"]:
        assert yaml.safe_load(quote(text)) == text


# --- the command ---------------------------------------------------------------------------------


def test_cli_import_writes_a_file_that_validate_accepts(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "jobs.yaml"
    result = cli("import-crontab", str(SAMPLES / "user-crontab"), "--tz", "UTC", "-o", str(out))
    assert result.code == 0, result.err
    assert "line 13: skipped" in result.err and "MAILTO" in result.err
    checked = cli("validate", "-f", str(out))
    assert checked.code == 0 and "15 job(s) valid" in checked.out
    assert "# line 13: skipped" in out.read_text().replace("#   line", "# line")


def test_cli_import_to_stdout_prints_only_yaml(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("import-crontab", "--user-field", "--tz", "UTC", str(SAMPLES / "debian-etc-crontab"))
    assert result.code == 0
    jobs = yaml.safe_load(result.out)["jobs"]
    assert len(jobs) == 4
    # The user column becomes each job's user (SPEC §13), no longer a warning.
    assert {job["user"] for job in jobs} == {"root"}
    assert "root" not in result.err


def test_cli_apply_puts_the_jobs_in_the_store(cli, home: Path) -> None:  # type: ignore[no-untyped-def]
    result = cli("import-crontab", "--user-field", "--tz", "UTC", "--prefix", "sys", "--apply",
                 str(SAMPLES / "debian-etc-crontab"))
    assert result.code == 0, result.err
    listed = cli("list", "--json").json()["jobs"]
    assert sorted(j["name"][:14] for j in listed) == ["sys-run-parts-"] * 4
    assert all(Path(j["source"]).parent == home / "imports" for j in listed)
    again = cli("import-crontab", "--user-field", "--tz", "UTC", "--prefix", "sys", "--apply",
                str(SAMPLES / "debian-etc-crontab"))
    assert "unchanged 4" in again.out


def test_cli_dry_run_prints_the_report_and_writes_nothing(cli, tmp_path: Path, home: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "jobs.yaml"
    result = cli("import-crontab", str(SAMPLES / "user-crontab"), "--dry-run", "--apply", "-o", str(out))
    assert result.code == 0
    assert "line 31: skipped" in result.out and "15 job(s) would be imported" in result.out
    assert not out.exists() and not (home / "jobs.json").exists()


def test_cli_reads_standard_input(tmp_path: Path, home: Path) -> None:
    from tests.conftest import cronctl_bin, subprocess_env

    done = subprocess.run([*cronctl_bin(), "import-crontab", "-", "--json", "--tz", "UTC"],
                          input=b"@daily /usr/bin/true\n@reboot x\n", capture_output=True, env=subprocess_env(home),
                          check=False)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [s["line"] for s in data["skipped"]] == [2] and len(data["jobs"]) == 1


def test_cli_missing_file_is_an_error_naming_it(cli) -> None:  # type: ignore[no-untyped-def]
    result = cli("import-crontab", "/nonexistent/crontab")
    assert result.code == 1 and "/nonexistent/crontab" in result.err


def test_a_gap_that_skips_several_wall_times_of_a_fixed_time_job_is_noted_because_debian_runs_each() -> None:
    text = ("CRON_TZ=Europe/Berlin\n"
            "0,30 2 * * * backup\n"  # fixed-time, two wall times in the 02:00-02:59 gap
            "30 2 * * * single\n"  # one wall time: Debian's cron and cronctl both run it once at 03:00
            "*/30 2 * * * wild\n"  # wildcard: neither runs the skipped wall times
            "CRON_TZ=UTC\n"
            "0,30 2 * * * other\n")  # UTC has no gap
    result = import_crontab(text, "x", now=datetime(2026, 12, 2, tzinfo=UTC))
    assert [job.entry["cron"] for job in result.jobs] == ["0,30 2 * * *", "30 2 * * *", "*/30 2 * * *",
                                                          "0,30 2 * * *"]
    assert [(note.line, note.message) for note in result.notes] == [(2, (
        "DST gap in Europe/Berlin (02:00-02:59 on 2027-03-28): Debian's cron runs this job once for each "
        "skipped wall time (02:00, 02:30: 2 runs, one after another just after the change); cronctl fires "
        "once, at the end of the gap"))]
    # The schedule is kept as written, so whether it is fixed-time (Debian's DST rule) is too.
    assert [parse_cron(job.entry["cron"]).fixed_time for job in result.jobs] == [True, True, False, True]


def test_mailto_becomes_an_email_notification_on_output() -> None:
    jobs = {job.line: job.entry for job in imported("user-crontab", user_field=False).jobs}
    assert jobs[9]["notify"] == [{"email": "ops@example.com", "on": ["output"]}]
