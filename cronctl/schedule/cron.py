"""When a cron expression fires: its slots as UTC instants (the expression itself is parsed
by schedule/cronexpr.py; `every` and `at` are schedule/intervals.py's).

Nothing here reads a clock; every function takes the instant it reasons about.

Cron expressions are parsed and evaluated by cronctl rather than by croniter, so the
rules of SPEC §4 hold exactly: Debian's day-of-month/day-of-week rule (OR when
both are restricted, AND when either field's text begins with `*`), and
Debian's DST rule (cron(8)), which croniter does not implement (it fires
`30 2 * * *` twice on a fall-back night).

Debian's DST rule sorts expressions by the first character of two fields. A
*fixed-time* expression (minute and hour fields both begin with something
other than `*`: `30 2 * * *`, `0,30 1-3 * * *`, `@daily`) runs at a particular
wall time. Its wall time W "is reached" at the first instant the zone's wall
clock shows W or later: W itself when W exists once, the first of the two
instants when W is repeated (fold), the transition instant when W was skipped
(gap). This mapping never decreases as W increases, so walking matching wall
times in calendar order yields slots in order, and several skipped wall times
collapse into one instant.

A *wildcard* expression (minute or hour field begins with `*`: `30 * * * *`,
`*/15 2 * * *`, `@hourly`) follows the wall clock as it really runs: a wall
time skipped by a gap never happens and does not fire, and a repeated wall
time fires at both of its instants. `_fires_at` is the one place that applies
the rule to a wall time; the walks around it keep the second occurrences in
order (they come after every first occurrence of the fold).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from datetime import date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from cronctl.errors import ScheduleError
from cronctl.schedule.cronexpr import CronExpr
from cronctl.schedule.zones import as_utc, aware, check_timezone, fold_width, resolve, wall_offsets

_MINUTE = timedelta(minutes=1)
_TINY = timedelta(microseconds=1)

# No valid expression needs longer: Feb 29 on a given weekday recurs within
# the 400-year Gregorian cycle.
_SEARCH_YEARS = 400

# Bound of the slots remembered by cron_next (see there).
_NEXT_FOUND_MAX = 4096


# ---------------------------------------------------------------- wall-time calendar


def _days_in_month(year: int, month: int) -> int:
    if month == 12:
        return 31
    return (date(year, month + 1, 1) - date(year, month, 1)).days


def _day_matches(expr: CronExpr, year: int, month: int, day: int) -> bool:
    in_dom = day in expr.days
    in_dow = date(year, month, day).isoweekday() % 7 in expr.weekdays
    if expr.dom_star or expr.dow_star:
        return in_dom and in_dow
    return in_dom or in_dow


def _time_at_or_after(expr: CronExpr, hour: int, minute: int) -> tuple[int, int] | None:
    index = bisect_left(expr.hours, hour)
    if index < len(expr.hours) and expr.hours[index] == hour:
        later = bisect_left(expr.minutes, minute)
        if later < len(expr.minutes):
            return hour, expr.minutes[later]
        index += 1
    if index < len(expr.hours):
        return expr.hours[index], expr.minutes[0]
    return None


def _time_at_or_before(expr: CronExpr, hour: int, minute: int) -> tuple[int, int] | None:
    index = bisect_right(expr.hours, hour) - 1
    if index >= 0 and expr.hours[index] == hour:
        earlier = bisect_right(expr.minutes, minute) - 1
        if earlier >= 0:
            return hour, expr.minutes[earlier]
        index -= 1
    if index >= 0:
        return expr.hours[index], expr.minutes[-1]
    return None


def _next_wall(expr: CronExpr, after: datetime) -> datetime:
    """First whole-minute naive wall time strictly after `after` that matches."""
    start = after.replace(second=0, microsecond=0) + _MINUTE
    year, month, day = start.year, start.month, start.day
    hour, minute = start.hour, start.minute
    last_year = min(year + _SEARCH_YEARS, 9999)
    while year <= last_year:
        if month in expr.months and _day_matches(expr, year, month, day):
            found = _time_at_or_after(expr, hour, minute)
            if found is not None:
                return datetime(year, month, day, *found)
        hour = minute = 0
        day += 1
        if day > _days_in_month(year, month) or month not in expr.months:
            day = 1
            month += 1
            if month > 12:
                month, year = 1, year + 1
    raise ScheduleError(f"cron {expr.text!r}: no slot after {after:%Y-%m-%d %H:%M}")


def _prev_wall(expr: CronExpr, before: datetime) -> datetime:
    """Last whole-minute naive wall time strictly before `before` that matches."""
    start = before.replace(second=0, microsecond=0)
    if start == before:
        start -= _MINUTE
    year, month, day = start.year, start.month, start.day
    hour, minute = start.hour, start.minute
    first_year = max(year - _SEARCH_YEARS, 1)
    while year >= first_year:
        if month in expr.months and _day_matches(expr, year, month, day):
            found = _time_at_or_before(expr, hour, minute)
            if found is not None:
                return datetime(year, month, day, *found)
        hour, minute = 23, 59
        day -= 1
        if day < 1 or month not in expr.months:
            month -= 1
            if month < 1:
                month, year = 12, year - 1
            if year < 1:
                break
            day = _days_in_month(year, month)
    raise ScheduleError(f"cron {expr.text!r}: no slot before {before:%Y-%m-%d %H:%M}")


# ---------------------------------------------------------------- cron slots


def _fires_at(expr: CronExpr, zone: ZoneInfo, wall: datetime) -> tuple[datetime | None, datetime | None]:
    """When a matching wall time fires under Debian's DST rule: (first, second), naive UTC.

    A fixed-time expression fires once: a skipped wall time at the end of its
    gap, a repeated one in the first fold. A wildcard expression follows the
    wall clock as it runs: a skipped wall time does not fire (first is None),
    a repeated one fires in both folds (second is the repeat).
    """
    offsets = wall_offsets(zone, wall)
    if expr.fixed_time:
        first, _ = resolve(zone, wall, offsets)
        return first, None
    early, late = offsets
    if early < late:
        return None, None
    return resolve(zone, wall, offsets)


def _all_in_gaps(expr: CronExpr, zone: ZoneInfo, since: datetime) -> ScheduleError:
    return ScheduleError(
        f"cron {expr.text!r}: no slot in {zone.key} within {_SEARCH_YEARS} years of "
        f"{since:%Y-%m-%d %H:%M}: every wall time it matches falls in a DST gap, which a "
        "schedule whose minute or hour begins with `*` skips (Debian's rule)"
    )


def _slots_after(expr: CronExpr, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Slots strictly after the aware instant `after`, ascending, as naive UTC."""
    last = as_utc(after, "after")
    local = aware(last).astimezone(zone)
    wall = local.replace(tzinfo=None)
    # Second occurrences of fold wall times wait here until every earlier
    # first occurrence has been yielded; only wildcard expressions have them.
    repeats: list[datetime] = []
    # From the first pass of a fold, wall times at or before ours repeat later
    # and the forward walk never meets them. They are only due after the fold's
    # first pass, so they are looked up once the walk leaves the fold: most
    # calls have returned by then (an every-minute walk would cost 60 steps).
    width = fold_width(local)
    fold_left: datetime | None = None
    if width and local.fold == 0 and not expr.fixed_time:
        fold_left = wall + width  # every wall time from here on lies past this fold
    # A valid expression matches again within _SEARCH_YEARS; a wildcard one
    # whose matches all fall in gaps (`*/5 2 25-31 3 */7` in Europe/Berlin)
    # would otherwise walk to year 9999.
    since = wall
    while True:
        wall = _next_wall(expr, wall)
        first, repeat = _fires_at(expr, zone, wall)
        if first is None:
            if wall.year - since.year > _SEARCH_YEARS:
                raise _all_in_gaps(expr, zone, since)
            continue
        if fold_left is not None and (repeat is None or wall >= fold_left):
            # Past the fold (a wall time lived once, or one of a later fold):
            # the fold's first occurrences are all behind us, its repeats
            # ahead, the ones of earlier wall times first.
            repeats = _repeats_behind(expr, zone, local, last) + repeats
            fold_left = None
        while repeats and repeats[0] < first:
            pending = repeats.pop(0)
            if pending > last:
                last = pending
                yield pending
        if repeat is not None and repeat > last:
            repeats.append(repeat)
        if first > last:
            last = first
            since = wall
            yield first


