"""Job definitions from YAML files and CLI options, validated into JobSpecs.

Every problem becomes one message naming the file (and line), the job and the
field; nothing is half-accepted.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Callable

from cronctl.durations import parse_duration
from cronctl.errors import ConfigError, CronctlError
from cronctl.jobs.chainfields import CHAIN_CHECKS, CHAIN_FIELDS, chain_combo_problems
from cronctl.jobs.notifyfields import NOTIFY_CHECKS
from cronctl.jobs.operatorfields import OPERATOR_CHECKS, OPERATOR_FIELDS, STORED_OPERATOR_CHECKS, user_warnings
from cronctl.models import ALERT_FIELDS, NAME_MAX, NAME_RE, Catchup, JobSpec, Overlap
from cronctl.schedule.cronexpr import parse_cron
from cronctl.schedule.intervals import parse_at
from cronctl.schedule.zones import check_timezone
from cronctl.timefmt import to_iso

JOB_FIELDS = (
    "name", "cron", "every", "at", "timezone", "command", "cwd", "env", "timeout",
    "kill_grace", "overlap", "catchup", "starting_deadline", "retries", "retry_delay",
    "repeat", "jitter", "grace", "on_failure", "paused", "after", "requires",
    *OPERATOR_FIELDS,
    *ALERT_FIELDS,
)
# A default applies to every job of the file; a job's own identity and schedule cannot be defaulted.
DEFAULTABLE_FIELDS = tuple(f for f in JOB_FIELDS if f not in ("name", "cron", "every", "at", "command", *CHAIN_FIELDS))
TOP_LEVEL_KEYS = ("defaults", "jobs", "notify")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MIN_EVERY = 0.1
MAX_RETRIES = 100


class FieldProblem(Exception):
    """One bad field value; the caller adds where it was found."""


@dataclass(frozen=True)
class LoadedFile:
    path: Path
    specs: list[JobSpec]
    # job name -> the line of its 'at' field, for warnings that point at it.
    at_lines: dict[str, int] = field(default_factory=dict)

    def warnings(self, now: datetime, done: frozenset[str] = frozenset()) -> list[str]:
        """What is valid but likely a mistake: a one-shot 'at' already past (a loop fires it at once).

        Data, not output: validate and apply print them on stderr, the way `add` warns.
        Jobs named in `done` already fired their one shot, so nothing fires: no warning.
        """
        past = [
            f"{self.path}:{self.at_lines.get(spec.name, 0)}: job '{spec.name}': field 'at': "
            f"{to_iso(spec.at)} is in the past; a running loop fires it at once"
            for spec in self.specs
            if spec.at is not None and spec.at < now and spec.name not in done
        ]
        users = [f"{self.path}: job '{spec.name}': {warning}"
                 for spec in self.specs for warning in user_warnings(spec.user)]
        return past + users


def load_jobs_file(path: str | os.PathLike[str]) -> LoadedFile:
    """Parse and validate a jobs file; raise ConfigError listing every problem."""
    # Normalised ("a/../b.yaml" is b.yaml) but symlinks kept: the path is the jobs' source,
    # and a link that moves to a new release must stay the same source for --prune.
    file_path = Path(os.path.abspath(os.path.expanduser(path)))
    if _text_problem(str(file_path)):
        # Its name is recorded as the jobs' source in the store, which holds UTF-8 text only.
        raise ConfigError([f"{ascii(str(file_path))}: the file name is not valid UTF-8; rename the file"])
    text = _read_text(file_path)
    # Imported here: PyYAML is a fifth of the imports of every command that builds a spec
    # from options (add, edit) or reads specs (list, show), and only a jobs file needs it.
    from cronctl.jobs.yamlfile import parse_yaml

    document = parse_yaml(file_path, text)
    problems: list[str] = []
    at_lines: dict[str, int] = {}
    specs = _specs_from_document(file_path, document, problems, at_lines)
    if problems:
        raise ConfigError(problems)
    return LoadedFile(file_path, specs, at_lines)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{path}: is a directory, not a jobs file"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read: {exc.strerror}"]) from None


def _specs_from_document(path: Path, document: Any, problems: list[str], at_lines: dict[str, int]) -> list[JobSpec]:
    if not isinstance(document, dict):
        problems.append(f"{path}: expected a mapping with a 'jobs' list at the top level")
        return []
    for key in document:
        if key not in TOP_LEVEL_KEYS:
            problems.append(f"{path}:{_line_of(document, key)}: unknown top-level key {key!r} "
                            "(allowed: defaults, jobs, notify)")
    defaults = _check_defaults(path, document.get("defaults"), problems)
    _top_level_notify(path, document, defaults, problems)
    jobs = document.get("jobs")
    if not isinstance(jobs, list):
        problems.append(f"{path}: 'jobs' must be a list of job mappings")
        return []
    specs: list[JobSpec] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(jobs, start=1):
        spec = _spec_from_entry(path, index, raw, defaults, problems)
        if spec is None:
            continue
        line = getattr(raw, "line", 0)
        if spec.name in seen:
            problems.append(f"{path}:{line}: job '{spec.name}': field 'name': duplicate name "
                            f"(first defined at line {seen[spec.name]})")
            continue
        seen[spec.name] = line
        at_lines[spec.name] = _line_of(raw, "at")
        specs.append(spec)
    return specs


def _check_defaults(path: Path, defaults: Any, problems: list[str]) -> dict[str, Any]:
    if defaults is None:
        return {}
    if not isinstance(defaults, dict):
        problems.append(f"{path}: 'defaults' must be a mapping")
        return {}
    valid: dict[str, Any] = {}
    for key, value in defaults.items():
        where = f"{path}:{_line_of(defaults, key)}: defaults: field {key!r}"
        if key not in DEFAULTABLE_FIELDS:
            why = " cannot have a default" if key in JOB_FIELDS else ": unknown field"
            problems.append(f"{where}{why} ({_suggest(str(key), DEFAULTABLE_FIELDS)})")
            continue
        # Checked once here, so a bad default is one problem, not one per job of the file.
        problem = _text_problem(value)
        if problem is None:
            try:
                _CHECKS[key](value)
            except (FieldProblem, CronctlError) as exc:
                problem = str(exc)
        if problem is not None:
            problems.append(f"{where}: {problem}")
            continue
        valid[key] = value
    return valid


def _top_level_notify(path: Path, document: dict[str, Any], defaults: dict[str, Any], problems: list[str]) -> None:
    """The file's `notify:` is every job's default; a job's own `notify:` replaces it (SPEC §12)."""
    if "notify" not in document:
        return
    where = f"{path}:{_line_of(document, 'notify')}: notify"
    if "notify" in defaults:
        problems.append(f"{where}: given both at the top level and in defaults; keep one")
        return
    try:
        defaults["notify"] = NOTIFY_CHECKS["notify"](document["notify"])
    except CronctlError as exc:
        problems.append(f"{where}: {exc}")


