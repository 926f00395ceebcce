"""Export to systemd: a oneshot service and a timer per job (plus an OnFailure= unit).

Quoting follows systemd.syntax(7) and systemd.service(5): every argument is
double-quoted with C escapes, `%` is doubled (specifiers) and, in ExecStart=,
`$` is doubled (variable expansion).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from cronctl.durations import format_duration
from cronctl.interop.export.base import ExportFile, ExportResult, comment_block, shared_notes
from cronctl.interop.export.chains import chain_note, maps_to_on_success, on_success_targets, untriggered
from cronctl.interop.oncalendar import at_oncalendar, every_oncalendar, oncalendar_lines
from cronctl.interop.translate import dst_notes
from cronctl.models import Catchup, JobSpec, Overlap
from cronctl.schedule.cronexpr import parse_cron

# Arguments made only of these need no quotes (and hold no `$`, `%` or `\`).
_PLAIN = re.compile(r"[A-Za-z0-9_+=:,./@-]+")
# cronctl gives on_failure at most this long (README).
ON_FAILURE_TIMEOUT = "5min"


def unit_names(name: str) -> tuple[str, str, str]:
    """(service, timer, on-failure service). The `cronctl_` prefix of the last cannot
    clash with any job's `cronctl-NAME` unit."""
    return f"cronctl-{name}.service", f"cronctl-{name}.timer", f"cronctl_on-failure-{name}.service"


def export_systemd(specs: Sequence[JobSpec], now: datetime) -> ExportResult:
    result = ExportResult("systemd")
    followers = on_success_targets(specs)
    stranded = untriggered(specs)
    for spec in specs:
        schedule, notes = _timer_lines(spec, now)
        notes += _field_notes(spec) + shared_notes(spec, "systemd")
        if spec.name in stranded:
            # A unit nothing would ever start is no translation: listed, and not written. (Its
            # first note, from _timer_lines, is the one about its chain edge: replaced by why.)
            result.notes[spec.name] = [stranded[spec.name], *notes[1:]]
            result.omitted.append(spec.name)
            continue
        result.notes[spec.name] = notes
        service, timer, failure = unit_names(spec.name)
        result.files.append(ExportFile(service, _service(spec, notes, followers.get(spec.name, []))))
        if not spec.after:  # a dependant is started by its upstream's OnSuccess=, or by hand
            result.files.append(ExportFile(timer, _timer(spec, schedule)))
        if spec.on_failure is not None:
            result.files.append(ExportFile(failure, _failure_service(spec)))
    return result


# --- service ------------------------------------------------------------------------------


def _service(spec: JobSpec, notes: list[str], on_success: list[str]) -> str:
    service, timer, failure = unit_names(spec.name)
    lines = comment_block([f"{service}: cronctl job {spec.name}, written by `cronctl export --format systemd`.",
                           f"Started by {timer}; install both (and enable the timer), e.g. in /etc/systemd/system.",
                           "System units run as root: add User= to run as the user of `cronctl run`."])
    if notes:
        lines += comment_block(["Not translated:"] + [f"  - {note}" for note in notes])
    lines += ["[Unit]", f"Description=cronctl job {spec.name}"]
    lines += comment_block(["cronctl never refuses a slot for coming too often; the default start limit would."])
    lines.append("StartLimitIntervalSec=0")
    if spec.on_failure is not None:
        lines.append(f"OnFailure={failure}")
    if on_success:
        lines += comment_block(["The jobs that run after this one (cronctl `after:`); OnSuccess= needs systemd 249."])
        lines.append("OnSuccess=" + " ".join(unit_names(name)[0] for name in on_success))
    lines += ["", "[Service]", "Type=oneshot", f"ExecStart={exec_line(spec.command)}"]
    if spec.cwd:
        lines.append(f"WorkingDirectory={_specifiers(spec.cwd)}")
    lines += [f"Environment={_env_assignment(k, v)}" for k, v in sorted(spec.env.items())]
    lines += _kill_lines(spec)
    return "\n".join(lines) + "\n"