def _repeats_behind(
    expr: CronExpr, zone: ZoneInfo, local: datetime, after: datetime
) -> list[datetime]:
    """Second occurrences still ahead of `local`, a moment in a fold's first pass,
    whose wall times are at or before `local`'s."""
    width = fold_width(local)
    wall = local.replace(tzinfo=None)
    found = []
    candidate = _next_wall(expr, wall - width - _TINY)
    while candidate <= wall:
        _, repeat = _fires_at(expr, zone, candidate)
        if repeat is not None and repeat > after:
            found.append(repeat)
        candidate = _next_wall(expr, candidate)
    return found


def cron_next(expr: CronExpr, tz: str, after: datetime) -> datetime:
    """The first slot strictly after `after`, as aware UTC."""
    # `apply -f` asks this of every new job at one instant: 10,000 jobs, a few dozen
    # expressions. A pure function of its arguments; what raises is never stored.
    key = (expr.text, tz, after, after.tzinfo)
    found = _NEXT_FOUND.get(key)
    if found is None:
        found = aware(next(_slots_after(expr, check_timezone(tz), after)))
        if len(_NEXT_FOUND) >= _NEXT_FOUND_MAX:
            _NEXT_FOUND.clear()  # bounded: a loop asks at ever new instants
        _NEXT_FOUND[key] = found
    return found


