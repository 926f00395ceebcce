"""`cronctl import-crontab`: crontab(5) lines as cronctl job entries, read as Debian's cron reads them.

Every line that is not imported as it was meant is reported with its number:
skipped lines (with the reason) and notes (what was translated differently or
not at all, including where Debian's cron would run a job differently across
a DST change). Nothing is dropped silently. Rendering the YAML file lives in
crontab_yaml.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cronctl.errors import CronctlError
from cronctl.interop.translate import debian_gap_notes
from cronctl.jobs.jobfile import ENV_NAME_RE, build_spec
from cronctl.jobs.notifyfields import check_notify
from cronctl.models import NAME_MAX, NAME_RE
from cronctl.schedule.cronexpr import parse_cron
from cronctl.schedule.zones import check_timezone

DEFAULT_SHELLS = ("/bin/sh", "/usr/bin/sh")
MAIL_VARS = ("MAILTO", "MAILFROM", "CONTENT_TYPE", "CONTENT_TRANSFER_ENCODING")
ZONE_VARS = ("CRON_TZ", "TZ")

# crontab(5): `name = value`, spaces around `=` optional, name and value optionally quoted.
_ENV_LINE = re.compile(r"""^\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)'|(?P<bare>[^\s="']+))\s*=\s*(?P<value>.*)$""")
_FIELD = re.compile(r"\s*(\S+)")


@dataclass(frozen=True)
class Skipped:
    line: int
    text: str
    reason: str


@dataclass(frozen=True)
class Note:
    line: int
    message: str


@dataclass(frozen=True)
class ImportedJob:
    line: int
    text: str
    entry: dict[str, Any]  # YAML-shaped fields, already validated by config.build_spec
    user: str | None = None
    zone_given: bool = False  # its zone came from a CRON_TZ/TZ line, not --timezone or the host's


@dataclass
class ImportResult:
    source: str
    default_zone: str
    jobs: list[ImportedJob] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "timezone": self.default_zone,
            "jobs": [{"line": j.line, "name": j.entry["name"], "user": j.user} for j in self.jobs],
            "skipped": [{"line": s.line, "text": s.text, "reason": s.reason} for s in self.skipped],
            "notes": [{"line": n.line, "message": n.message} for n in self.notes],
        }


@dataclass
class _Scope:
    """What the lines above a job set for it: env, zone and shell, in crontab order."""

    zone: str
    env: dict[str, str] = field(default_factory=dict)
    zone_error: int | None = None  # line of an unusable CRON_TZ/TZ; its jobs are skipped
    shell: str = "/bin/sh"
    zone_given: bool = False  # a CRON_TZ/TZ line above sets the zone (else the default one)
    mailto: str | None = None  # MAILTO: the jobs below mail their output (an `email` notification)


def import_crontab(text: str, source: str, *, user_field: bool = False, prefix: str = "",
                   default_zone: str = "UTC", now: datetime | None = None) -> ImportResult:
    """Translate crontab text; `user_field` for /etc/crontab and /etc/cron.d files.

    `now` places the DST changes whose handling is compared with Debian's cron
    (the two years after it; default: the current time).
    """
    check_prefix(prefix)
    now = now or datetime.now(timezone.utc)
    result = ImportResult(source=source, default_zone=default_zone)
    scope = _Scope(zone=default_zone)
    names: set[str] = set()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for number, raw in enumerate(lines, start=1):
        line = raw.removesuffix("\r")
        if line != raw:
            result.notes.append(Note(number, "carriage return at the end of the line dropped"))
        _import_line(number, line, scope, result, names, user_field, prefix, now)
    if not user_field:
        _hint_user_field(result)
    return result


def _hint_user_field(result: ImportResult) -> None:
    """A system crontab read without --user-field turns every user name into a command."""
    import pwd

    programs = {_first_word(job.entry["command"]) for job in result.jobs}
    # Some system users share a name with a command (`sync`, `backup`); root is the tell.
    if "root" not in programs:
        return
    try:
        for program in programs:
            pwd.getpwnam(program)
    except KeyError:
        return
    result.notes.append(Note(0, f"every command starts with a user name ({', '.join(sorted(programs))}): this looks "
                             "like /etc/crontab or /etc/cron.d format; import it with --user-field"))


def _first_word(command: str | list[str]) -> str:
    text = command if isinstance(command, str) else command[-1]
    words = text.split()
    return words[0] if words else ""


def host_zone() -> str:
    """The zone cron reads lines without CRON_TZ in: this host's, else UTC."""
    candidates = [os.environ.get("TZ", "").lstrip(":")]
    try:
        candidates.append(Path("/etc/timezone").read_text(encoding="utf-8").strip())
    except OSError:
        pass
    try:
        target = os.readlink("/etc/localtime")
        candidates.append(target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else "")
    except OSError:
        pass
    for candidate in candidates:
        if candidate and "/" in candidate or candidate == "UTC":
            try:
                check_timezone(candidate)
                return candidate
            except CronctlError:
                continue
    return "UTC"


