"""cron expressions as systemd OnCalendar= lines whose union fires at the same wall times.

One OnCalendar= line matches a day only when its weekday filter AND its date
match, so Debian's OR rule (day-of-month or day-of-week, when both are
restricted) needs two lines: one for the listed days of the month, one for the
listed weekdays. A timer fires at the union of its OnCalendar= lines, and
fires once when two lines name the same instant.

The zone is always written out: a timer without one uses the host's zone,
while a cronctl job without one uses UTC.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timezone

from cronctl.interop.cronfields import ALL_DAYS, ALL_WEEKDAYS, consecutive_runs
from cronctl.schedule.cronexpr import CronExpr

# systemd's weekday names, indexed like cron (0 = Sunday).
_WEEKDAY_NAMES = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
# systemd reads weekday ranges Monday first and cannot wrap past Sunday.
_WEEK_ORDER = (1, 2, 3, 4, 5, 6, 0)


def oncalendar_lines(expr: CronExpr, tz: str) -> list[str]:
    """The OnCalendar= values whose union is `expr` evaluated in zone `tz`."""
    months = render_values(expr.months, 1, 12)
    clock = f"{render_values(expr.hours, 0, 23)}:{render_values(expr.minutes, 0, 59)}:00"
    days = render_values(expr.days, 1, 31)
    weekdays = render_weekdays(expr.weekdays)
    if expr.dom_star or expr.dow_star:
        # Debian's AND rule: one line carries both filters (either may be `*`).
        return [_line(weekdays, months, days, clock, tz)]
    if expr.days == ALL_DAYS or expr.weekdays == ALL_WEEKDAYS:
        # OR with a field that matches every day: every day matches.
        return [_line(None, months, "*", clock, tz)]
    return [_line(None, months, days, clock, tz), _line(weekdays, months, "*", clock, tz)]


def _line(weekdays: str | None, months: str, days: str, clock: str, tz: str) -> str:
    prefix = f"{weekdays} " if weekdays else ""
    return f"{prefix}*-{months}-{days} {clock} {tz}"


def every_oncalendar(seconds: float) -> str | None:
    """An OnCalendar= grid with the same period, when `seconds` divides a minute, hour or day."""
    if seconds != int(seconds) or seconds <= 0:
        return None
    whole = int(seconds)
    if whole < 60 and 60 % whole == 0:
        return f"*-*-* *:*:00/{whole} UTC" if whole > 1 else "*-*-* *:*:* UTC"
    if whole < 3600 and whole % 60 == 0 and 3600 % whole == 0:
        return f"*-*-* *:00/{whole // 60}:00 UTC"
    if whole < 86400 and whole % 3600 == 0 and 86400 % whole == 0:
        return f"*-*-* 00/{whole // 3600}:00:00 UTC"
    if whole == 86400:
        return "*-*-* 00:00:00 UTC"
    return None


def at_oncalendar(when: datetime) -> str:
    """An absolute OnCalendar= value for one instant, written in UTC."""
    utc = when.astimezone(timezone.utc)
    text = utc.strftime("%Y-%m-%d %H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return f"{text} UTC"


def render_values(values: Collection[int], low: int, high: int) -> str:
    """A set of numbers in OnCalendar syntax: `*`, `start/step`, `a..b` runs, lists."""
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    step = _step_of(ordered, high)
    if step is not None:
        return f"{ordered[0]:02d}/{step}"
    return ",".join(_run_text(run, "{:02d}".format, "..") for run in consecutive_runs(ordered))


def render_weekdays(weekdays: Collection[int]) -> str | None:
    """Weekday names in OnCalendar syntax, or None for every day."""
    if frozenset(weekdays) == ALL_WEEKDAYS:
        return None
    positions = sorted(_WEEK_ORDER.index(day) for day in weekdays)
    name = lambda position: _WEEKDAY_NAMES[_WEEK_ORDER[position]]  # noqa: E731
    return ",".join(_run_text(run, name, "..") for run in consecutive_runs(positions))


def _step_of(ordered: Sequence[int], high: int) -> int | None:
    """The step when `ordered` is exactly first, first+step, ... up to the field's end."""
    if len(ordered) < 3:
        return None
    step = ordered[1] - ordered[0]
    if step < 2 or ordered[-1] + step <= high:
        return None
    if list(ordered) != list(range(ordered[0], high + 1, step)):
        return None
    return step


def _run_text(run: list[int], show: Callable[[int], str], joiner: str) -> str:
    # Two neighbours read better as a list than as a range.
    if len(run) >= 3:
        return f"{show(run[0])}{joiner}{show(run[-1])}"
    return ",".join(show(value) for value in run)
