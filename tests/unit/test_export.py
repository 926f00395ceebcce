"""export: crontab, systemd and Kubernetes output that fires when cronctl fires, and says where it cannot.

OnCalendar lines are checked twice against cron_next: by systemd-analyze
itself (when installed) and by a small OnCalendar evaluator written here from
systemd.time(7), which shares nothing with cronctl's code.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml
from croniter import croniter  # type: ignore[import-untyped]

from cronctl.interop.crontab_import import import_crontab
from cronctl.interop.export.formats import export_jobs
from cronctl.interop.export.kubernetes import dns_name
from cronctl.interop.export.systemd import exec_line
from cronctl.models import Catchup, JobSpec, Overlap
from cronctl.schedule.cron import cron_next
from cronctl.schedule.cronexpr import parse_cron

UTC = timezone.utc
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
BASE = datetime(2026, 1, 5, 10, 17, 30, tzinfo=UTC)
SPRING = datetime(2026, 2, 20, 6, 0, tzinfo=UTC)
SCHEMA = Path(__file__).parents[1] / "data" / "k8s-cronjob-schema.json"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze") or ""
needs_systemd = pytest.mark.skipif(not SYSTEMD_ANALYZE, reason="systemd-analyze is not installed "
                                   "(Debian package `systemd`; .ci/run installs it)")

# (cron, zone, start): ranges, steps, lists, names, the OR and AND day rules, macros, zones.
CASES = [
    ("* * * * *", "UTC", BASE),
    ("*/7 * * * *", "UTC", BASE),
    ("5-55/10 * * * *", "UTC", BASE),
    ("1-3,10-12 * * * *", "UTC", BASE),
    ("0 */3 * * *", "UTC", BASE),
    ("15,45 8-18 * * *", "UTC", BASE),
    ("0 9 * * mon-fri", "UTC", BASE),
    ("30 4 1,15 * 5", "UTC", BASE),
    ("0 0 13 * fri", "UTC", BASE),
    ("15 0 */2 * 1-5", "UTC", BASE),
    ("0 12 1-7 * */2", "UTC", BASE),
    ("0 0 1-31 * 1", "UTC", BASE),
    ("0 0 29 2 mon", "UTC", BASE),
    ("0 6 * jan,jul 1", "UTC", BASE),
    ("0 0,12 1 */2 *", "UTC", BASE),
    ("0 0 31 * *", "UTC", BASE),
    ("59 23 31 12 *", "UTC", BASE),
    ("0 0 * * 7", "UTC", BASE),
    ("0 0 * * mon-sun", "UTC", BASE),
    ("0 0 * 2 *", "UTC", BASE),
    ("@yearly", "UTC", BASE),
    ("@monthly", "America/New_York", BASE),
    ("@weekly", "Asia/Tokyo", BASE),
    ("@daily", "Europe/Berlin", SPRING),
    ("@hourly", "Asia/Kolkata", BASE),
    ("*/20 9-17 * * *", "America/New_York", SPRING),
    ("0 9 * * 1-5", "America/New_York", SPRING),
    ("0 12 * * *", "Europe/Berlin", SPRING),
    ("0 8-20/4 * * sat,sun", "Australia/Sydney", BASE),
    ("0 3 * * 5-7", "Europe/London", SPRING),
]


def spec(name: str = "job", **fields) -> JobSpec:  # type: ignore[no-untyped-def]
    return JobSpec(name=name, command=fields.pop("command", "true"), **fields)


def cronctl_fires(expr: str, tz: str, start: datetime, count: int) -> list[datetime]:
    parsed, out, when = parse_cron(expr), [], start
    for _ in range(count):
        when = cron_next(parsed, tz, when)
        out.append(when)
    return out


def file_text(result, name: str) -> str:  # type: ignore[no-untyped-def]
    return str(next(f.text for f in result.files if f.name == name))


def timer_lines(job: JobSpec) -> list[str]:
    result = export_jobs([job], "systemd", NOW)
    timer = file_text(result, f"cronctl-{job.name}.timer")
    return [line.split("=", 1)[1] for line in timer.splitlines() if line.startswith("OnCalendar=")]


# --- an OnCalendar evaluator of its own (systemd.time(7)) ------------------------------------

_WEEKDAYS = {"Mon": 1, "Tue": 2, "Wed": 3, "Thu": 4, "Fri": 5, "Sat": 6, "Sun": 7}


def _component(text: str, low: int, high: int, names: dict[str, int] | None = None) -> set[int]:
    if text == "*":
        return set(range(low, high + 1))

    def value(word: str) -> int:
        return names[word] if names and word in names else int(word)

    out: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        first, dots, last = base.partition("..")
        start = value(first)
        end = value(last) if dots else (high if step else start)
        out.update(range(start, end + 1, int(step) if step else 1))
    return out


@dataclass
class Calendar:
    weekdays: set[int]
    years: set[int] | None
    months: set[int]
    days: set[int]
    hours: set[int]
    minutes: set[int]
    seconds: set[int]
    zone: ZoneInfo

    @classmethod
    def parse(cls, line: str) -> Calendar:
        words = line.split()
        zone = ZoneInfo(words.pop()) if words[-1] == "UTC" or "/" in words[-1] else ZoneInfo("UTC")
        weekdays = _component(words.pop(0), 1, 7, _WEEKDAYS) if words[0][0].isalpha() else set(range(1, 8))
        year, month, day = words[0].split("-")
        hour, minute, second = words[1].split(":")
        return cls(weekdays, None if year == "*" else {int(year)}, _component(month, 1, 12),
                   _component(day, 1, 31), _component(hour, 0, 23), _component(minute, 0, 59),
                   _component(second, 0, 59), zone)

    def fires(self, after: datetime, count: int) -> list[datetime]:
        """Matching wall times from `after` on; a wall time in a DST gap does not exist
        and is skipped, a repeated one counts once, in its first pass (as systemd does)."""
        found: list[datetime] = []
        day = after.astimezone(self.zone).date()
        while len(found) < count and day.year < 2300:
            if self._day_matches(day):
                found += [t for t in self._instants(day) if t > after]
            day += timedelta(days=1)
        return sorted(found)[:count]

    def _day_matches(self, day: date) -> bool:
        return ((self.years is None or day.year in self.years) and day.month in self.months
                and day.day in self.days and day.isoweekday() in self.weekdays)

    def _instants(self, day: date) -> list[datetime]:
        out = []
        for hour in sorted(self.hours):
            for minute in sorted(self.minutes):
                for second in sorted(self.seconds):
                    wall = datetime(day.year, day.month, day.day, hour, minute, second)
                    instant = wall.replace(tzinfo=self.zone).astimezone(UTC)
                    if instant.astimezone(self.zone).replace(tzinfo=None) == wall:
                        out.append(instant)
        return out


def evaluator_fires(lines: list[str], start: datetime, count: int) -> list[datetime]:
    union: set[datetime] = set()
    for line in lines:
        union.update(Calendar.parse(line).fires(start, count))
    return sorted(union)[:count]


def systemd_fires(lines: list[str], start: datetime, count: int) -> list[datetime]:
    assert SYSTEMD_ANALYZE
    done = subprocess.run([SYSTEMD_ANALYZE, "calendar", f"--iterations={count}",
                           f"--base-time=@{int(start.timestamp())}", *lines],
                          capture_output=True, text=True, env={"TZ": "UTC", "PATH": "/usr/bin:/bin"}, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    union = {datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC)
             for stamp in re.findall(r"(?:Next elapse|Iter\. #\d+): \w+ (\S+ \S+) UTC", done.stdout)}
    assert len(union) >= min(count, 1)
    # systemd-analyze iterates from the whole second of the base time.
    return [t for t in sorted(union) if t > start][:count]


# --- systemd: schedules -----------------------------------------------------------------------


def test_thirty_cases_cover_the_shapes_they_claim() -> None:
    assert len(CASES) == 30
    parsed = [parse_cron(expr) for expr, _, _ in CASES]
    assert any(not (p.dom_star or p.dow_star) for p in parsed)  # OR rule
    assert any(p.dom_star and not p.dow_star and p.fields[2] != "*" for p in parsed)  # AND with */n
    assert len({zone for _, zone, _ in CASES}) >= 7


@pytest.mark.parametrize(("expr", "tz", "start"), CASES, ids=[f"{e} {z}" for e, z, _ in CASES])
def test_oncalendar_lines_fire_when_cronctl_fires_by_our_evaluator(expr: str, tz: str, start: datetime) -> None:
    lines = timer_lines(spec(cron=expr, timezone=tz))
    assert all(line.endswith(" " + tz) for line in lines)
    assert evaluator_fires(lines, start, 50) == cronctl_fires(expr, tz, start, 50)


@needs_systemd
@pytest.mark.parametrize(("expr", "tz", "start"), CASES, ids=[f"{e} {z}" for e, z, _ in CASES])
def test_oncalendar_lines_fire_when_cronctl_fires_by_systemd_analyze(expr: str, tz: str, start: datetime) -> None:
    lines = timer_lines(spec(cron=expr, timezone=tz))
    assert systemd_fires(lines, start, 50) == cronctl_fires(expr, tz, start, 50)


def test_the_or_rule_becomes_two_oncalendar_lines_and_and_stays_one() -> None:
    assert timer_lines(spec(cron="30 4 1,15 * 5")) == ["*-*-01,15 04:30:00 UTC", "Fri *-*-* 04:30:00 UTC"]
    assert timer_lines(spec(cron="15 0 */2 * 1-5")) == ["Mon..Fri *-*-01/2 00:15:00 UTC"]


DST_GAP = ("30 2 * * *", "Europe/Berlin", datetime(2027, 3, 20, tzinfo=UTC))
DST_FOLD = ("*/30 * * * *", "Europe/Berlin", datetime(2027, 10, 30, 22, 0, tzinfo=UTC))
# Wildcards (minute or hour begins with `*`) follow the clock in cronctl as in Debian's cron: in a gap
# they skip the missing wall times as systemd does; in a fold they fire in both passes, systemd in one.
WILDCARD_GAP = ("30 * * * *", "Europe/Berlin", datetime(2027, 3, 27, 22, 0, tzinfo=UTC))
WILDCARD_MINUTE_FOLD = ("*/16 2 * * *", "Europe/Berlin", datetime(2027, 10, 30, 22, 0, tzinfo=UTC))


def test_a_dst_gap_slot_is_reported_because_systemd_skips_it() -> None:
    expr, tz, start = DST_GAP
    result = export_jobs([spec(cron=expr, timezone=tz)], "systemd", start)
    assert any("DST gap" in note and "2027-03-28" in note for note in result.notes["job"])
    ours = cronctl_fires(expr, tz, start, 20)
    gap_slot = datetime(2027, 3, 28, 1, 0, tzinfo=UTC)  # 03:00 CEST, the end of the gap
    assert gap_slot in ours
    assert evaluator_fires(timer_lines(spec(cron=expr, timezone=tz)), start, 19) == [t for t in ours if t != gap_slot]


def test_a_dst_fold_is_reported_for_wildcard_schedules_because_systemd_fires_once() -> None:
    expr, tz, start = DST_FOLD
    result = export_jobs([spec(cron=expr, timezone=tz)], "systemd", start)
    assert any("DST fold" in note for note in result.notes["job"])
    ours = cronctl_fires(expr, tz, start, 12)
    second_pass = {datetime(2027, 10, 31, 1, 0, tzinfo=UTC), datetime(2027, 10, 31, 1, 30, tzinfo=UTC)}
    assert second_pass <= set(ours)
    theirs = evaluator_fires(timer_lines(spec(cron=expr, timezone=tz)), start, 10)
    assert theirs == [t for t in ours if t not in second_pass]


def test_a_wildcard_schedule_in_a_gap_gets_no_note_because_systemd_also_skips_those_wall_times() -> None:
    expr, tz, start = WILDCARD_GAP
    result = export_jobs([spec(cron=expr, timezone=tz)], "systemd", start)
    assert not any("DST gap" in note for note in result.notes["job"])
    ours = cronctl_fires(expr, tz, start, 6)
    assert datetime(2027, 3, 28, 1, 0, tzinfo=UTC) not in ours  # 03:00 CEST: nothing to catch up
    assert evaluator_fires(timer_lines(spec(cron=expr, timezone=tz)), start, 6) == ours


def test_a_wildcard_minute_under_a_fixed_hour_gets_the_fold_note_for_systemd() -> None:
    expr, tz, start = WILDCARD_MINUTE_FOLD
    result = export_jobs([spec(cron=expr, timezone=tz)], "systemd", start)
    assert [note for note in result.notes["job"] if "DST" in note] == [
        "DST fold in Europe/Berlin (02:00-02:59 on 2027-10-31): cronctl fires this wildcard schedule (minute "
        "or hour begins with '*') at the repeated wall times in both passes, as Debian's cron does; systemd "
        "fires each once, in the first pass"]
    ours = cronctl_fires(expr, tz, start, 9)
    assert len([t for t in ours if t.date() == date(2027, 10, 31)]) == 8
    theirs = evaluator_fires(timer_lines(spec(cron=expr, timezone=tz)), start, 5)
    assert theirs == ours[:4] + ours[8:9]


@needs_systemd
def test_systemd_analyze_agrees_with_the_dst_differences_we_report() -> None:
    for expr, tz, start in (DST_GAP, DST_FOLD, WILDCARD_GAP, WILDCARD_MINUTE_FOLD):
        lines = timer_lines(spec(cron=expr, timezone=tz))
        assert systemd_fires(lines, start, 15) == evaluator_fires(lines, start, 15)


def test_no_dst_note_when_the_schedule_misses_the_changes() -> None:
    result = export_jobs([spec(cron="0 12 * * *", timezone="Europe/Berlin")], "systemd", NOW)
    assert not any("DST" in note for note in result.notes["job"])


@pytest.mark.parametrize(("every", "line"), [(15, "*-*-* *:*:00/15 UTC"), (900, "*-*-* *:00/15:00 UTC"),
                                              (7200, "*-*-* 00/2:00:00 UTC"), (86400, "*-*-* 00:00:00 UTC")])
def test_every_that_divides_the_clock_becomes_an_oncalendar_grid(every: int, line: str) -> None:
    job = spec(every=float(every))
    assert timer_lines(job) == [line]
    fires = evaluator_fires([line], BASE, 5)
    assert all((b - a).total_seconds() == every for a, b in pairwise(fires))


def test_every_that_does_not_divide_the_clock_uses_monotonic_timers() -> None:
    result = export_jobs([spec(every=420.0)], "systemd", NOW)
    timer = file_text(result, "cronctl-job.timer")
    assert "OnBootSec=420s" in timer and "OnUnitActiveSec=420s" in timer and "OnCalendar" not in timer
    assert any("drift" in note for note in result.notes["job"])


def test_at_becomes_one_absolute_oncalendar_in_utc() -> None:
    at = datetime(2027, 1, 1, 9, 30, tzinfo=timezone(timedelta(hours=1)))
    assert timer_lines(spec(at=at)) == ["2027-01-01 08:30:00 UTC"]


# --- systemd: units -----------------------------------------------------------------------------


def unit_jobs() -> list[JobSpec]:
    return [
        spec("backup", command="pg_dump db | gzip > /var/backups/db-$(date +%F).gz", cron="0 3 * * *",
             timezone="Europe/Berlin", cwd="/tmp", env={"PGHOST": "localhost", "Q": 'a "b" $c %d\\e'},
             timeout=1800.0, kill_grace=15.0, jitter=30.0, retries=2, on_failure="echo 'backup failed' >&2"),
        spec("argv.job_1", command=("printf", "%s\n", "two words", "$HOME", ";", "tab\there"), every=420.0,
             overlap=Overlap.ALLOW, kill_grace=0.0, timeout=0.0),
        spec("grid", command=("/bin/echo", "100%"), every=900.0, catchup=Catchup.SKIP, paused=True),
        spec("once", at=datetime(2027, 1, 1, 8, 0, tzinfo=UTC)),
        spec("fast", every=0.5),
    ]


def test_service_maps_command_cwd_env_timeout_and_kill_grace() -> None:
    result = export_jobs(unit_jobs(), "systemd", NOW)
    service = file_text(result, "cronctl-backup.service")
    for line in ["Type=oneshot", 'ExecStart=/bin/sh -c "pg_dump db | gzip > /var/backups/db-$$(date +%%F).gz"',
                 "WorkingDirectory=/tmp", 'Environment="PGHOST=localhost"', 'Environment="Q=a \\"b\\" $c %%d\\\\e"',
                 "TimeoutStartSec=1800s", "KillMode=control-group", "TimeoutStopSec=15s",
                 "OnFailure=cronctl_on-failure-backup.service"]:
        assert line in service.splitlines(), line
    timer = file_text(result, "cronctl-backup.timer")
    for line in ["Persistent=true", "AccuracySec=1s", "RandomizedDelaySec=30s", "FixedRandomDelay=true",
                 "OnCalendar=*-*-* 03:00:00 Europe/Berlin", "WantedBy=timers.target"]:
        assert line in timer.splitlines(), line
    argv = file_text(result, "cronctl-argv.job_1.service")
    assert "TimeoutStartSec=infinity" in argv and "KillSignal=SIGKILL" in argv
    assert "Persistent=false" in file_text(result, "cronctl-grid.timer")


def _systemd_words(value: str) -> list[str]:
    """ExecStart= words as systemd reads them: quotes, C escapes, then %% and $$."""
    words = []
    for match in re.finditer(r'"((?:[^"\\]|\\.)*)"|(\S+)', value):
        text = match[1] if match[1] is not None else match[2]
        if match[1] is not None:
            text = re.sub(r"\\(x[0-9a-f]{2}|.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1])
                          if not m[1].startswith("x") else chr(int(m[1][1:], 16)), text)
        words.append(text.replace("%%", "%").replace("$$", "$"))
    return words


@pytest.mark.parametrize("command", [
    "pg_dump db | gzip > \"/var/backups/db $(date +%F).gz\" && echo '\\\\ done'",
    ("printf", "%s\n", "two words", "$HOME", ";", "tab\there", "bell\x07"),
    ("/bin/echo", "100%", "a\"b"),
])
def test_execstart_quoting_reads_back_as_the_same_argv(command) -> None:  # type: ignore[no-untyped-def]
    words = _systemd_words(exec_line(command))
    expected = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if isinstance(command, tuple) and not command[0].startswith("/"):
        expected = ["/usr/bin/env", *command]
    assert words == expected


@needs_systemd
def test_systemd_analyze_verify_accepts_every_generated_unit(tmp_path: Path) -> None:
    result = export_jobs(unit_jobs(), "systemd", NOW)
    for item in result.files:
        (tmp_path / item.name).write_text(item.text, encoding="utf-8")
    names = sorted(item.name for item in result.files)
    done = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", *names], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    complaints = [line for line in done.stderr.splitlines() if "cronctl" in line]
    assert complaints == []


def test_untranslatable_systemd_fields_are_listed_in_the_unit_and_the_result() -> None:
    result = export_jobs(unit_jobs(), "systemd", NOW)
    backup = result.notes["backup"]
    assert any(n.startswith("retries 2") for n in backup) and any(n.startswith("jitter") for n in backup)
    assert any(n.startswith("overlap allow") for n in result.notes["argv.job_1"])
    assert any(n.startswith("paused") for n in result.notes["grid"])
    assert "# Not translated:" in file_text(result, "cronctl-backup.service")


# --- crontab ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("expr", "tz", "start"), CASES, ids=[f"{e} {z}" for e, z, _ in CASES])
def test_crontab_lines_read_back_by_the_importer_fire_as_before(expr: str, tz: str, start: datetime) -> None:
    result = export_jobs([spec(cron=expr, timezone=tz)], "crontab", NOW)
    back = import_crontab(result.files[0].text, "export", default_zone="UTC")
    (job,) = back.jobs
    assert job.entry.get("timezone", "UTC") == tz
    assert cronctl_fires(job.entry["cron"], tz, start, 30) == cronctl_fires(expr, tz, start, 30)
    # The line as Debian's cron reads it (day rule by the first character), by croniter.
    fields = job.entry["cron"].split()
    day_or = not (fields[2].startswith("*") or fields[4].startswith("*"))
    it = croniter(job.entry["cron"], start.astimezone(ZoneInfo(tz)), day_or=day_or)
    assert [it.get_next(datetime).astimezone(UTC) for _ in range(30)] == cronctl_fires(expr, tz, start, 30)


@pytest.mark.parametrize("expr", ["*/15 2 * * *", "30 0-23 * * *", "0 */3 * * *", "0,30 */30,2 * * *",
                                  "@hourly", "@daily", "0-59/20 1-3 * * *"])
def test_crontab_lines_keep_whether_minute_and_hour_begin_with_a_star(expr: str) -> None:
    # Debian's cron picks its DST rule by that first character: `*/15 2` is a wildcard, `0-45/15 2`
    # would be fixed-time and fire once in the fold.
    result = export_jobs([spec(cron=expr, timezone="Europe/Berlin")], "crontab", NOW)
    (job,) = import_crontab(result.files[0].text, "export", default_zone="UTC").jobs
    assert parse_cron(job.entry["cron"]).fixed_time is parse_cron(expr).fixed_time
    for start in (datetime(2027, 3, 27, 20, 0, tzinfo=UTC), datetime(2027, 10, 30, 20, 0, tzinfo=UTC)):
        assert cronctl_fires(job.entry["cron"], "Europe/Berlin", start, 40) == \
            cronctl_fires(expr, "Europe/Berlin", start, 40)


def test_crontab_export_notes_where_debian_runs_a_job_once_per_skipped_wall_time() -> None:
    jobs = [spec("twice", cron="0,30 2 * * *", timezone="Europe/Berlin"),
            spec("once", cron="30 2 * * *", timezone="Europe/Berlin"),
            spec("wild", cron="*/30 2 * * *", timezone="Europe/Berlin")]
    result = export_jobs(jobs, "crontab", NOW)
    assert [note for note in result.notes["twice"] if "DST" in note] == [
        "DST gap in Europe/Berlin (02:00-02:59 on 2027-03-28): Debian's cron runs this job once for each "
        "skipped wall time (02:00, 02:30: 2 runs, one after another just after the change); cronctl fires "
        "once, at the end of the gap"]
    assert not any("DST" in note for note in result.notes["once"] + result.notes["wild"])


def test_crontab_command_carries_cwd_env_jitter_timeout_and_overlap() -> None:
    job = spec("backup", command="echo 100% > out", cron="0 3 * * *", cwd="/srv/x y", env={"A": "1 2"},
               timeout=90.0, kill_grace=5.0, jitter=10.0)
    text = export_jobs([job], "crontab", NOW).files[0].text
    line = next(line for line in text.splitlines() if line.startswith("0 3 * * * "))
    assert line.startswith("0 3 * * * sleep ")
    assert "cd '/srv/x y' || exit 1; export A='1 2'; flock -n -E 0 /run/lock/cronctl-backup.lock " \
           "timeout -k 5s 90s /bin/sh -c 'echo 100\\% > out'" in line
    (back,) = import_crontab(text, "x").jobs
    assert "echo 100% > out" in back.entry["command"]


def test_crontab_comments_out_what_cron_cannot_schedule_and_says_why() -> None:
    jobs = [spec("odd", every=420.0), spec("once", at=datetime(2027, 1, 1, tzinfo=UTC)),
            spec("held", cron="0 1 * * *", paused=True)]
    result = export_jobs(jobs, "crontab", NOW)
    assert import_crontab(result.files[0].text, "x").jobs == []
    assert set(result.omitted) == {"odd", "once"}
    assert any("every 7m" in n for n in result.notes["odd"])
    assert any(n.startswith("paused") for n in result.notes["held"])


@pytest.mark.parametrize("command", [
    "printf 'a\\nb' | {\ncat\n}",
    "echo '100\\%' \"$((1+1))\" it\\'s\necho 'q''r' % \\\\%",
    ("printf", "%s|", "x\ny", "a\\%b", "it's"),
])
def test_crontab_keeps_line_breaks_and_backslash_percent_through_printf(command) -> None:  # type: ignore[no-untyped-def]
    job = spec("x", cron="0 1 * * *", command=command, overlap=Overlap.ALLOW, timeout=0.0)
    text = export_jobs([job], "crontab", NOW).files[0].text
    assert all("\n" not in line for line in text.splitlines())
    (back,) = import_crontab(text, "x").jobs  # cut at `%` as Debian's cron does
    original = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    expected = subprocess.run(original, capture_output=True, text=True, check=True).stdout
    ran = subprocess.run(["/bin/sh", "-c", back.entry["command"]], capture_output=True, text=True, check=True)
    assert ran.stdout == expected


def test_crontab_sets_cron_tz_only_when_the_zone_changes() -> None:
    jobs = [spec("a", cron="0 1 * * *"), spec("b", cron="0 2 * * *", timezone="Asia/Tokyo"),
            spec("c", cron="0 3 * * *", timezone="Asia/Tokyo"), spec("d", cron="0 4 * * *")]
    text = export_jobs(jobs, "crontab", NOW).files[0].text
    assert [line for line in text.splitlines() if line.startswith("CRON_TZ=")] == \
        ["CRON_TZ=UTC", "CRON_TZ=Asia/Tokyo", "CRON_TZ=UTC"]


# --- Kubernetes ---------------------------------------------------------------------------------


def kube_docs(jobs: list[JobSpec]) -> list[dict]:  # type: ignore[type-arg]
    return [yaml.safe_load(f.text) for f in export_jobs(jobs, "kubernetes", NOW).files]


def test_cronjob_manifests_validate_against_the_batch_v1_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jobs = unit_jobs() + [spec(f"case-{i}", cron=expr, timezone=tz) for i, (expr, tz, _) in enumerate(CASES)]
    docs = kube_docs(jobs)
    assert len(docs) >= 30
    for doc in docs:
        jsonschema.validate(doc, schema)
        assert doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")
        assert len(doc["spec"]["schedule"].split()) == 5 and croniter.is_valid(doc["spec"]["schedule"])


@pytest.mark.parametrize(("expr", "tz", "start"), CASES, ids=[f"{e} {z}" for e, z, _ in CASES])
def test_cronjob_schedule_fires_when_cronctl_fires(expr: str, tz: str, start: datetime) -> None:
    result = export_jobs([spec(cron=expr, timezone=tz)], "kubernetes", NOW)
    parsed = parse_cron(expr)
    both_restricted_and = (parsed.dom_star or parsed.dow_star) and "*" not in (parsed.fields[2], parsed.fields[4])
    if both_restricted_and:
        # Kubernetes' cron library reads `*/2` as restricted and would OR the day fields.
        assert result.omitted == ["job"] and any("OR" in n for n in result.notes["job"])
        return
    docs = [yaml.safe_load(f.text) for f in result.files]
    schedule, zone = docs[0]["spec"]["schedule"], docs[0]["spec"]["timeZone"]
    assert zone == tz
    # croniter's default day rule is the Kubernetes library's: only a bare `*` is unrestricted.
    it = croniter(schedule, start.astimezone(ZoneInfo(zone)))
    assert [it.get_next(datetime).astimezone(UTC) for _ in range(30)] == cronctl_fires(expr, tz, start, 30)


def test_kubernetes_gets_dst_notes_for_fixed_time_schedules_only() -> None:
    # robfig/cron steps hours in elapsed time: it skips a gap's wall times (as Debian's rule does for
    # wildcards) and may meet a repeated hour twice (as Debian's rule does for wildcards only).
    def dst(expr: str) -> list[str]:
        result = export_jobs([spec(cron=expr, timezone="Europe/Berlin")], "kubernetes", NOW)
        return [note.split(" (")[0] for note in result.notes["job"] if "DST" in note]

    assert dst("30 2 * * *") == ["DST gap in Europe/Berlin", "DST fold in Europe/Berlin"]
    assert dst("*/16 2 * * *") == []


def test_cronjob_fields_map_from_the_job() -> None:
    (doc,) = kube_docs([spec("db.backup_1", command="pg_dump db", cron="0 3 * * *", timezone="Europe/Berlin",
                             cwd="/srv", env={"A": "$(B) $$"}, timeout=1799.5, kill_grace=15.0, retries=3,
                             overlap=Overlap.REPLACE, catchup=Catchup.SKIP, starting_deadline=300.0, paused=True)])
    assert re.fullmatch(r"db-backup-1-[0-9a-f]{6}", doc["metadata"]["name"])
    assert doc["metadata"]["annotations"]["cronctl/job"] == "db.backup_1"
    cron = doc["spec"]
    assert (cron["concurrencyPolicy"], cron["startingDeadlineSeconds"], cron["suspend"]) == ("Replace", 300, True)
    job = cron["jobTemplate"]["spec"]
    assert (job["backoffLimit"], job["activeDeadlineSeconds"]) == (3, 1800)
    pod = job["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 15
    (container,) = pod["containers"]
    assert container["command"] == ["/bin/sh", "-c"] and container["args"] == ["pg_dump db"]
    assert container["workingDir"] == "/srv"
    # Kubernetes expands $(NAME) and reads $$ as $: every $ is doubled.
    assert container["env"] == [{"name": "A", "value": "$$(B) $$$$"}]


def test_concurrency_policy_follows_overlap() -> None:
    docs = kube_docs([spec(f"o-{o.value}", cron="* * * * *", overlap=o) for o in Overlap])
    assert [d["spec"]["concurrencyPolicy"] for d in docs] == ["Forbid", "Allow", "Replace"]


def test_kubernetes_omits_what_a_cronjob_cannot_schedule_and_says_why() -> None:
    jobs = [spec("both-days", cron="15 0 */2 * 1-5"), spec("odd", every=420.0),
            spec("once", at=datetime(2027, 1, 1, tzinfo=UTC)), spec("grid", every=600.0)]
    result = export_jobs(jobs, "kubernetes", NOW)
    assert set(result.omitted) == {"both-days", "odd", "once"}
    assert [f.name for f in result.files] == ["grid.yaml"]
    assert any("OR" in n for n in result.notes["both-days"])
    assert "*/10 * * * *" in result.files[0].text


def test_dns_names_are_valid_and_distinct() -> None:
    names = ["a.b", "a_b", "a-b", "x" * 64, "0lead"]
    sanitized = [dns_name(n) for n in names]
    assert len(set(sanitized)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", s) and len(s) <= 52 for s in sanitized)


# --- the command --------------------------------------------------------------------------------


def test_cli_export_writes_one_file_per_unit_and_lists_notes_on_stderr(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("add", "backup", "--cron", "0 3 * * *", "--retries", "2", "--", "echo hi").code == 0
    assert cli("add", "other", "--every", "10m", "--", "true").code == 0
    assert cli("pause", "other").code == 0
    out = tmp_path / "units"
    result = cli("export", "--format", "systemd", "-o", str(out))
    assert result.code == 0, result.err
    assert sorted(p.name for p in out.iterdir()) == ["cronctl-backup.service", "cronctl-backup.timer",
                                                      "cronctl-other.service", "cronctl-other.timer"]
    assert "backup: not translated: retries 2" in result.err
    assert "other: not translated: paused" in result.err  # the operator pause is exported too


def test_cli_export_of_named_jobs_to_stdout(cli) -> None:  # type: ignore[no-untyped-def]
    cli("add", "a", "--cron", "*/5 * * * *", "--", "true")
    cli("add", "b", "--cron", "0 1 * * *", "--", "true")
    result = cli("export", "--format", "kubernetes", "b")
    assert result.code == 0
    docs = list(yaml.safe_load_all(result.out))
    assert [d["metadata"]["name"] for d in docs] == ["b"]
    crontab = cli("export", "--format", "crontab", "--json")
    assert crontab.code == 0 and "*/5 * * * *" in crontab.json()["files"][0]["text"]


def test_cli_export_unknown_job_or_format_fails(cli) -> None:  # type: ignore[no-untyped-def]
    cli("add", "a", "--cron", "*/5 * * * *", "--", "true")
    missing = cli("export", "--format", "crontab", "nope")
    assert missing.code == 1 and "nope" in missing.err
    bad = cli("export", "--format", "nomad")
    assert bad.code == 2 and "crontab, systemd, kubernetes" in bad.err


def test_cli_export_from_a_jobs_file_does_not_need_the_store(cli, tmp_path: Path, home: Path) -> None:  # type: ignore[no-untyped-def]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text('jobs:\n  - name: x\n    cron: "0 0 * * *"\n    command: "true"\n')
    result = cli("export", "--format", "crontab", "-f", str(jobs))
    assert result.code == 0 and "0 0 * * * " in result.out
    assert not (home / "jobs.json").exists()


# --- systemd-service: a unit for the loop itself ---------------------------------------------------


def loop_unit(tmp_path: Path, specs: list[JobSpec], jobs_file: Path | None = None) -> str:
    import sys

    from cronctl.interop.export.service import LoopSetup

    setup = LoopSetup((sys.executable, "-m", "cronctl"), tmp_path / "my home", jobs_file)
    result = export_jobs(specs, "systemd-service", NOW, setup)
    assert [item.name for item in result.files] == ["cronctl.service"] and result.notes == {}
    return result.files[0].text


def unit_settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))


def test_the_loop_unit_is_a_notify_service_restarted_always(tmp_path: Path) -> None:
    import sys

    jobs = tmp_path / "jobs.yaml"
    settings = unit_settings(loop_unit(tmp_path, [JobSpec(name="a", command="true", cron="* * * * *")], jobs))
    assert settings["Type"] == "notify" and settings["Restart"] == "always"
    assert settings["KillMode"] == "mixed" and settings["WatchdogSec"] == "60s"
    assert settings["NotifyAccess"] == "main"
    # The home in use (a space in it is quoted) and the watched file go to `run`.
    assert settings["ExecStart"] == f'{sys.executable} -m cronctl --home "{tmp_path / "my home"}" run -f {jobs}'


def test_the_stop_timeout_covers_the_largest_kill_grace_and_the_drain(tmp_path: Path) -> None:
    from cronctl.interop.export.service import DRAIN_BOUND, SHUTDOWN_BOUND
    from cronctl.loop.engine import EngineOptions

    specs = [JobSpec(name="short", command="true", cron="* * * * *", kill_grace=5.0),
             JobSpec(name="long", command="true", cron="* * * * *", kill_grace=300.0)]
    stop = unit_settings(loop_unit(tmp_path, specs))["TimeoutStopSec"]
    assert stop.endswith("s") and float(stop[:-1]) > 300.0 + DRAIN_BOUND + SHUTDOWN_BOUND
    # The bounds named in the unit are the loop's own: its drain, and the 10 s of Engine.shutdown.
    assert DRAIN_BOUND >= EngineOptions().drain_timeout
    assert float(unit_settings(loop_unit(tmp_path, []))["TimeoutStopSec"][:-1]) > DRAIN_BOUND + SHUTDOWN_BOUND


@needs_systemd
def test_systemd_analyze_verify_accepts_the_loop_unit(tmp_path: Path) -> None:
    specs = [JobSpec(name="a", command="true", cron="* * * * *", kill_grace=45.0)]
    (tmp_path / "cronctl.service").write_text(loop_unit(tmp_path, specs, tmp_path / "jobs.yaml"), encoding="utf-8")
    done = subprocess.run([SYSTEMD_ANALYZE, "verify", "--man=no", "cronctl.service"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if "cronctl" in line] == []


def test_export_systemd_service_from_the_cli_names_the_home_in_use(cli, home: Path) -> None:  # type: ignore[no-untyped-def]
    assert cli("add", "tick", "--cron", "* * * * *", "--kill-grace", "90s", "--", "true").code == 0
    result = cli("export", "--format", "systemd-service")
    assert result.code == 0, result.err
    settings = unit_settings(result.out)
    assert f"--home {home}" in settings["ExecStart"] and settings["ExecStart"].endswith(" run")
    assert float(settings["TimeoutStopSec"][:-1]) > 90