def _spec_from_entry(path: Path, index: int, raw: Any, defaults: dict[str, Any], problems: list[str]) -> JobSpec | None:
    line = getattr(raw, "line", 0)
    if not isinstance(raw, dict):
        problems.append(f"{path}: jobs[{index}]: expected a mapping with name, a schedule and command")
        return None
    name = raw.get("name")
    label = f"job '{name}'" if isinstance(name, str) else f"jobs[{index}]"

    def where(field: str) -> str:
        return f"{path}:{_line_of(raw, field) or line}: {label}: field '{field}'"

    merged = {**defaults, **raw}
    return build_spec(merged, where, problems, source=str(path), base_dir=path.parent)


def _line_of(mapping: Any, key: str) -> int:
    line: int = getattr(mapping, "key_lines", {}).get(key, getattr(mapping, "line", 0))
    return line


# --- one validator for YAML entries and CLI options --------------------------


def build_spec(
    raw: dict[str, Any],
    where: Callable[[str], str],
    problems: list[str],
    *,
    source: str | None,
    base_dir: Path | None,
) -> JobSpec | None:
    """Validate every field of one job; append one message per problem.

    `where(field)` says where a field came from (file:line: job: field, or a CLI option).
    """
    before = len(problems)
    for key in raw:
        if key not in JOB_FIELDS:
            problems.append(f"{where(str(key))}: unknown field ({_suggest(str(key), JOB_FIELDS)})")
    values: dict[str, Any] = {}
    for key in JOB_FIELDS:
        if key in raw and key in _CHECKS:
            text_problem = _text_problem(raw[key])
            if text_problem:
                problems.append(f"{where(key)}: {text_problem}")
                continue
            try:
                values[key] = _CHECKS[key](raw[key])
            except FieldProblem as exc:
                problems.append(f"{where(key)}: {exc}")
            except CronctlError as exc:
                problems.append(f"{where(key)}: {exc}")
    _check_required(raw, values, where, problems)
    _check_schedule_combo(raw, values, where, problems)
    if len(problems) > before:
        return None
    if values.get("cwd") is not None and not os.path.isabs(values["cwd"]):
        if base_dir is None:
            problems.append(f"{where('cwd')}: {values['cwd']!r} is relative and the current directory is gone; "
                            "give an absolute path")
            return None
        values["cwd"] = str((base_dir / values["cwd"]).absolute())
    try:
        return JobSpec(source=source, **values)
    except (TypeError, ValueError) as exc:  # a combination the checks above missed
        problems.append(f"{where('name')}: {exc}")
        return None