_NEXT_FOUND: dict[tuple[str, str, datetime, tzinfo | None], datetime] = {}


def cron_prev(expr: CronExpr, tz: str, before: datetime) -> datetime:
    """The last slot strictly before `before`, as aware UTC."""
    zone = check_timezone(tz)
    limit = as_utc(before, "before")
    local = aware(limit).astimezone(zone)
    start = local.replace(tzinfo=None)
    if local.fold == 1:
        # Wall times just after ours in the fold were first reached an hour
        # (or so) ago, before `before`: include them in the backward walk.
        start += fold_width(local)
    wall = _prev_wall(expr, start)
    first, repeat = _fires_at(expr, zone, wall)
    while first is None or first >= limit:
        if start.year - wall.year > _SEARCH_YEARS:
            raise _all_in_gaps(expr, zone, wall)
        wall = _prev_wall(expr, wall)
        first, repeat = _fires_at(expr, zone, wall)
    best = first
    if repeat is not None:
        best = max(best, _last_repeat_before(expr, zone, wall, limit))
    return aware(best)


def _last_repeat_before(
    expr: CronExpr, zone: ZoneInfo, wall: datetime, limit: datetime
) -> datetime:
    """The latest second occurrence before `limit` among fold wall times <= `wall`."""
    _, repeat = _fires_at(expr, zone, wall)
    if repeat is None:
        return datetime.min
    if repeat < limit:
        return repeat
    # A repeat is its wall time read with the fold's later offset, so the
    # latest one before `limit` belongs to the last matching wall time before
    # `limit` read with that offset: one step back instead of a walk through
    # the fold (sixty steps for every minute).
    late = wall - repeat
    _, repeat = _fires_at(expr, zone, _prev_wall(expr, limit + late))
    if repeat is None or repeat >= limit:
        return datetime.min
    return repeat


def count_slots(
    expr: CronExpr, tz: str, start: datetime, end: datetime, limit: int = 100_000
) -> int:
    """How many slots lie in (start, end], counting no further than `limit`."""
    stop = as_utc(end, "end")
    count = 0
    if limit <= 0 or stop <= as_utc(start, "start"):
        return count
    for slot in _slots_after(expr, check_timezone(tz), start):
        if slot > stop:
            break
        count += 1
        if count >= limit:
            break
    return count


def cron_cadence(expr: CronExpr, tz: str, slot: datetime) -> float:
    """Seconds from `slot` to the slot after it."""
    return (cron_next(expr, tz, slot) - slot).total_seconds()