def _import_line(number: int, line: str, scope: _Scope, result: ImportResult, names: set[str],
                 user_field: bool, prefix: str, now: datetime) -> None:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return
    if _has_undecodable(line):
        result.skipped.append(Skipped(number, _printable(line), "not UTF-8 text"))
        return
    env = _ENV_LINE.match(line)
    if env is not None:
        name = env["dq"] if env["dq"] is not None else env["sq"] if env["sq"] is not None else env["bare"]
        _apply_env(number, line, name, _unquote(env["value"]), scope, result)
        return
    job = _job_from_line(number, line, scope, result, user_field, prefix, names, now)
    if job is not None:
        names.add(job.entry["name"])
        result.jobs.append(job)


# --- environment lines ---------------------------------------------------------------


def _unquote(value: str) -> str:
    # Unquoted values lose trailing blanks; quotes (matching) keep them (crontab(5)).
    value = value.rstrip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _apply_env(number: int, line: str, name: str, value: str, scope: _Scope, result: ImportResult) -> None:
    if name == "MAILTO":
        _set_mailto(number, value, scope, result)
        return
    if name in MAIL_VARS:
        result.notes.append(Note(number, f"{name}={value}: not translated: cronctl mails nothing; each run's output "
                                 "is kept in its run log (`cronctl logs`), and `on_failure` can notify"))
        return
    if name in ZONE_VARS:
        _set_zone(number, name, value, scope, result)
        if name == "CRON_TZ":
            return
        result.notes.append(Note(number, f"TZ={value}: taken as the zone of the jobs below, which also see it in "
                                 "their environment (Debian's cron only passes TZ on to the commands)"))
    if name == "SHELL":
        scope.shell = value
        if value not in DEFAULT_SHELLS:
            result.notes.append(Note(number, f"SHELL={value}: the commands below run as [{value}, -c, COMMAND] "
                                     "(cronctl's own shell is /bin/sh)"))
        return
    if not ENV_NAME_RE.match(name) or name.startswith("CRONCTL_"):
        why = "is reserved for cronctl" if name.startswith("CRONCTL_") else "is not a usable variable name"
        result.skipped.append(Skipped(number, _printable(line), f"environment variable {name!r} {why}"))
        return
    if "$" in value:
        result.notes.append(Note(number, f"{name}: cron does not expand variables in {value!r}, and neither "
                                 "does cronctl: the jobs see the text as written"))
    scope.env[name] = value


def _set_zone(number: int, name: str, value: str, scope: _Scope, result: ImportResult) -> None:
    if not value:
        scope.zone, scope.zone_error, scope.zone_given = result.default_zone, None, False
        return
    try:
        check_timezone(value)
    except CronctlError as exc:
        result.skipped.append(Skipped(number, f"{name}={value}", f"{exc}; the jobs below it are skipped "
                                      "until the next valid CRON_TZ/TZ line"))
        scope.zone_error = number
        return
    scope.zone, scope.zone_error, scope.zone_given = value, None, True


