"""cron_next against a brute-force oracle that applies SPEC §4 on its own.

The oracle knows nothing of cronctl.schedule.cron: it builds each field's set of
values from the same structure the expression text is rendered from, walks
UTC minute by minute, and decides from zoneinfo alone whether each minute (or
a DST gap ending at it) is a slot. It applies Debian's DST rule as SPEC §4
states it: a wildcard expression (minute or hour begins with `*`) fires
whenever the clock shows a matching wall time, so in both folds and never for
a skipped one; a fixed-time expression fires in the first fold only and
catches up a gap at its end. This is the check for the zones that shift by 30
or 45 minutes (Australia/Lord_Howe, Pacific/Chatham), where
test_schedule_cronsim.py cannot use cronsim.

Size: 600 examples (about 9 s here). Each walks 30 hours of minutes and
compares every slot in them (up to 200) with cron_next, cron_prev and
count_slots. Starts cluster before DST transitions; with
`--hypothesis-show-statistics` about 18% of examples span a transition, 6%
fire at a transition instant, 1% are fixed-time slots at the end of a gap, 3%
fire in a first fold and 3% in a second fold. Six deliberate bugs in
schedule.py (fold, gap, day-of-month/day-of-week, prev) were each caught by
this test when it was written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cronctl.errors import ScheduleError
from cronctl.schedule.cron import count_slots, cron_next, cron_prev
from cronctl.schedule.cronexpr import parse_cron

UTC = timezone.utc
MINUTE = timedelta(minutes=1)
HORIZON = timedelta(hours=30)
EXAMPLES = 600
# More than the first few slots, so that schedules firing every minute still
# reach a transition from a start a couple of hours before it.
COMPARED = 200

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "UTC",
    "Asia/Kolkata",
    "America/Sao_Paulo",
    "Pacific/Chatham",
]

MONTH_NAMES = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

START = datetime(2020, 1, 1, tzinfo=UTC)
END = datetime(2030, 12, 31, tzinfo=UTC)


# ---------------------------------------------------------------- expressions


@dataclass(frozen=True)
class Field:
    text: str
    values: frozenset[int]

    @property
    def star(self) -> bool:
        return self.text.startswith("*")


@dataclass(frozen=True)
class Expr:
    text: str
    minute: Field
    hour: Field
    dom: Field
    month: Field
    dow: Field

    @property
    def wildcard(self) -> bool:
        """cron(8): minute or hour begins with `*`, so the job follows the clock through DST."""
        return self.minute.star or self.hour.star


def render(value: int, names: list[str] | None, offset: int, draw: st.DrawFn) -> str:
    if names and value - offset < len(names) and draw(st.booleans()):
        return names[value - offset].title() if draw(st.booleans()) else names[value - offset]
    return str(value)


@st.composite
def fields(
    draw: st.DrawFn,
    low: int,
    high: int,
    hot: tuple[int, int] | None = None,
    names: list[str] | None = None,
    star_weight: int = 1,
) -> Field:
    """One field as text plus the set of values it means, built side by side."""
    value = st.integers(low, high)
    if hot is not None:
        # Bias towards the hours around DST transitions.
        value = st.one_of(st.integers(*hot), value)
    items: list[str] = []
    values: set[int] = set()
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["star"] * star_weight + ["value", "range", "step"]))
        if kind == "star":
            step = draw(st.sampled_from([None, 1, 2, 3, 5, 7, 15, 30, 40]))
            items.append("*" if step is None else f"*/{step}")
            values.update(range(low, high + 1, step or 1))
        elif kind == "value":
            single = draw(value)
            items.append(render(single, names, low if names is MONTH_NAMES else 0, draw))
            values.add(single)
        else:
            first, last = sorted((draw(value), draw(value)))
            step = draw(st.integers(1, 12)) if kind == "step" else 1
            offset = low if names is MONTH_NAMES else 0
            text = f"{render(first, names, offset, draw)}-{render(last, names, offset, draw)}"
            items.append(text if kind == "range" else f"{text}/{step}")
            values.update(range(first, last + 1, step))
    if not values:
        values.add(low)
    return Field(",".join(items), frozenset(values))


def field_from_text(text: str, low: int, high: int) -> Field:
    """Only for the macros' fixed expansions: a number or '*'."""
    values = range(low, high + 1) if text == "*" else [int(text)]
    return Field(text, frozenset(values))


