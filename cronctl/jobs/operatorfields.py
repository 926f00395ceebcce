"""The fields that run a job as operators do (SPEC §13): `user`, `env_file`, `limits`,
`keep_runs`, `keep_log`, checked one job at a time.

Plugs into jobfile.build_spec (as chainfields does), so YAML entries and `add`/`edit`
options share the checks. Values are stored normalised: limits and sizes as whole
numbers (bytes, CPU seconds), so the loop never parses them again.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from cronctl.errors import CronctlError
from cronctl.models import LIMIT_NAMES, OPERATOR_FIELDS

__all__ = ["OPERATOR_CHECKS", "OPERATOR_FIELDS", "parse_size", "user_warnings"]

# Linux user names as useradd accepts them (plus the '$' of machine accounts).
_USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*\$?$")
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B?|B)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
MAX_KEEP_RUNS = 100_000
MIN_KEEP_LOG = 1024


class OperatorFieldProblem(CronctlError):
    """One bad operator-field value; build_spec adds where it was found."""


def parse_size(value: Any, field: str = "size") -> int:
    """Bytes in `1MiB`, `512K`, `2G`, `1.5GiB` or a plain number of bytes (binary units:
    1K = 1KiB = 1024, as systemd's MemoryMax= and ulimit read them)."""
    if isinstance(value, bool):
        raise OperatorFieldProblem(f"expected a size like 512K, 1MiB or 2G, got {value!r}")
    if isinstance(value, int):
        number, unit = float(value), ""
    else:
        match = _SIZE_RE.match(str(value))
        if not match:
            raise OperatorFieldProblem(f"expected a size like 512K, 1MiB or 2G, got {value!r}")
        number, unit = float(match.group(1)), (match.group(2) or "")[:1].lower()
    size = int(number * _SIZE_UNITS[unit])
    if size <= 0:
        raise OperatorFieldProblem(f"{field} must be more than 0 bytes, got {value!r}")
    return size


def check_user(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        raise OperatorFieldProblem(f"give the user's name, not a number ({value!r}); quote it if the name "
                                   "is made of digits")
    if not isinstance(value, str) or not _USER_RE.match(value) or len(value) > 32:
        raise OperatorFieldProblem(f"{value!r} is not a user name")
    return value


def check_env_file(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise OperatorFieldProblem(f"expected the path of a KEY=VALUE file, got {value!r}")
    if not value.startswith(("/", "~")):
        raise OperatorFieldProblem(f"{value!r} is relative; give an absolute path (the loop reads it at each "
                                   "run, from wherever it runs)")
    return value


def _whole(value: Any, name: str, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OperatorFieldProblem(f"{name}: expected a whole number, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise OperatorFieldProblem(f"{name}: must be at least {minimum}{upper}, got {value}")
    return value


def _cpu_seconds(value: Any) -> int:
    from cronctl.durations import parse_duration

    seconds = parse_duration(value, field="limits.cpu")
    if seconds < 1:
        raise OperatorFieldProblem(f"cpu: CPU time is counted in whole seconds; give at least 1s, got {value!r}")
    return int(seconds)


_LIMIT_CHECKS: dict[str, Callable[[Any], int]] = {
    "nice": lambda v: _whole(v, "nice", -20, 19),
    "memory": lambda v: parse_size(v, "memory"),
    "cpu": _cpu_seconds,
    "nofile": lambda v: _whole(v, "nofile", 4, 1 << 20),
    "nproc": lambda v: _whole(v, "nproc", 1),
}


def check_limits(value: Any) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise OperatorFieldProblem("expected a mapping like {nice: 10, memory: 2G, cpu: 10m, nofile: 4096, nproc: 64}")
    limits: dict[str, int] = {}
    for key, item in value.items():
        if key not in LIMIT_NAMES:
            raise OperatorFieldProblem(f"unknown limit {key!r} (known: {', '.join(LIMIT_NAMES)})")
        try:
            limits[key] = _LIMIT_CHECKS[key](item)
        except CronctlError as exc:
            text = str(exc)
            raise OperatorFieldProblem(text if text.startswith(f"{key}:") else f"{key}: {text}") from None
    return {key: limits[key] for key in LIMIT_NAMES if key in limits}


def check_keep_runs(value: Any) -> int | None:
    if value is None:
        return None
    return _whole(value, "keep_runs", 1, MAX_KEEP_RUNS)


def check_keep_log(value: Any) -> int | None:
    if value is None:
        return None
    size = parse_size(value, "keep_log")
    if size < MIN_KEEP_LOG:
        raise OperatorFieldProblem(f"keep at least {MIN_KEEP_LOG} bytes of a run's log, got {value!r}")
    return size


OPERATOR_CHECKS: dict[str, Callable[[Any], Any]] = {
    "user": check_user, "env_file": check_env_file, "limits": check_limits,
    "keep_runs": check_keep_runs, "keep_log": check_keep_log,
}


def check_stored_limits(value: Any) -> dict[str, int]:
    """`limits` as jobs.json keeps it: cpu in whole seconds (a jobs file must give a unit)."""
    if isinstance(value, dict) and type(value.get("cpu")) is int:
        value = {**value, "cpu": f"{value['cpu']}s"}
    return check_limits(value)


# The checks whose stored form differs from what a jobs file says.
STORED_OPERATOR_CHECKS: dict[str, Callable[[Any], Any]] = {"limits": check_stored_limits}


def format_size(size: int) -> str:
    """`1MiB`, `64KiB`, `1500B`: the exact size in the largest binary unit that divides it."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


def limits_text(limits: dict[str, int]) -> str:
    """`nice 10, memory 2GiB, cpu 1m, nofile 4096` as `show` says them."""
    from cronctl.durations import format_duration

    def word(key: str, value: int) -> str:
        if key == "memory":
            return format_size(value)
        return format_duration(float(value)) if key == "cpu" else str(value)

    return ", ".join(f"{key} {word(key, value)}" for key, value in limits.items())


def user_warnings(user: str | None) -> list[str]:
    """What `validate` says about a user that does not exist on this host (valid, but every
    run here would end blocked_config)."""
    if user is None:
        return []
    import pwd

    try:
        pwd.getpwnam(user)
    except KeyError:
        return [f"field 'user': no user {user!r} on this host; runs here would end not_started "
                "(blocked_config)"]
    return []
