"""Pure schedule math: cron, every and at slots as UTC instants.

Nothing here reads a clock; every function takes the instant it reasons about.

Cron expressions are parsed and evaluated here rather than by croniter, so the
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

import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronctl.errors import ScheduleError

_MINUTE = timedelta(minutes=1)
_TINY = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1)

# No valid expression needs longer: Feb 29 on a given weekday recurs within
# the 400-year Gregorian cycle.
_SEARCH_YEARS = 400

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

# Longest each month can be; February counts its leap day so `0 0 29 2 *` is legal.
_MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class _FieldRule:
    label: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    name_base: int = 0


_FIELDS = (
    _FieldRule("minute", 0, 59),
    _FieldRule("hour", 0, 23),
    _FieldRule("day-of-month", 1, 31),
    _FieldRule("month", 1, 12, tuple(_MONTH_NAMES), 1),
    _FieldRule("day-of-week", 0, 7, tuple(_DAY_NAMES), 0),
)


@dataclass(frozen=True)
class CronExpr:
    """A parsed cron expression; `text` is the normalized spelling."""

    text: str
    fields: tuple[str, str, str, str, str]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday ... 6 = Saturday
    dom_star: bool
    dow_star: bool
    hour_star: bool
    minute_star: bool

    @property
    def fixed_time(self) -> bool:
        """Debian cron's job "that runs at a particular time": neither minute nor hour begins with `*`.

        Only these catch up a wall time skipped by a DST gap, and they fire
        once in a fold; all others follow the wall clock as it runs (cron(8)).
        """
        return not (self.minute_star or self.hour_star)

    def __str__(self) -> str:
        return self.text


# ---------------------------------------------------------------- parsing


# Expressions already parsed, by their spelling: `apply -f` checks each job's expression,
# then computes its first slot from it again; 10,000 jobs share a few dozen spellings. A
# CronExpr is immutable and the parse a pure function of the text (a bad one raises every
# time: never stored). Bounded, so a long-running loop cannot grow it without end.
_PARSED: dict[str, CronExpr] = {}
_PARSED_MAX = 4096


def parse_cron(expr: str) -> CronExpr:
    """Parse a 5-field expression or macro; ScheduleError names the bad field."""
    if not isinstance(expr, str):
        raise ScheduleError(f"cron {expr!r}: expected a string like '0 3 * * *'")
    parsed = _PARSED.get(expr)
    if parsed is None:
        parsed = _parse(expr)
        if len(_PARSED) < _PARSED_MAX:
            _PARSED[expr] = parsed
    return parsed


def _parse(expr: str) -> CronExpr:
    text = " ".join(expr.split()).lower()
    fields = _expand_macro(expr, text)
    values = [_parse_field(expr, rule, raw) for rule, raw in zip(_FIELDS, fields, strict=True)]
    minutes, hours, days, months, weekdays = values
    # crontab(5): day-of-week 7 is another name for Sunday.
    weekdays = {day % 7 for day in weekdays}
    parsed = CronExpr(
        text=text,
        fields=(fields[0], fields[1], fields[2], fields[3], fields[4]),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(weekdays),
        dom_star=fields[2].startswith("*"),
        dow_star=fields[4].startswith("*"),
        hour_star=fields[1].startswith("*"),
        minute_star=fields[0].startswith("*"),
    )
    _check_fires(expr, parsed)
    return parsed


def _expand_macro(expr: str, text: str) -> list[str]:
    if text.startswith("@"):
        if text == "@reboot":
            raise ScheduleError(
                f"cron {expr!r}: @reboot is not supported: cronctl fires time-based slots only; "
                "to run something at start-up, start it next to `cronctl run` (e.g. in the same "
                "systemd unit) or use a one-shot `at:` job"
            )
        if text not in _MACROS:
            raise ScheduleError(
                f"cron {expr!r}: unknown macro {text!r}; use one of {' '.join(_MACROS)}"
            )
        return _MACROS[text].split()
    fields = text.split()
    if len(fields) != 5:
        raise ScheduleError(f"cron {expr!r}: {_count_problem(len(fields))}")
    return fields


def _count_problem(count: int) -> str:
    expected = "expected 5 fields (minute hour day-of-month month day-of-week)"
    if count == 0:
        return f"empty expression; {expected}"
    if count > 5:
        return (
            f"{count} fields, {expected}; seconds and year fields are not supported, "
            "use `every:` for sub-minute schedules"
        )
    return f"{count} fields, {expected}"


def _parse_field(expr: str, rule: _FieldRule, raw: str) -> set[int]:
    values: set[int] = set()
    for item in raw.split(","):
        if not item:
            raise _field_error(expr, rule, f"empty list item in {raw!r}")
        values.update(_parse_item(expr, rule, item))
    return values


def _parse_item(expr: str, rule: _FieldRule, item: str) -> range:
    base, slash, step_text = item.partition("/")
    step = 1
    if slash:
        step = _parse_step(expr, rule, step_text)
    if base == "*":
        return range(rule.low, rule.high + 1, step)
    low_text, dash, high_text = base.partition("-")
    if not low_text or (dash and not high_text):
        raise _field_error(expr, rule, f"{item!r} is neither a value nor a range")
    low = _parse_value(expr, rule, low_text)
    if not dash:
        if slash:
            # Debian cron only steps through ranges; guessing `5/15` could
            # mean something the user did not intend.
            raise _field_error(
                expr, rule, f"step needs a range: write {low}-{rule.high}/{step} or */{step}"
            )
        return range(low, low + 1)
    high = _parse_value(expr, rule, high_text)
    if rule.label == "day-of-week" and high_text == "sun" and low > 0:
        # `mon-sun` reads naturally; Sunday is also day 7, so let it close a range.
        high = 7
    if low > high:
        raise _field_error(expr, rule, f"range {base} runs backwards")
    return range(low, high + 1, step)


def _as_written(expr: str, text: str) -> str:
    """A token as the user wrote it (`L`, not the parser's lower-cased `l`)."""
    found = re.search(re.escape(text), expr, re.IGNORECASE)
    return found.group() if found else text


def _is_number(text: str) -> bool:
    # str.isdigit() alone would let through digits like '²' that int() refuses.
    return text.isascii() and text.isdigit()


def _parse_step(expr: str, rule: _FieldRule, text: str) -> int:
    if not _is_number(text):
        raise _field_error(expr, rule, f"step {text!r} is not a number")
    step = int(text)
    if step == 0:
        raise _field_error(expr, rule, "step 0 never advances")
    return step


def _parse_value(expr: str, rule: _FieldRule, text: str) -> int:
    if text in rule.names:
        return rule.names.index(text) + rule.name_base
    if not _is_number(text):
        hint = f" (names: {' '.join(rule.names)})" if rule.names else ""
        if re.fullmatch(r".*[?#].*|[lwh]|lw|\d+[lw]|h\(.*", text):
            hint = " (Quartz/Jenkins extensions like ? L W # H are not supported)"
        raise _field_error(expr, rule, f"{_as_written(expr, text)!r} is not a number{hint}")
    value = int(text)
    if not rule.low <= value <= rule.high:
        raise _field_error(expr, rule, f"value {value} out of range {rule.low}-{rule.high}")
    return value


def _field_error(expr: str, rule: _FieldRule, problem: str) -> ScheduleError:
    return ScheduleError(f"cron {expr!r}: {rule.label} {problem}")


def _check_fires(expr: str, parsed: CronExpr) -> None:
    """Reject expressions with no slot, by looking at the calendar once.

    With OR semantics any listed weekday fires, and every month has every
    weekday. With AND semantics every real (month, day) pair falls on every
    weekday in some year, so only the pair itself has to exist.
    """
    if not (parsed.dom_star or parsed.dow_star):
        return
    if any(day <= _MAX_DAYS[month - 1] for month in parsed.months for day in parsed.days):
        return
    days = ", ".join(str(day) for day in sorted(parsed.days))
    months = ", ".join(_MONTH_NAMES[month - 1].title() for month in sorted(parsed.months))
    raise ScheduleError(
        f"cron {expr!r}: never fires: day-of-month {days} does not occur in {months}"
    )


# ---------------------------------------------------------------- time zones


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


def _as_utc(when: datetime, label: str) -> datetime:
    """Naive UTC copy of an aware instant; naive input is a programming error."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{label} must be timezone-aware, got {when!r}")
    return when.astimezone(timezone.utc).replace(tzinfo=None)


def _aware(naive_utc: datetime) -> datetime:
    return naive_utc.replace(tzinfo=timezone.utc)


def _offset_at(zone: ZoneInfo, epoch_s: int) -> timedelta | None:
    return datetime.fromtimestamp(epoch_s, zone).utcoffset()


def _offsets(zone: ZoneInfo, wall: datetime) -> tuple[timedelta, timedelta]:
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


def _resolve(
    zone: ZoneInfo, wall: datetime, offsets: tuple[timedelta, timedelta] | None = None
) -> tuple[datetime, datetime | None]:
    """When the naive wall time is reached: (first instant, repeat or None), naive UTC.

    The repeat is the second occurrence of a wall time in a fold. A wall time
    inside a gap is reached at the transition instant. `offsets` saves
    looking them up again when the caller has them.
    """
    early, late = offsets or _offsets(zone, wall)
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


def _fold_width(local: datetime) -> timedelta:
    """How much wall time repeats around `local`; zero when it is not in a fold."""
    mine = local.utcoffset()
    other = local.replace(fold=1 - local.fold).utcoffset()
    assert mine is not None and other is not None
    return abs(mine - other)


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
    offsets = _offsets(zone, wall)
    if expr.fixed_time:
        first, _ = _resolve(zone, wall, offsets)
        return first, None
    early, late = offsets
    if early < late:
        return None, None
    return _resolve(zone, wall, offsets)


def _all_in_gaps(expr: CronExpr, zone: ZoneInfo, since: datetime) -> ScheduleError:
    return ScheduleError(
        f"cron {expr.text!r}: no slot in {zone.key} within {_SEARCH_YEARS} years of "
        f"{since:%Y-%m-%d %H:%M}: every wall time it matches falls in a DST gap, which a "
        "schedule whose minute or hour begins with `*` skips (Debian's rule)"
    )


def _slots_after(expr: CronExpr, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Slots strictly after the aware instant `after`, ascending, as naive UTC."""
    last = _as_utc(after, "after")
    local = _aware(last).astimezone(zone)
    wall = local.replace(tzinfo=None)
    # Second occurrences of fold wall times wait here until every earlier
    # first occurrence has been yielded; only wildcard expressions have them.
    repeats: list[datetime] = []
    # From the first pass of a fold, wall times at or before ours repeat later
    # and the forward walk never meets them. They are only due after the fold's
    # first pass, so they are looked up once the walk leaves the fold: most
    # calls have returned by then (an every-minute walk would cost 60 steps).
    width = _fold_width(local)
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
    width = _fold_width(local)
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
        found = _aware(next(_slots_after(expr, check_timezone(tz), after)))
        if len(_NEXT_FOUND) >= _PARSED_MAX:
            _NEXT_FOUND.clear()  # bounded: a loop asks at ever new instants
        _NEXT_FOUND[key] = found
    return found


_NEXT_FOUND: dict[tuple[str, str, datetime, tzinfo | None], datetime] = {}


def cron_prev(expr: CronExpr, tz: str, before: datetime) -> datetime:
    """The last slot strictly before `before`, as aware UTC."""
    zone = check_timezone(tz)
    limit = _as_utc(before, "before")
    local = _aware(limit).astimezone(zone)
    start = local.replace(tzinfo=None)
    if local.fold == 1:
        # Wall times just after ours in the fold were first reached an hour
        # (or so) ago, before `before`: include them in the backward walk.
        start += _fold_width(local)
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
    return _aware(best)


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
    stop = _as_utc(end, "end")
    count = 0
    if limit <= 0 or stop <= _as_utc(start, "start"):
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


def describe_cron(expr: CronExpr) -> str:
    """A short English reading for common shapes; the expression itself otherwise."""
    when = _describe_time(expr)
    days = _describe_days(expr)
    if when is None or days is None:
        return f"cron '{expr.text}'"
    return f"{when} {days}"


def _describe_time(expr: CronExpr) -> str | None:
    minute, hour = expr.fields[0], expr.fields[1]
    if hour == "*":
        if minute == "*":
            return "every minute"
        if re.fullmatch(r"\*/\d+", minute) and 60 % int(minute[2:]) == 0:
            return f"every {minute[2:]} minutes"
        if minute.isdigit():
            return f"at minute {int(minute)} of every hour"
        return None
    if minute.isdigit() and len(expr.hours) <= 4 and re.fullmatch(r"[\d,]+", hour):
        return "at " + ", ".join(f"{h:02d}:{int(minute):02d}" for h in expr.hours)
    return None


def _describe_days(expr: CronExpr) -> str | None:
    dom, month, dow = expr.fields[2], expr.fields[3], expr.fields[4]
    names = ", ".join(_DAY_NAMES[day].title() for day in sorted(expr.weekdays))
    day_list = ", ".join(str(day) for day in sorted(expr.days))
    if dom == "*" and dow == "*":
        days = "every day"
    elif dom == "*" and re.fullmatch(r"[\w,-]+", dow):
        days = f"on {names}"
    elif dow == "*" and re.fullmatch(r"[\d,]+", dom):
        days = f"on day {day_list} of the month"
    elif re.fullmatch(r"[\d,]+", dom) and re.fullmatch(r"[\w,-]+", dow):
        days = f"on day {day_list} of the month or on {names}"
    else:
        return None
    if month == "*":
        return days
    months = ", ".join(_MONTH_NAMES[m - 1].title() for m in sorted(expr.months))
    return f"{days} in {months}"


# ---------------------------------------------------------------- every / at


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
        first, _ = _resolve(zone, when.replace(tzinfo=None))
        return _aware(first)
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
