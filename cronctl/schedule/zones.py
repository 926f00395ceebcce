"""Time zones for the schedule math: an IANA name checked, and when a naive wall time is
reached in a zone (PEP 495 folds and gaps), as naive UTC instants.

Debian's rule for a wall time a DST change skips or repeats (schedule/cron.py's docstring)
is applied by the callers; this module only says where the zone's transitions fall.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronctl.errors import ScheduleError

_EPOCH = datetime(1970, 1, 1)


def check_timezone(tz: str) -> ZoneInfo:
    """The ZoneInfo for an IANA name; ScheduleError says what to write instead."""
    problem = ScheduleError(
        f"unknown time zone {tz!r}: use an IANA name like Europe/Berlin or UTC"
    )
    if not isinstance(tz, str) or not tz.strip():
        raise problem
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise problem from None


def as_utc(when: datetime, label: str) -> datetime:
    """Naive UTC copy of an aware instant; naive input is a programming error."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{label} must be timezone-aware, got {when!r}")
    return when.astimezone(timezone.utc).replace(tzinfo=None)


def aware(naive_utc: datetime) -> datetime:
    return naive_utc.replace(tzinfo=timezone.utc)


def _offset_at(zone: ZoneInfo, epoch_s: int) -> timedelta | None:
    return datetime.fromtimestamp(epoch_s, zone).utcoffset()


def wall_offsets(zone: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """The zone's offsets for a naive wall time read with fold=0 and fold=1 (PEP 495).

    They differ only around a transition: in a fold the first is the larger
    (the earlier instant); in a gap, where neither instant exists, fold=0
    reads the offset before the change and fold=1 the one after, so the
    first is the smaller.
    """
    local = wall.replace(tzinfo=zone)
    early = local.utcoffset()
    late = local.replace(fold=1).utcoffset()
    assert early is not None and late is not None
    return early, late


def resolve(
    zone: ZoneInfo, wall: datetime, offsets: tuple[timedelta, timedelta] | None = None
) -> tuple[datetime, datetime | None]:
    """When the naive wall time is reached: (first instant, repeat or None), naive UTC.

    The repeat is the second occurrence of a wall time in a fold. A wall time
    inside a gap is reached at the transition instant. `offsets` saves
    looking them up again when the caller has them.
    """
    early, late = offsets or wall_offsets(zone, wall)
    if early == late:
        return wall - early, None
    if early > late:
        return wall - early, wall - late
    return _transition(zone, wall - late, wall - early), None


def _transition(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The gap's transition instant in (before, after], found by bisection.

    zoneinfo does not expose its transition table; gaps are rare and at most a
    few hours wide, so about a dozen offset look-ups settle it.
    """
    low = math.floor((before - _EPOCH).total_seconds())
    high = math.ceil((after - _EPOCH).total_seconds())
    post = _offset_at(zone, high)
    while high - low > 1:
        middle = (low + high) // 2
        if _offset_at(zone, middle) == post:
            high = middle
        else:
            low = middle
    return _EPOCH + timedelta(seconds=high)


def fold_width(local: datetime) -> timedelta:
    """How much wall time repeats around `local`; zero when it is not in a fold."""
    mine = local.utcoffset()
    other = local.replace(fold=1 - local.fold).utcoffset()
    assert mine is not None and other is not None
    return abs(mine - other)