def _kill_lines(spec: JobSpec) -> list[str]:
    # A oneshot's start timeout is off by default; cronctl's timeout bounds the run.
    lines = [f"TimeoutStartSec={span(spec.timeout) if spec.timeout > 0 else 'infinity'}",
             "KillMode=control-group"]
    if spec.kill_grace > 0:
        lines.append(f"TimeoutStopSec={span(spec.kill_grace)}")
    else:
        # TimeoutStopSec=0 would mean "wait forever"; kill_grace 0 means SIGKILL at once.
        lines.append("KillSignal=SIGKILL")
    return lines


def _failure_service(spec: JobSpec) -> str:
    service, _, failure = unit_names(spec.name)
    assert spec.on_failure is not None
    lines = comment_block([f"{failure}: on_failure of cronctl job {spec.name}, started by OnFailure= of {service}."])
    lines += ["[Unit]", f"Description=on_failure of cronctl job {spec.name}", "",
              "[Service]", "Type=oneshot", f"ExecStart={exec_line(spec.on_failure)}"]
    if spec.cwd:
        lines.append(f"WorkingDirectory={_specifiers(spec.cwd)}")
    lines += [f"Environment={_env_assignment(k, v)}" for k, v in sorted(spec.env.items())]
    lines += [f"Environment={_env_assignment('CRONCTL_JOB', spec.name)}",
              f"TimeoutStartSec={ON_FAILURE_TIMEOUT}", "KillMode=control-group"]
    return "\n".join(lines) + "\n"


def exec_line(command: str | tuple[str, ...]) -> str:
    """An ExecStart= value running `command` as cronctl would."""
    if isinstance(command, str):
        argv = ["/bin/sh", "-c", command]
    elif command[0].startswith("/"):
        argv = list(command)
    else:
        # systemd looks bare names up in a fixed path and refuses `./x`; env(1) uses
        # $PATH and the working directory, as cronctl does.
        argv = ["/usr/bin/env", *command]
    return " ".join(exec_arg(arg) for arg in argv)


def exec_arg(arg: str) -> str:
    if _PLAIN.fullmatch(arg):
        return arg
    return '"' + _c_escape(arg).replace("$", "$$").replace("%", "%%") + '"'


def _env_assignment(name: str, value: str) -> str:
    # In Environment= `$` is literal; only specifiers and C escapes apply.
    return '"' + _c_escape(f"{name}={value}").replace("%", "%%") + '"'


def _specifiers(text: str) -> str:
    return text.replace("%", "%%")


def _c_escape(text: str) -> str:
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def span(seconds: float) -> str:
    """A systemd time span, exact to the millisecond."""
    millis = round(seconds * 1000)
    if millis % 1000:
        return f"{millis}ms"
    return f"{millis // 1000}s"


# --- timer --------------------------------------------------------------------------------


def _timer(spec: JobSpec, schedule: list[str]) -> str:
    service, timer, _ = unit_names(spec.name)
    lines = comment_block([(f"{timer}: schedule of cronctl job {spec.name} ({spec.schedule_text}, "
                            f"{spec.timezone}); untranslated fields are listed in {service}.")])
    if spec.paused:
        lines += comment_block(["The job is paused in cronctl: leave this timer disabled until it is resumed."])
    lines += ["[Unit]", f"Description=Schedule of cronctl job {spec.name}", "", "[Timer]", f"Unit={service}"]
    lines += schedule
    if spec.every is None or any(line.startswith("OnCalendar=") for line in schedule):
        lines.append(f"Persistent={'true' if spec.catchup is Catchup.LATEST else 'false'}")
    lines.append("AccuracySec=1s" if spec.every is None or spec.every >= 10 else "AccuracySec=1ms")
    if spec.jitter > 0:
        lines += [f"RandomizedDelaySec={span(spec.jitter)}", "FixedRandomDelay=true"]
    lines += ["", "[Install]", "WantedBy=timers.target"]
    return "\n".join(lines) + "\n"