def spec_field_problem(entry: dict[str, Any]) -> tuple[str, str] | None:
    """(field, problem) for the first bad job field of a stored entry (a hand-edited jobs.json), else None.

    The same checks as a jobs file, so a stored job is held to what `apply` accepts.
    """
    for required in ("name", "command"):
        if required not in entry:
            return required, "missing"
    present = [k for k in ("cron", "every", "at") if entry.get(k) is not None]
    chained = entry.get("after") not in (None, [], ())  # runs after other jobs: no schedule of its own
    if len(present) != (0 if chained else 1):
        wanted = "none of cron, every, at beside after" if chained else "exactly one of cron, every, at"
        return "cron", f"give {wanted} (found {', '.join(present) or 'none'})"
    for key in JOB_FIELDS:
        if key not in entry:
            continue
        try:
            STORED_OPERATOR_CHECKS.get(key, _CHECKS[key])(entry[key])
            if key == "at" and entry[key] is not None:
                parse_at(entry[key], "UTC")
        except (FieldProblem, CronctlError, OverflowError) as exc:
            return key, str(exc)
    source = entry.get("source")
    if source is not None and not isinstance(source, str):
        return "source", f"expected the path of a jobs file or null, got {source!r}"
    return None


def _text_problem(value: Any, depth: int = 0) -> str | None:
    """Strings the store and a child process cannot carry: NUL, and bytes that are not UTF-8.

    Python hands undecodable argv bytes over as lone surrogates; they would only fail
    later, when the store or the audit log is written.
    """
    if depth > 50:
        return "is nested too deeply"
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character"
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"is not valid UTF-8 text ({ascii(value)})"
        return None
    if isinstance(value, dict):
        items: list[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return None
    for item in items:
        problem = _text_problem(item, depth + 1)
        if problem:
            return problem
    return None


def _check_required(raw: dict[str, Any], values: dict[str, Any], where: Callable[[str], str],
                    problems: list[str]) -> None:
    if "name" not in raw:
        problems.append(f"{where('name')}: missing (every job needs a name)")
    if "command" not in raw:
        problems.append(f"{where('command')}: missing (a shell string or an argv list)")
    present = [k for k in ("cron", "every", "at", "after") if raw.get(k) not in (None, [])]
    if not present:
        problems.append(f"{where('cron')}: missing schedule: give exactly one of cron, every, at, after")
    elif "after" in present and len(present) > 1:
        problems.append(f"{where('after')}: a job runs after other jobs or on a schedule, not both "
                        f"(found {', '.join(present)})")
    elif len(present) > 1:
        problems.append(f"{where(present[1])}: give exactly one of cron, every, at (found {', '.join(present)})")


def _check_schedule_combo(
    raw: dict[str, Any], values: dict[str, Any], where: Callable[[str], str], problems: list[str]
) -> None:
    zone_is_valid = "timezone" not in raw or "timezone" in values
    if values.get("at") is not None and zone_is_valid:
        try:
            values["at"] = parse_at(values["at"], values.get("timezone", "UTC"))
        except CronctlError as exc:
            problems.append(f"{where('at')}: {exc}")
        except OverflowError:
            problems.append(f"{where('at')}: {values['at']!s} is outside the dates cronctl can handle "
                            "(years 1 to 9999 in UTC)")
    every, jitter = values.get("every"), values.get("jitter")
    if every is not None and jitter is not None and jitter >= every:
        # Slot N would fire after slot N+1 is due: runs would pile up or be coalesced away.
        problems.append(f"{where('jitter')}: must be shorter than the interval ({raw.get('jitter')!s} >= "
                        f"every {raw.get('every')!s})")
    if raw.get("at") is not None and raw.get("repeat") is not None:
        problems.append(f"{where('repeat')}: does not apply to a one-shot 'at' job")
    problems.extend(chain_combo_problems(raw, where))


def _check_name(value: Any) -> str:
    if isinstance(value, bool):
        raise FieldProblem(f"{value!r} is not a valid name: YAML reads an unquoted off, no, yes or on as a "
                           "boolean; quote it")
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise FieldProblem(f"{value!r} is not a valid name: use lowercase letters, digits, '.', '_' or '-', "
                           "starting with a letter or digit")
    if len(value) > NAME_MAX:
        raise FieldProblem(f"name is longer than {NAME_MAX} characters")
    return value


def _check_cron(value: Any) -> str:
    if not isinstance(value, str):
        raise FieldProblem(f"expected a cron expression in quotes, got {value!r}")
    parse_cron(value)
    return value.strip()


def _duration(minimum: float, strict: bool = False) -> Callable[[Any], float]:
    def check(value: Any) -> float:
        seconds = parse_duration(value)
        if seconds < minimum or (strict and seconds <= minimum):
            bound = f"greater than {minimum:g}s" if strict else f"at least {minimum:g}s"
            raise FieldProblem(f"must be {bound}, got {value!r}")
        return seconds

    return check


def _optional(check: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else check(value)


def _check_every(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds < MIN_EVERY:
        raise FieldProblem(f"interval must be at least {MIN_EVERY * 1000:.0f}ms, got {value!r}")
    return seconds


def _check_timezone(value: Any) -> str:
    if not isinstance(value, str):
        raise FieldProblem(f"expected an IANA zone name like Europe/Berlin, got {value!r}")
    check_timezone(value)
    return value


def _check_command(value: Any) -> str | tuple[str, ...]:
    if isinstance(value, str):
        if not value.strip():
            raise FieldProblem("is empty")
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if not value[0]:
            raise FieldProblem("the program (first list item) is empty")
        return tuple(value)
    raise FieldProblem("expected a shell string or a non-empty list of strings (argv)")


def _check_optional_command(value: Any) -> str | tuple[str, ...] | None:
    return None if value is None else _check_command(value)


def _check_cwd(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise FieldProblem(f"expected a directory path, got {value!r}")
    return os.path.expanduser(value)


def _check_env(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FieldProblem("expected a mapping of NAME: value")
    env: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise FieldProblem(f"{key!r} is not a valid environment variable name")
        if key.startswith("CRONCTL_"):
            raise FieldProblem(f"{key} is reserved: cronctl sets CRONCTL_* variables itself")
        if not isinstance(item, (str, int, float, date)):
            raise FieldProblem(f"value of {key} must be a string or number")
        env[key] = _scalar_text(item)
    return env


def _scalar_text(item: Any) -> str:
    if isinstance(item, bool):
        return "true" if item else "false"
    return str(item)


def _enum(kind: type[Overlap] | type[Catchup]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        try:
            return kind(value)
        except ValueError:
            allowed = " | ".join(m.value for m in kind)
            raise FieldProblem(f"{value!r} is not one of {allowed}") from None

    return check


def _integer(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            if not (isinstance(value, str) and value.strip().isdigit()):
                raise FieldProblem(f"expected a whole number, got {value!r}")
        number = int(value)
        if number < minimum or (maximum is not None and number > maximum):
            upper = f" and at most {maximum}" if maximum is not None else ""
            raise FieldProblem(f"must be at least {minimum}{upper}, got {number}")
        return number

    return check


def _check_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
        return value.lower() in ("true", "yes")
    raise FieldProblem(f"expected true or false, got {value!r}")


def _check_at_type(value: Any) -> Any:
    # The instant itself needs the job's zone, so it is parsed in _check_schedule_combo.
    if not isinstance(value, (str, datetime)):
        raise FieldProblem(f"expected an ISO 8601 instant like 2026-12-24T09:00:00+01:00, got {value!r}")
    return value


_CHECKS: dict[str, Callable[[Any], Any]] = {
    "name": _check_name,
    "cron": _optional(_check_cron),
    "every": _optional(_check_every),
    "at": _optional(_check_at_type),
    "timezone": _check_timezone,
    "command": _check_command,
    "cwd": _check_cwd,
    "env": _check_env,
    "timeout": _duration(0),
    "kill_grace": _duration(0),
    "overlap": _enum(Overlap),
    "catchup": _enum(Catchup),
    "starting_deadline": _optional(_duration(0, strict=True)),
    "retries": _integer(0, MAX_RETRIES),
    "retry_delay": _duration(0, strict=True),
    "repeat": _optional(_integer(1)),
    "jitter": _duration(0),
    "grace": _optional(_duration(0, strict=True)),
    "on_failure": _check_optional_command,
    "paused": _check_bool,
    **CHAIN_CHECKS,
    **OPERATOR_CHECKS,
    **NOTIFY_CHECKS,
}


def _suggest(key: str, allowed: tuple[str, ...]) -> str:
    import difflib

    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return "known fields: " + ", ".join(allowed)
