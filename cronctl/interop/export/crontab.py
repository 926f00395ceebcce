"""Export to one crontab(5) file: one line per job, as Debian's cron and cronie read it.

Fields with a shell equivalent are written into the command: cwd as `cd`, env
as `export`, jitter as a `sleep` of the job's own stable offset, timeout and
kill_grace as timeout(1), overlap `skip` as `flock -n`. The rest is listed.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import datetime, timezone

from cronctl.durations import format_duration
from cronctl.interop.export.base import ExportFile, ExportResult, comment_block, shared_notes
from cronctl.interop.export.chains import chain_note
from cronctl.interop.translate import cron_text, debian_gap_notes, every_cron, seconds_text
from cronctl.models import Catchup, JobSpec, Overlap
from cronctl.schedule.cronexpr import parse_cron
from cronctl.schedule.intervals import jitter_offset

FILE_NAME = "cronctl.crontab"

HEADER = [
    "cronctl jobs for crontab(5), written by `cronctl export --format crontab`.",
    "Install as a user's crontab (`crontab FILE`): five time fields, no user field.",
    "CRON_TZ sets the zone of the lines after it; cronie honours it, Debian's cron ignores it and reads",
    "every line in the system's zone (then keep the host on UTC, or convert the times).",
    "Runs get none of cronctl's CRONCTL_* variables; their output is mailed (MAILTO), not kept in run logs.",
    "Each job's untranslated fields are listed above its line.",
]


def export_crontab(specs: Sequence[JobSpec], now: datetime) -> ExportResult:
    result = ExportResult("crontab")
    lines = comment_block(HEADER) + ["CRON_TZ=UTC"]
    zone = "UTC"
    for spec in specs:
        schedule, job_zone, notes = _schedule(spec, now)
        command = _command(spec)
        notes += _field_notes(spec)
        result.notes[spec.name] = notes
        lines += [""] + comment_block([f"job {spec.name}: {spec.schedule_text} ({spec.timezone})"])
        lines += comment_block([f"  not translated: {note}" for note in notes])
        active = schedule is not None and not spec.paused
        if job_zone != zone and active:
            lines.append(f"CRON_TZ={job_zone}")
            zone = job_zone
        entry = f"{schedule or '(no cron schedule)'} {command}"
        lines.append(entry if active else "# " + entry)
        if schedule is None:
            result.omitted.append(spec.name)
    result.files.append(ExportFile(FILE_NAME, "\n".join(lines) + "\n"))
    return result


def _schedule(spec: JobSpec, now: datetime) -> tuple[str | None, str, list[str]]:
    """The five fields, the zone they are read in, and what does not carry over."""
    if spec.after:
        return None, "UTC", [chain_note(spec, "crontab")]
    if spec.cron is not None:
        expr = parse_cron(spec.cron)
        text = cron_text(expr, star_prefix_is_star=True)
        if text is None:
            return None, spec.timezone, [f"cron {spec.cron!r}: no crontab spelling keeps its day rule; "
                                         "line commented out"]
        # cron_text keeps the first character of minute and hour, so Debian's cron reads the line with
        # the same DST rule; only its repeated catch-up of a gap differs.
        return text, spec.timezone, _zone_notes(spec) + debian_gap_notes(expr, spec.timezone, now)
    if spec.every is not None:
        every = format_duration(spec.every)
        grid = every_cron(spec.every)
        if grid is None:
            note = (f"every {every}: cron only fires on a grid that divides an hour or a day, "
                    "in whole minutes; line commented out")
            return None, "UTC", [note]
        note = (f"every {every}: written as the clock grid {grid!r} (UTC); cronctl counts the "
                "interval from the job's creation, so the phase differs")
        return grid, "UTC", [note]
    assert spec.at is not None
    at = spec.at.astimezone(timezone.utc)
    note = (f"at {at.isoformat()}: a crontab line has no year and would fire every year; "
            "line commented out (a one-shot is `at(1)`'s job)")
    return None, "UTC", [note]


def _zone_notes(spec: JobSpec) -> list[str]:
    if spec.timezone == "UTC":
        return []
    return [f"timezone {spec.timezone}: written as CRON_TZ, which Debian's cron ignores (cronie honours it)"]


def _command(spec: JobSpec) -> str:
    """The command field, with the fields that have a shell equivalent folded in."""
    core = spec.command if isinstance(spec.command, str) else shlex.join(spec.command)
    parts = []
    if spec.jitter:
        parts.append(f"sleep {seconds_text(jitter_offset(spec.name, spec.jitter))};")
    if spec.cwd:
        parts.append(f"cd {shlex.quote(spec.cwd)} || exit 1;")
    if spec.env:
        parts.append("export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(spec.env.items())) + ";")
    runner = _runner(spec)
    if runner:
        argv = runner + (["/bin/sh", "-c", core] if isinstance(spec.command, str) else list(spec.command))
        core = shlex.join(argv)
    line = " ".join([*parts, core])
    if "\n" in line or "\r" in line or "\\%" in line:
        line = printf_wrapped(line)
    # crontab(5): an unescaped % ends the command and starts its standard input.
    return line.replace("%", "\\%")


def printf_wrapped(script: str) -> str:
    """`script` run by /bin/sh, spelt without line breaks and without `%`.

    A crontab line ends at a line break, and cron cannot pass a backslash
    right before a `%`; printf's octal escapes carry both, and every `%`.
    """
    encoded = []
    for char in script:
        if char in "\\%'" or ord(char) < 0x20 or ord(char) == 0x7F:
            encoded.append(f"\\{ord(char):03o}")
        else:
            encoded.append(char)
    return "/bin/sh -c \"$(printf '" + "".join(encoded) + "')\""


def _runner(spec: JobSpec) -> list[str]:
    runner: list[str] = []
    if spec.overlap is Overlap.SKIP:
        # -E 0: a run skipped because the last one still runs is not a failure (cron would mail it).
        runner += ["flock", "-n", "-E", "0", f"/run/lock/cronctl-{spec.name}.lock"]
    if spec.timeout > 0:
        timeout = f"{seconds_text(spec.timeout)}s"
        if spec.kill_grace > 0:
            runner += ["timeout", "-k", f"{seconds_text(spec.kill_grace)}s", timeout]
        else:
            runner += ["timeout", "-s", "KILL", timeout]
    return runner


def _field_notes(spec: JobSpec) -> list[str]:
    notes = []
    if spec.overlap is Overlap.REPLACE:
        notes.append("overlap replace: cron cannot end the previous run; it starts the new one beside it")
    if spec.catchup is Catchup.LATEST:
        notes.append("catchup latest: cron does not run slots missed while it (or the host) was down")
    if spec.starting_deadline is not None:
        notes.append(f"starting_deadline {format_duration(spec.starting_deadline)}: cron has no late starts")
    if spec.retries:
        notes.append(f"retries {spec.retries} (retry_delay {format_duration(spec.retry_delay)}): "
                     "cron does not retry a failed run")
    if spec.on_failure is not None:
        notes.append("on_failure: cron runs nothing on failure; it mails the run's output to MAILTO")
    if spec.paused:
        notes.append("paused: the line is commented out")
    return notes + shared_notes(spec, "cron")
