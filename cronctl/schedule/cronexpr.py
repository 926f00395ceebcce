"""Cron expressions as text: parse one (SPEC §4's fields, names, steps and macros) into a
`CronExpr`, and read one aloud (`describe_cron`). When an expression fires is schedule/cron.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cronctl.errors import ScheduleError

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



# ---------------------------------------------------------------- words


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