# --- job lines -----------------------------------------------------------------------


def _job_from_line(number: int, line: str, scope: _Scope, result: ImportResult, user_field: bool,
                   prefix: str, names: set[str], now: datetime) -> ImportedJob | None:
    parsed = _split_job(line, user_field)
    if isinstance(parsed, str):
        result.skipped.append(Skipped(number, _printable(line), parsed))
        return None
    schedule, user, command_text = parsed
    problem = _schedule_problem(schedule, scope)
    if problem is not None:
        result.skipped.append(Skipped(number, _printable(line), problem))
        return None
    command, stdin = split_percent(command_text)
    if not command.strip():
        result.skipped.append(Skipped(number, _printable(line), "the command is empty"))
        return None
    entry = _entry(schedule, _command(command, stdin, scope.shell), scope,
                   unique_name(prefix, command_text, schedule, names), result.default_zone)
    if user is not None:
        entry["user"] = user  # /etc/crontab and cron.d: the user column runs it as that user (SPEC §13)
    problems: list[str] = []
    build_spec(entry, lambda f: f"line {number}: field '{f}'", problems, source=None, base_dir=Path("/"))
    if problems:
        result.skipped.append(Skipped(number, _printable(line), "; ".join(problems)))
        return None
    # cronctl follows Debian's DST rule except where Debian's cron runs a job more than once.
    for message in debian_gap_notes(parse_cron(schedule), scope.zone, now):
        result.notes.append(Note(number, message))
    return ImportedJob(number, line, entry, user, scope.zone_given)


def _split_job(line: str, user_field: bool) -> tuple[str, str | None, str] | str:
    """(schedule, user, command) or the reason the line is not a job."""
    count = 1 if line.lstrip().startswith("@") else 5
    wanted = count + (1 if user_field else 0)
    fields: list[str] = []
    position = 0
    for _ in range(wanted):
        match = _FIELD.match(line, position)
        if match is None:
            break
        fields.append(match[1])
        position = match.end()
    command = line[position:].lstrip(" \t")
    if len(fields) < wanted or not command:
        shape = "@macro" if count == 1 else "5 time fields"
        with_user = ", a user" if user_field else ""
        return f"not a job line: expected {shape}{with_user} and a command, or NAME=VALUE"
    user = fields[count] if user_field else None
    return " ".join(fields[:count]), user, command


def _schedule_problem(schedule: str, scope: _Scope) -> str | None:
    try:
        parse_cron(schedule)
    except CronctlError as exc:
        return str(exc)
    if scope.zone_error is not None:
        return f"its time zone (line {scope.zone_error}) is unknown"
    return None


def split_percent(text: str) -> tuple[str, str | None]:
    """crontab(5) `%`: the command, and its standard input (None when there is no `%`).

    A port of Debian cron's do_command.c: in the command, `\\%` is a literal `%`
    and the first other `%` ends it; in the input, `%` is a line break and `\\%`
    a literal `%`. Other backslashes stay as they are.
    """
    command: list[str] = []
    escaped = False
    for index, char in enumerate(text):
        if escaped:
            if char == "%":
                command[-1] = "%"
            else:
                command.append(char)
            escaped = False
            continue
        if char == "%":
            return "".join(command), _stdin_text(text[index + 1:])
        command.append(char)
        escaped = char == "\\"
    return "".join(command), None


def _stdin_text(data: str) -> str:
    out: list[str] = []
    escaped = False
    for char in data:
        if escaped:
            if char != "%":
                out.append("\\")
        elif char == "%":
            char = "\n"
        escaped = char == "\\"
        if not escaped:
            out.append(char)
    if escaped:
        out.append("\\")
    return "".join(out)


