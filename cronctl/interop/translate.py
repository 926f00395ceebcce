"""What every export format shares: cron text for other cron readers, interval grids,
and the DST windows where other engines stop agreeing with cronctl.

Pure functions; the caller passes `now`.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo

from cronctl.interop.cronfields import ALL_DAYS, ALL_WEEKDAYS, consecutive_runs
from cronctl.schedule.cronexpr import CronExpr

UTC = timezone.utc
# How far ahead DST windows are searched; zone rules further out are guesses anyway.
DST_HORIZON_DAYS = 2 * 366


# --- cron text for other readers --------------------------------------------------


def cron_text(expr: CronExpr, star_prefix_is_star: bool) -> str | None:
    """Five numeric fields that another cron reads exactly like cronctl reads `expr`.

    Readers differ on which day field counts as unrestricted: Debian's cron (and
    cronie) look at the first character (`*/2` is unrestricted); the library of
    Kubernetes (robfig/cron) only at a field that is exactly `*`. None when the
    reader cannot express the schedule: both day fields restricted but combined
    with AND, for a reader that does not treat `*/n` as unrestricted. Minute and
    hour keep their first character, which picks Debian's DST rule.
    """
    days = _day_fields(expr, star_prefix_is_star)
    if days is None:
        return None
    minute = _clock_field(expr.fields[0], expr.minutes, 0, 59)
    hour = _clock_field(expr.fields[1], expr.hours, 0, 23)
    month = cron_values(expr.months, 1, 12)
    return f"{minute} {hour} {days[0]} {month} {days[1]}"


def _clock_field(text: str, values: Collection[int], low: int, high: int) -> str:
    """The minute or hour field, keeping whether it begins with `*`.

    Debian's cron picks its DST rule by that first character (cron(8), SPEC
    §4): `*/15` rewritten as `0-45/15` would turn a wildcard job into a
    fixed-time one, and `0-23` written as `*` the other way round. The
    minute and hour syntax cronctl accepts is plain crontab(5) syntax, so a
    field that begins with `*` is kept as written.
    """
    if text.startswith("*"):
        return text
    return cron_values(values, low, high, allow_star=False)


def _day_fields(expr: CronExpr, star_prefix_is_star: bool) -> tuple[str, str] | None:
    dom_full, dow_full = expr.days == ALL_DAYS, expr.weekdays == ALL_WEEKDAYS
    if not (expr.dom_star or expr.dow_star):
        # OR: neither may be written as `*`, or the reader would switch to AND.
        return cron_values(expr.days, 1, 31, allow_star=False), cron_values(expr.weekdays, 0, 6, allow_star=False)
    if dom_full or dow_full:
        # AND with one field matching every day: a bare `*` keeps AND for every reader.
        dom = "*" if dom_full else cron_values(expr.days, 1, 31, allow_star=False)
        dow = "*" if dow_full else cron_values(expr.weekdays, 0, 6, allow_star=False)
        return dom, dow
    if not star_prefix_is_star:
        return None
    # Both restricted under AND: keep the field that was spelled from `*` as written.
    if expr.dom_star and re.fullmatch(r"\*/\d+", expr.fields[2]):
        return expr.fields[2], cron_values(expr.weekdays, 0, 6, allow_star=False)
    if expr.dow_star and re.fullmatch(r"\*/\d+", expr.fields[4]):
        return cron_values(expr.days, 1, 31, allow_star=False), expr.fields[4]
    return None


def cron_values(values: Collection[int], low: int, high: int, allow_star: bool = True) -> str:
    """A set of numbers in cron syntax: `*`, `a-b/step`, `a-b` runs and lists."""
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*" if allow_star else f"{low}-{high}"
    if len(ordered) >= 3:
        step = ordered[1] - ordered[0]
        if step >= 2 and ordered == list(range(ordered[0], ordered[-1] + 1, step)):
            return f"{ordered[0]}-{ordered[-1]}/{step}"
    items: list[str] = []
    for run in consecutive_runs(ordered):
        items.append(f"{run[0]}-{run[-1]}" if len(run) >= 3 else ",".join(map(str, run)))
    return ",".join(items)


def every_cron(seconds: float) -> str | None:
    """A cron grid with the same period as `every`, when it divides an hour or a day."""
    if seconds <= 0 or seconds % 60:
        return None
    minutes = int(seconds // 60)
    if minutes < 60 and 60 % minutes == 0:
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if minutes % 60 == 0 and 1440 % minutes == 0:
        hours = minutes // 60
        return "0 * * * *" if hours == 1 else ("0 0 * * *" if hours == 24 else f"0 */{hours} * * *")
    return None


# --- DST windows ------------------------------------------------------------------------


@dataclass(frozen=True)
class DstWindow:
    """Wall times [start, end) of one DST change: skipped (gap) or lived twice (fold)."""

    gap: bool
    start: datetime  # naive wall time in the zone
    end: datetime

    @property
    def day(self) -> date:
        return self.start.date()

    def describe(self) -> str:
        return f"{self.start:%H:%M}-{(self.end - timedelta(minutes=1)):%H:%M} on {self.day}"


@lru_cache(maxsize=64)
def dst_windows(tz: str, start_day: date, days: int = DST_HORIZON_DAYS) -> tuple[DstWindow, ...]:
    """The DST windows of zone `tz` in the `days` after `start_day`."""
    zone = ZoneInfo(tz)
    found: list[DstWindow] = []
    moment = datetime(start_day.year, start_day.month, start_day.day, tzinfo=UTC)
    before = _offset(zone, moment)
    for _ in range(days):
        later = moment + timedelta(days=1)
        after = _offset(zone, later)
        if after != before:
            found.append(_window(zone, moment, later))
        moment, before = later, after
    return tuple(found)


def _offset(zone: ZoneInfo, moment: datetime) -> timedelta:
    offset = moment.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _window(zone: ZoneInfo, low: datetime, high: datetime) -> DstWindow:
    """Bisect the change inside (low, high] to the second, then name its wall times."""
    old, new = _offset(zone, low), _offset(zone, high)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if _offset(zone, middle) == old:
            low = middle
        else:
            high = middle
    change = high.replace(tzinfo=None)
    if new > old:
        return DstWindow(True, change + old, change + new)
    return DstWindow(False, change + new, change + old)


def wall_matches(expr: CronExpr, wall: datetime) -> bool:
    """Whether a naive wall minute is one of `expr`'s, with Debian's day rule."""
    if wall.minute not in expr.minutes or wall.hour not in expr.hours or wall.month not in expr.months:
        return False
    in_dom = wall.day in expr.days
    in_dow = wall.isoweekday() % 7 in expr.weekdays
    if expr.dom_star or expr.dow_star:
        return in_dom and in_dow
    return in_dom or in_dow


def windows_hit(expr: CronExpr, tz: str, now: datetime) -> list[DstWindow]:
    """The DST windows ahead in which `expr` has a wall time."""
    return [window for window in dst_windows(tz, now.astimezone(UTC).date()) if _matching_walls(expr, window)]


def dst_notes(expr: CronExpr, tz: str, now: datetime, engine: str, gap_rule: str, fold_rule: str,
              fold_matters: bool) -> list[str]:
    """Notes for the DST windows where `engine` does not follow SPEC §4 for this schedule.

    The engines translated to (systemd, Kubernetes) never fire a wall time
    that a gap skips. That is Debian's rule for wildcard expressions too, so
    only a fixed-time expression's catch-up at the end of a gap differs.
    Folds differ per engine: the caller says whether this one's does.
    """
    hits = windows_hit(expr, tz, now)
    notes = []
    gaps = [w for w in hits if w.gap]
    folds = [w for w in hits if not w.gap]
    if gaps and expr.fixed_time:
        notes.append(f"DST gap in {tz} ({gaps[0].describe()}): cronctl fires this fixed-time schedule's skipped "
                     f"wall times once at the end of the gap, as Debian's cron does; {engine} {gap_rule}")
    if folds and fold_matters:
        notes.append(f"DST fold in {tz} ({folds[0].describe()}): {fold_rule}")
    return notes


def debian_gap_notes(expr: CronExpr, tz: str, now: datetime) -> list[str]:
    """Where Debian's cron runs a fixed-time job more often than cronctl: a gap that skips
    two or more of its wall times.

    Debian's cron (cron.c, the "DST begins" case of its main loop) steps its
    virtual clock through every skipped minute and queues the fixed-time jobs
    of each, running the queue between minutes, so `0,30 2 * * *` runs twice
    just after the change. SPEC §4 fires a slot once: every skipped wall time
    collapses into the one instant at the end of the gap.
    """
    if not expr.fixed_time:
        return []
    for window in dst_windows(tz, now.astimezone(UTC).date()):
        if not window.gap:
            continue
        skipped = _matching_walls(expr, window)
        if len(skipped) >= 2:
            times = ", ".join(f"{wall:%H:%M}" for wall in skipped[:4]) + (", ..." if len(skipped) > 4 else "")
            return [f"DST gap in {tz} ({window.describe()}): Debian's cron runs this job once for each skipped wall "
                    f"time ({times}: {len(skipped)} runs, one after another just after the change); cronctl "
                    "fires once, at the end of the gap"]
    return []


def _matching_walls(expr: CronExpr, window: DstWindow) -> list[datetime]:
    wall = window.start.replace(second=0, microsecond=0)
    if wall < window.start:
        wall += timedelta(minutes=1)
    found = []
    while wall < window.end:
        if wall_matches(expr, wall):
            found.append(wall)
        wall += timedelta(minutes=1)
    return found


# --- small formatting helpers ----------------------------------------------------------


def seconds_text(seconds: float) -> str:
    """Seconds for a command line: `90`, `1.5`."""
    if seconds == int(seconds):
        return str(int(seconds))
    return f"{seconds:.3f}".rstrip("0").rstrip(".")