def _timer_lines(spec: JobSpec, now: datetime) -> tuple[list[str], list[str]]:
    """The [Timer] schedule lines and what they do not carry over."""
    if spec.after:
        if maps_to_on_success(spec):
            upstream = unit_names(spec.after[0])[0]
            return [], [f"after {spec.after[0]}: started by OnSuccess= of {upstream} (no timer); "
                        "systemd gives it no chain id and does not skip it when its upstream fails"]
        return [], [chain_note(spec, "systemd")]
    if spec.cron is not None:
        expr = parse_cron(spec.cron)
        # What systemd does (checked with systemd-analyze calendar, systemd 252): a wall time that a
        # gap skips matches nothing, the next match is the next day's; a repeated one matches once,
        # in the first pass, because each next elapse is computed from the previous trigger.
        notes = dst_notes(expr, spec.timezone, now, "systemd",
                          "skips wall times that do not exist: no run for them that day",
                          "cronctl fires this wildcard schedule (minute or hour begins with '*') at the "
                          "repeated wall times in both passes, as Debian's cron does; systemd fires each once, "
                          "in the first pass",
                          fold_matters=not expr.fixed_time)
        return [f"OnCalendar={line}" for line in oncalendar_lines(expr, spec.timezone)], notes
    if spec.every is not None:
        every = format_duration(spec.every)
        grid = every_oncalendar(spec.every)
        if grid is not None:
            note = (f"every {every}: written as the clock grid {grid!r}; cronctl counts "
                    "the interval from the job's creation, so the phase differs")
            return [f"OnCalendar={grid}"], [note]
        note = (f"every {every}: OnUnitActiveSec= counts from each run's start, so slots drift by the start "
                "latency, and the count restarts at boot (OnBootSec=)")
        return [f"OnBootSec={span(spec.every)}", f"OnUnitActiveSec={span(spec.every)}"], [note]
    assert spec.at is not None
    return [f"OnCalendar={at_oncalendar(spec.at)}"], []


def _field_notes(spec: JobSpec) -> list[str]:
    notes = []
    if spec.overlap is not Overlap.SKIP:
        notes.append(f"overlap {spec.overlap.value}: systemd never starts a unit that is still running, "
                     "so a slot that comes while it runs is dropped (as with skip)")
    if spec.every is not None and spec.catchup is Catchup.LATEST and every_oncalendar(spec.every) is None:
        notes.append("catchup latest: interval timers do not catch up after downtime; the first run comes "
                     "one interval after boot")
    if spec.starting_deadline is not None:
        persistent = "; Persistent=true fires a missed slot however late" if spec.catchup is Catchup.LATEST else ""
        notes.append(f"starting_deadline {format_duration(spec.starting_deadline)}: systemd has no late-start "
                     "limit" + persistent)
    if spec.retries:
        notes.append(f"retries {spec.retries} (retry_delay {format_duration(spec.retry_delay)}): a timer starts "
                     "the service once per slot; systemd does not retry a failed oneshot run")
    if spec.jitter > 0:
        notes.append(f"jitter {format_duration(spec.jitter)}: FixedRandomDelay= keeps a stable delay below it, "
                     "but not the same one as cronctl's")
    if spec.on_failure is not None:
        notes.append(f"on_failure: runs as {unit_names(spec.name)[2]} (OnFailure=), which sees "
                     "MONITOR_SERVICE_RESULT, MONITOR_EXIT_CODE, MONITOR_EXIT_STATUS instead of CRONCTL_STATUS, "
                     "CRONCTL_EXIT_CODE, CRONCTL_LOG")
    if spec.paused:
        notes.append("paused: a unit file has no pause; leave the timer disabled")
    return notes