def _command(command: str, stdin: str | None, shell: str) -> str | list[str]:
    if stdin is not None:
        # The whole command reads the input, as under cron: a group, not just its first word.
        command = f"printf '%s' {shlex.quote(stdin)} | {{\n{command}\n}}"
    if shell in DEFAULT_SHELLS:
        return command
    return [shell, "-c", command]


def _entry(schedule: str, command: str | list[str], scope: _Scope, name: str, default_zone: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "cron": schedule, "command": command}
    if scope.zone != default_zone:
        entry["timezone"] = scope.zone
    if scope.env:
        entry["env"] = dict(scope.env)
    if scope.mailto:
        entry["notify"] = [{"email": address, "on": ["output"]} for address in _addresses(scope.mailto)]
    return entry


def _set_mailto(number: int, value: str, scope: _Scope, result: ImportResult) -> None:
    """cron mails a run's output to MAILTO: the same as an `email` notification on `output`
    (SPEC §12), sent through $CRONCTL_SMTP or sendmail. MAILTO="" mails nobody."""
    value = value.strip().strip("\"'")
    try:
        check_notify([{"email": address} for address in _addresses(value)])
    except CronctlError as exc:
        scope.mailto = None
        result.notes.append(Note(number, f"MAILTO={value}: not translated ({exc}); the jobs below mail nothing"))
        return
    scope.mailto = value or None
    if value:
        result.notes.append(Note(number, f"MAILTO={value}: the jobs below mail their output to "
                                 f"{', '.join(_addresses(value))} (notify: email on output); the loop sends "
                                 "through $CRONCTL_SMTP, or sendmail"))


def _addresses(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


# --- names ---------------------------------------------------------------------------


def check_prefix(prefix: str) -> None:
    if prefix and (not NAME_RE.match(prefix) or len(prefix) > NAME_MAX - 16):
        raise CronctlError(f"--prefix {prefix!r}: use lowercase letters, digits, '.', '_' or '-', starting with "
                           f"a letter or digit, at most {NAME_MAX - 16} characters")


def unique_name(prefix: str, command: str, schedule: str, taken: set[str]) -> str:
    """`[prefix-]program-schedule` (`backup-daily-0300`), readable and stable when other
    lines move; the same program on the same schedule is told apart by its command."""
    lead = prefix + ("-" if prefix and prefix[-1] not in "-._" else "")
    when = schedule_slug(schedule)[:24].rstrip("-_")
    slug = program_slug(command)[: NAME_MAX - len(lead) - len(when) - 8].rstrip("-") or "job"
    name = f"{lead}{slug}-{when}"
    if name in taken:
        name = f"{name}-{_digest(command)[:4]}"
    base, count = name, 2
    while name in taken:
        name = f"{base}-{count}"
        count += 1
    return name


_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat", "sun")


def schedule_slug(schedule: str) -> str:
    """A cron schedule as a name part: `*/5 * * * *` -> `every-5m`, `0 3 * * *` -> `daily-0300`,
    `30 2 * * 1` -> `mon-0230`, `0 0 1 * *` -> `monthly-1-0000`; else the fields themselves."""
    text = " ".join(schedule.split()).lower()
    if text.startswith("@"):
        return text[1:]
    fields = text.split(" ")
    if len(fields) != 5:
        return "cron"
    minute, hour, day, month, weekday = fields
    rest_any = (day, month, weekday) == ("*", "*", "*")
    if rest_any and hour == "*":
        if minute == "*":
            return "every-minute"
        if re.fullmatch(r"\*/\d+", minute):
            return f"every-{minute[2:]}m"
        if minute.isdigit():
            return f"hourly-{int(minute):02d}"
    if minute.isdigit() and hour.isdigit():
        clock = f"{int(hour):02d}{int(minute):02d}"
        if rest_any:
            return f"daily-{clock}"
        if (day, month) == ("*", "*") and weekday.isdigit() and int(weekday) <= 7:
            return f"{_DAYS[int(weekday)]}-{clock}"
        if (day, month) == ("*", "*") and weekday in _DAYS:
            return f"{weekday}-{clock}"
        if (day, month) == ("*", "*") and weekday in ("1-5", "mon-fri"):
            return f"weekdays-{clock}"
        if day.isdigit() and (month, weekday) == ("*", "*"):
            return f"monthly-{int(day)}-{clock}"
    spelled = (f.replace("*/", "every").replace("*", "x").replace("/", "by").replace(",", ".") for f in fields)
    words = [re.sub(r"[^a-z0-9.-]+", ".", word).strip(".-") or "x" for word in spelled]
    return "_".join(words)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:6]