def mostly_star(
    low: int, high: int, restricted: st.SearchStrategy[Field]
) -> st.SearchStrategy[Field]:
    star = st.just(Field("*", frozenset(range(low, high + 1))))
    return st.one_of(star, star, star, restricted)


@st.composite
def expressions(draw: st.DrawFn) -> Expr:
    if draw(st.integers(0, 19)) == 0:
        macro = draw(st.sampled_from(sorted(MACROS)))
        parts = MACROS[macro].split()
        bounds = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]
        made = [field_from_text(part, *bound) for part, bound in zip(parts, bounds)]
        return Expr(macro, *made)
    minute = draw(fields(0, 59, star_weight=2))
    hour = draw(fields(0, 23, hot=(0, 4), star_weight=2))
    # Day fields are mostly `*`, so that starts near a transition often see
    # slots on the transition day itself.
    dom = draw(mostly_star(1, 31, fields(1, 31, hot=(28, 31))))
    month = draw(mostly_star(1, 12, fields(1, 12, names=MONTH_NAMES)))
    dow = draw(mostly_star(0, 7, fields(0, 7, names=DAY_NAMES)))
    text = " ".join(field.text for field in (minute, hour, dom, month, dow))
    return Expr(text, minute, hour, dom, month, dow)


# ---------------------------------------------------------------- the oracle


def wall_matches(expr: Expr, wall: datetime) -> bool:
    if wall.minute not in expr.minute.values or wall.hour not in expr.hour.values:
        return False
    if wall.month not in expr.month.values:
        return False
    in_dom = wall.day in expr.dom.values
    in_dow = wall.isoweekday() % 7 in expr.dow.values or (
        wall.isoweekday() == 7 and 7 in expr.dow.values
    )
    if expr.dom.star or expr.dow.star:
        return in_dom and in_dow
    return in_dom or in_dow


def never_fires(expr: Expr) -> bool:
    if not (expr.dom.star or expr.dow.star):
        return False
    # Longest each month ever gets, leap years included.
    longest = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return not any(day <= longest[month] for month in expr.month.values for day in expr.dom.values)


def oracle_slots(expr: Expr, zone: ZoneInfo, start: datetime, end: datetime) -> list[datetime]:
    """Every slot in (start, end], found minute by minute."""
    slots = []
    instant = start.replace(second=0, microsecond=0) + MINUTE
    previous_offset = (instant - MINUTE).astimezone(zone).utcoffset()
    while instant <= end:
        here = instant.astimezone(zone)
        offset = here.utcoffset()
        assert offset is not None and previous_offset is not None
        # `here` itself serves as the wall time: only its fields are read.
        # Debian's rule: a wildcard expression follows the clock as it runs
        # (both folds, nothing for skipped wall times); a fixed-time one fires
        # in the first fold and catches up a gap at its end.
        fires = wall_matches(expr, here) and (here.fold == 0 or expr.wildcard)
        if offset > previous_offset and not expr.wildcard:
            # A gap ends at this instant: the wall times from the old offset
            # up to (not including) the new one never happened.
            assert (instant - timedelta(seconds=1)).astimezone(zone).utcoffset() == previous_offset
            wall = here.replace(tzinfo=None)
            skipped = wall - (offset - previous_offset)
            while skipped < wall:
                fires = fires or wall_matches(expr, skipped)
                skipped += MINUTE
        if fires:
            slots.append(instant)
            if offset > previous_offset and not expr.wildcard:
                event("a fixed-time slot at the end of a DST gap")
            elif offset != previous_offset:
                event("a slot at a DST transition")
            elif here.fold == 1:
                event("a slot in the second fold")
            elif here.replace(fold=1).utcoffset() != offset:
                event("a slot in the first fold")
        previous_offset = offset
        instant += MINUTE
    return slots


