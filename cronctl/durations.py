"""Human durations (`500ms`, `1h30m`, `2d`) to seconds and back.

Every parsed value is a whole number of milliseconds, because the store keeps
timestamps at millisecond precision; keeping durations on the same grid means
`parse_duration(format_duration(x)) == x` and slot arithmetic never drifts.
"""

from __future__ import annotations

import functools
import math
import re

from cronctl.errors import DurationError

_HINT = "use a number with a unit, e.g. 500ms, 30s, 5m, 1h30m, 2d"

_UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}

# Units must appear in descending order and at most once, so `1m30s` is fine
# and `30s1m` or `1h1h` are rejected rather than silently summed.
_COMBO = re.compile(
    r"(?:(?P<d>\d+)d)?(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?(?:(?P<s>\d+)s)?(?:(?P<ms>\d+)ms)?",
    re.ASCII,
)

# A decimal is only unambiguous for a single unit: `1.5s`, `0.5h`.
_DECIMAL = re.compile(r"(?P<num>\d+\.\d*|\.\d+)(?P<unit>ms|s|m|h|d)", re.ASCII)

# Anything longer is almost certainly a typo, and it would overflow datetime
# arithmetic long before it mattered.
_MAX_MS = 36_500 * _UNIT_MS["d"]


def parse_duration(value: str | int | float, *, field: str = "duration") -> float:
    """Seconds in `value`; only zero may be written without a unit."""
    if isinstance(value, bool):
        raise _error(value, field, _HINT)
    if isinstance(value, (int, float)):
        return _parse_number(value, field)
    if not isinstance(value, str):
        raise _error(value, field, _HINT)
    return _parse_text(value, field)


# Every spec written back to the store or shown (`list --json` at 10,000 jobs: 70,000
# calls) formats the same few values again: remember them. Errors are raised, never cached.
@functools.lru_cache(maxsize=4096)
def format_duration(seconds: float) -> str:
    """Canonical shortest spelling, rounded to milliseconds: 90 -> '1m30s'."""
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"cannot format duration {seconds!r}")
    total_ms = round(seconds * 1000)
    if total_ms < 0:
        # Only for display (e.g. a clock that stepped back); parse rejects it.
        return "-" + format_duration(-total_ms / 1000)
    if total_ms == 0:
        return "0s"
    parts = []
    for unit, size in _UNIT_MS.items():
        count, total_ms = divmod(total_ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _parse_number(value: int | float, field: str) -> float:
    if isinstance(value, float) and not math.isfinite(value):
        raise _error(value, field, _HINT)
    if value == 0:
        return 0.0
    if value < 0:
        raise _error(value, field, f"must not be negative; {_HINT}")
    # YAML `timeout: 30` could mean seconds or minutes; refuse to guess.
    raise _error(value, field, f"a bare number is ambiguous; {_HINT}")


# Every read of the store parses each job's durations again, and a store holds few
# distinct spellings ("1h", "10s", ...): remember them. Errors are raised, never cached.
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str, field: str) -> float:
    text = value.strip()
    if not text:
        raise _error(value, field, f"empty; {_HINT}")
    if text.startswith("-"):
        raise _error(value, field, f"must not be negative; {_HINT}")
    if re.fullmatch(r"\d+(?:\.\d*)?|\.\d+", text, flags=re.ASCII):
        if float(text) == 0:
            return 0.0
        raise _error(value, field, f"a bare number is ambiguous; {_HINT}")
    total_ms = _combo_ms(text)
    if total_ms is None:
        total_ms = _decimal_ms(value, text, field)
    if total_ms is None:
        raise _error(value, field, _HINT)
    if total_ms > _MAX_MS:
        raise _error(value, field, "too long (at most 36500d)")
    return total_ms / 1000


def _combo_ms(text: str) -> int | None:
    match = _COMBO.fullmatch(text)
    if match is None or not any(match.groupdict().values()):
        return None
    return sum(int(count) * _UNIT_MS[unit] for unit, count in match.groupdict().items() if count)


def _decimal_ms(value: str, text: str, field: str) -> int | None:
    match = _DECIMAL.fullmatch(text)
    if match is None:
        return None
    from decimal import Decimal, InvalidOperation  # here: rare, and every command parses durations

    try:
        exact = Decimal(match["num"]) * _UNIT_MS[match["unit"]]
    except InvalidOperation:
        return None
    if exact != exact.to_integral_value():
        raise _error(value, field, f"finer than a millisecond; {_HINT}")
    return int(exact)


def _error(value: object, field: str, reason: str) -> DurationError:
    where = "" if field == "duration" else f" for {field}"
    return DurationError(f"bad duration {value!r}{where}: {reason}")