# Words that only guard or prepare the real program: `cd / && run-parts ...`.
_GUARDS = {"cd", "test", "[", "[[", "]", "]]", "true", "false", ":", "export", "set", "umask", "if", "then",
           "else", "elif", "fi", "do", "done", "while", "until", "for", "!", "command", "sleep", "exit",
           "return", "unset", "ulimit", "source", ".", "esac", "case", "in"}
_KEYWORDS = {"if", "then", "else", "elif", "do", "while", "until", "!", "exec", "time"}
# Wrappers whose options (and, for some, one argument) precede the real program.
_WRAPPERS = {"sudo": {"-u", "-g"}, "nice": {"-n"}, "ionice": {"-c", "-n"}, "nohup": set(), "exec": set(),
             "env": set(), "timeout": {"-s", "-k"}, "chronic": set(), "flock": {"-w", "-E"}, "setsid": set(),
             "time": set(), "cronic": set(), "/usr/bin/env": set(), "systemd-cat": {"-t"}}
_INTERPRETERS = {"sh", "bash", "dash", "zsh", "perl", "python", "python3", "ruby", "node", "php", "lua"}
_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", "{", "}", ";;", "|&", "\n"}


def program_slug(command: str) -> str:
    """The program a command line runs, as a name: `cd / && run-parts ...` -> `run-parts`."""
    text = re.sub(r"\$\([^()]*\)|`[^`]*`", " ", command)
    for segment in _segments(text):
        program = _segment_program(segment)
        if program:
            base = os.path.basename(program.rstrip("/"))
            base = re.sub(r"\.(sh|bash|py|pl|rb|php|js)$", "", base.lower())
            slug = re.sub(r"[^a-z0-9]+", "-", base).strip("-")
            if slug:
                return slug
    return "job"


def _segments(text: str) -> list[list[str]]:
    """Simple commands of a shell line, as word lists, split at operators outside quotes."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: fall back to words
        tokens = text.split()
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token in _SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    return [segment for segment in segments if segment]


def _segment_program(words: list[str]) -> str | None:
    index = 0
    while index < len(words):
        word = words[index]
        if word in _KEYWORDS or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", word) or re.match(r"^\d*[<>]", word):
            index += 1
            continue
        if word in _WRAPPERS:
            index = _skip_wrapper(words, index)
            continue
        if word in _GUARDS:
            return None
        if os.path.basename(word) in _INTERPRETERS:
            rest = words[index + 1:]
            if rest and rest[0] in ("-c", "-e", "-E", "-r"):
                return None
            scripts = [w for w in rest if not w.startswith("-")]
            return scripts[0] if scripts else word
        return word
    return None


def _skip_wrapper(words: list[str], index: int) -> int:
    with_value = _WRAPPERS[words[index]]
    wrapper = words[index]
    index += 1
    while index < len(words) and (words[index].startswith("-") or re.fullmatch(r"[\d.]+[smhd]?", words[index])):
        index += 2 if words[index] in with_value else 1
    if wrapper == "flock" and index < len(words):
        index += 1  # the lock file
    return index


# --- text helpers ----------------------------------------------------------------------


def _has_undecodable(text: str) -> bool:
    return any("\udc80" <= char <= "\udcff" for char in text)


def _printable(text: str) -> str:
    return "".join(char if char.isprintable() or char == "\t" else "?" for char in text)
