"""Pure schedule math besides cron: `every` grids and `at` instants as UTC, and the
policies derived from a cadence (grace, retry delay, jitter). No clock, no I/O.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from cronctl.errors import ScheduleError
from cronctl.schedule.zones import aware, check_timezone, resolve

_TINY = timedelta(microseconds=1)


def _step_us(interval: float) -> int:
    step = round(interval * 1_000_000)
    if step <= 0:
        raise ValueError(f"interval must be positive, got {interval!r}")
    return step


def every_next(prev_slot: datetime, interval: float, after: datetime) -> datetime:
    """The first `prev_slot + k*interval` (k >= 1) strictly after `after`.

    Integer microseconds keep the grid exact for sub-second intervals and
    over long downtimes, where float seconds would drift off it.
    """
    step = _step_us(interval)
    elapsed = (after - prev_slot) // _TINY
    steps = elapsed // step + 1 if elapsed >= 0 else 1
    return prev_slot + timedelta(microseconds=steps * step)


def every_count(prev_slot: datetime, interval: float, end: datetime) -> int:
    """How many grid slots lie in (prev_slot, end]."""
    elapsed = (end - prev_slot) // _TINY
    return max(0, elapsed // _step_us(interval))


def parse_at(value: str | datetime, tz: str) -> datetime:
    """A one-shot instant as aware UTC; a naive time is read in zone `tz`."""
    zone = check_timezone(tz)
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, str):
        when = _parse_iso(value)
    else:
        # PyYAML turns `at: 2026-12-24` into a date; midnight would be a guess.
        raise ScheduleError(
            f"at {value!r}: expected an ISO 8601 date and time, e.g. 2026-12-24T09:00:00+01:00"
        )
    if when.tzinfo is None or when.utcoffset() is None:
        # Same rule as cron slots: a skipped wall time fires at the end of the
        # gap, a repeated one at its first occurrence.
        first, _ = resolve(zone, when.replace(tzinfo=None))
        return aware(first)
    return when.astimezone(timezone.utc)


def _parse_iso(value: str) -> datetime:
    text = value.strip()
    problem = ScheduleError(
        f"at {value!r}: expected an ISO 8601 date and time, e.g. 2026-12-24T09:00:00+01:00"
    )
    # A date alone parses as midnight; insist on a time so nothing is guessed.
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}.*", text, flags=re.IGNORECASE):
        raise problem
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise problem from None


# ---------------------------------------------------------------- policies


def default_grace(cadence_s: float) -> float:
    """Half the cadence, clamped to [2m, 2h] (SPEC §3)."""
    return min(max(cadence_s / 2, 120.0), 7200.0)


def retry_delay(attempt: int, base_s: float, cadence_s: float | None) -> float:
    """Delay before retry number `attempt` (1-based): doubling, capped at the cadence."""
    # The exponent cap only keeps float math finite; the cadence cap bites first.
    delay = base_s * 2.0 ** min(max(attempt - 1, 0), 60)
    if cadence_s is not None:
        delay = min(delay, cadence_s)
    return delay


def jitter_offset(name: str, jitter_s: float) -> float:
    """A stable delay in [0, jitter_s) for job `name`, whole milliseconds.

    hashlib rather than hash(): the value must survive restarts, and str
    hashes are salted per process.
    """
    if jitter_s <= 0:
        return 0.0
    import hashlib  # here: only jittered jobs need it, and read commands start faster without

    digest = hashlib.sha256(name.encode("utf-8")).digest()
    fraction = (int.from_bytes(digest[:8], "big") >> 11) / float(1 << 53)
    offset = math.floor(fraction * jitter_s * 1000) / 1000
    return min(offset, math.nextafter(jitter_s, 0.0))