def offset_changes(tz: str, start: datetime, end: datetime, step: timedelta) -> tuple[datetime, ...]:
    """UTC instants in [start, end) where the zone's offset changes: probed every `step`,
    each change then found to the second by bisection (`step` must be shorter than the
    time between two changes)."""
    zone = ZoneInfo(tz)
    found = []
    probe = start
    while probe < end:
        following = probe + step
        if probe.astimezone(zone).utcoffset() != following.astimezone(zone).utcoffset():
            low, high = probe, following
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(zone).utcoffset() == low.astimezone(zone).utcoffset():
                    low = middle
                else:
                    high = middle
            found.append(high.replace(microsecond=0))
        probe = following
    return tuple(found)


@cache
def transitions(tz: str) -> tuple[datetime, ...]:
    """UTC instants in 2020-2030 where the zone's offset changes (daily probe: transitions
    are months apart in these zones)."""
    return offset_changes(tz, START, END, timedelta(days=1))


@st.composite
def starts(draw: st.DrawFn, tz: str) -> datetime:
    """Anywhere in 2020-2030, but usually within a day before a transition."""
    near = transitions(tz)
    if near and draw(st.sampled_from(["near", "near", "near", "anywhere"])) == "near":
        transition = draw(st.sampled_from(near))
        # Whole hours spread the start over the day before the transition,
        # mostly close to it so that even every-minute schedules reach it
        # within the compared slots; Hypothesis clusters the seconds near zero,
        # i.e. near exact wall-clock hours.
        hours = draw(st.sampled_from([-1, 0, 0, 1, 1, 2, 3, 6, 12, 23]))
        seconds = draw(st.integers(-3600, 3600))
        return transition - timedelta(hours=hours, seconds=seconds)
    span = int((END - START).total_seconds())
    return START + timedelta(seconds=draw(st.integers(0, span)))


@st.composite
def cases(draw: st.DrawFn) -> tuple[Expr, str, datetime]:
    # Zones with DST transitions in 2020-2030 come up twice as often.
    tz = draw(st.sampled_from(ZONES + [zone for zone in ZONES if transitions(zone)]))
    return draw(expressions()), tz, draw(starts(tz))


# ---------------------------------------------------------------- properties


def test_the_oracle_sees_the_expected_transitions() -> None:
    assert len(transitions("Europe/Berlin")) == 22
    assert transitions("Asia/Kolkata") == ()
    assert transitions("America/Sao_Paulo") == ()  # DST abolished in 2019


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_cron_next_agrees_with_the_brute_force_oracle(case: tuple[Expr, str, datetime]) -> None:
    expr, tz, start = case
    if never_fires(expr):
        with pytest.raises(ScheduleError, match="never fires"):
            parse_cron(expr.text)
        return
    parsed = parse_cron(expr.text)
    end = start + HORIZON
    expected = oracle_slots(expr, ZoneInfo(tz), start, end)

    found = []
    after = start
    while len(found) < COMPARED:
        after = cron_next(parsed, tz, after)
        assert after.tzinfo is UTC
        if after > end:
            break
        found.append(after)
    assert found == expected[:COMPARED], (expr.text, tz, start)
    if found and any(start < moment <= found[-1] for moment in transitions(tz)):
        event("the compared slots span a DST transition")

    for earlier, later in zip(expected, expected[1:COMPARED]):
        assert cron_prev(parsed, tz, later) == earlier, (expr.text, tz, later)
    assert count_slots(parsed, tz, start, end) == len(expected)
