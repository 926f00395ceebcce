"""cron_next, cron_prev and count_slots against cronsim around every DST transition of 2026-2027.

cronsim implements Debian cron's DST rule (cron(8), SPEC §4) on its own: a
fixed-time expression (minute and hour fields both begin with something other
than `*`) catches up a slot skipped by a gap once and fires once in a fold; a
wildcard expression follows the wall clock as it runs. It is the reference
for that rule, so any disagreement here is a cronctl bug, except where cronsim
itself is wrong (zones that shift by 30 minutes; see the README's "Time"
section and test_on_lord_howe_cronctl_follows_the_clock_where_cronsim_misses_the_hour_after_a_change).

The cases are generated, not drawn: for each transition, every minute pattern
is paired with every hour pattern built around the wall hours that move (the
hour before, of and after the change, in both offsets), and the day fields
rotate through `*`, the transition's weekday, its day of the month, and both
(Debian's OR rule). Each case is compared over the 6 hours either side of
the transition; cron_next is also asked from instants that are not slots,
some of them inside the gap's and fold's hours.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from itertools import islice, takewhile
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from cronctl.schedule.cron import count_slots, cron_next, cron_prev
from cronctl.schedule.cronexpr import parse_cron
from tests.unit.test_schedule_oracle import offset_changes

UTC = timezone.utc
ZONES = (
    "Europe/Berlin",
    "Europe/London",
    "America/New_York",
    "America/Santiago",  # changes at midnight, the fold on the Saturday evening
    "America/Havana",  # changes at midnight
    "Australia/Sydney",
)
YEARS = (datetime(2026, 1, 1, tzinfo=UTC), datetime(2028, 1, 1, tzinfo=UTC))
HALF_WINDOW = timedelta(hours=6)
# Starts for cron_next that are not slots: every 37 minutes drifts through
# every minute of the hour, so some starts fall inside the gap's and fold's hours.
PROBE_STEP = timedelta(minutes=37)

MINUTES = ("0", "30", "59", "15,45", "0-4", "10-50/20", "*", "*/15", "*/16", "*/19")
MACROS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *"}


@dataclass(frozen=True)
class Case:
    expr: str
    tz: str
    transition: datetime

    def __str__(self) -> str:
        return f"{self.expr!r} in {self.tz} around {self.transition:%Y-%m-%d %H:%MZ}"


@cache
def transitions(tz: str) -> tuple[datetime, ...]:
    """UTC instants in 2026-2027 where the zone's offset changes (hourly probe + bisection)."""
    probe, end = YEARS
    return offset_changes(tz, probe, end, timedelta(hours=1))


def moving_hours(tz: str, transition: datetime) -> tuple[int, int, int]:
    """The wall hour before the change, the first hour it skips or repeats, and the hour after."""
    zone = ZoneInfo(tz)
    before = (transition - timedelta(seconds=1)).astimezone(zone)
    after = transition.astimezone(zone)
    # Gap: the old clock would have read `before`+1s, the new one jumps ahead.
    # Fold: the clock goes back to an hour it already showed. Either way the
    # hour that moves is the earlier of the two wall readings at the change.
    first_moving = min((before + timedelta(seconds=1)).replace(tzinfo=None), after.replace(tzinfo=None)).hour
    return (first_moving - 1) % 24, first_moving, (first_moving + 1) % 24


def hour_patterns(tz: str, transition: datetime) -> tuple[str, ...]:
    earlier, moving, later = moving_hours(tz, transition)
    return (
        str(moving),
        str(later),
        ",".join(str(hour) for hour in sorted({earlier, moving, later})),
        # A range through the moving hour; at midnight it cannot wrap, so it starts there.
        f"{earlier}-{moving}" if earlier < moving else f"{moving}-{later}",
        f"{moving},{(moving + 2) % 24}",
        "0-23",  # every hour, but fixed-time: it begins with a digit
        "*",
        "*/2",
        "1-23/2",
    )


def day_fields(transition: datetime, tz: str, index: int) -> str:
    """Rotates through: every day, the change's weekday, its day of month, both (OR)."""
    day = (transition - timedelta(seconds=1)).astimezone(ZoneInfo(tz))
    weekday, dom = day.isoweekday() % 7, day.day
    return ("* * *", f"* * {weekday}", f"{dom} * *", f"{dom} * {(weekday + 3) % 7}")[index % 4]


def cases(zones: tuple[str, ...] = ZONES) -> list[Case]:
    found = []
    for tz in zones:
        for transition in transitions(tz):
            index = 0
            for hour in hour_patterns(tz, transition):
                for minute in MINUTES:
                    found.append(Case(f"{minute} {hour} {day_fields(transition, tz, index)}", tz, transition))
                    index += 1
            found += [Case(macro, tz, transition) for macro in MACROS]
    return found


def cronsim_slots(case: Case, start: datetime, end: datetime) -> list[datetime]:
    """cronsim's slots in (start, end], as aware UTC."""
    expr = MACROS.get(case.expr, case.expr)  # cronsim reads five fields only
    ahead = CronSim(expr, start.astimezone(ZoneInfo(case.tz)))
    return [slot.astimezone(UTC) for slot in takewhile(lambda slot: slot <= end, ahead)]


def cronctl_slots(case: Case, start: datetime, end: datetime) -> list[datetime]:
    parsed = parse_cron(case.expr)
    found = []
    after = cron_next(parsed, case.tz, start)
    while after <= end:
        found.append(after)
        after = cron_next(parsed, case.tz, after)
    return found


def disagreements(case: Case) -> list[str]:
    """Every way cronctl's slots around the transition differ from cronsim's."""
    start, end = case.transition - HALF_WINDOW, case.transition + HALF_WINDOW
    expected = cronsim_slots(case, start, end)
    found = cronctl_slots(case, start, end)
    if found != expected:
        missing = sorted(set(expected) - set(found))[:3]
        extra = sorted(set(found) - set(expected))[:3]
        return [f"{case}: cron_next differs; cronsim only {missing}, cronctl only {extra}"]
    problems = []
    parsed = parse_cron(case.expr)
    for earlier, later in zip(expected, expected[1:]):
        if cron_prev(parsed, case.tz, later) != earlier:
            problems.append(f"{case}: cron_prev({later}) is not {earlier}")
    probe = start + timedelta(seconds=7)
    while expected and probe < expected[-1]:
        wanted = next(slot for slot in expected if slot > probe)
        if cron_next(parsed, case.tz, probe) != wanted:
            problems.append(f"{case}: cron_next({probe}) is not {wanted}")
        probe += PROBE_STEP
    if count_slots(parsed, case.tz, start, end) != len(expected):
        problems.append(f"{case}: count_slots is not {len(expected)}")
    return problems


# ---------------------------------------------------------------- the comparison


def test_every_zone_has_its_four_transitions_of_2026_and_2027() -> None:
    assert {tz: len(transitions(tz)) for tz in ZONES} == {tz: 4 for tz in ZONES}
    # Havana and Santiago change at midnight, so the moving hour is 0 or 23.
    assert {moving_hours("America/Havana", t)[1] for t in transitions("America/Havana")} == {0}
    assert {moving_hours("America/Santiago", t)[1] for t in transitions("America/Santiago")} == {0, 23}
    assert {moving_hours("Europe/Berlin", t)[1] for t in transitions("Europe/Berlin")} == {2}


def test_the_cases_mix_fixed_time_and_wildcard_expressions() -> None:
    parsed = [parse_cron(case.expr) for case in cases()]
    fixed = sum(expr.fixed_time for expr in parsed)
    assert len(parsed) == 24 * (len(MINUTES) * 9 + len(MACROS))
    assert 0.3 < fixed / len(parsed) < 0.7


@pytest.mark.slow
def test_cronctl_agrees_with_cronsim_around_every_transition() -> None:
    problems = [problem for case in cases() for problem in disagreements(case)]
    assert problems == [], f"{len(problems)} disagreements, first: " + "\n".join(problems[:10])


# ---------------------------------------------------------------- where cronsim is wrong

LORD_HOWE = "Australia/Lord_Howe"


def clock_slots(case: Case, start: datetime, end: datetime) -> list[datetime]:
    """A wildcard expression's slots in (start, end] by reading the wall clock at every UTC minute."""
    parsed, zone = parse_cron(case.expr), ZoneInfo(case.tz)
    found = []
    instant = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while instant <= end:
        wall = instant.astimezone(zone)
        in_dom, in_dow = wall.day in parsed.days, wall.isoweekday() % 7 in parsed.weekdays
        day = in_dom and in_dow if parsed.dom_star or parsed.dow_star else in_dom or in_dow
        if wall.minute in parsed.minutes and wall.hour in parsed.hours and wall.month in parsed.months and day:
            found.append(instant)
        instant += timedelta(minutes=1)
    return found


def test_on_lord_howe_cronctl_follows_the_clock_where_cronsim_misses_the_hour_after_a_change() -> None:
    """Lord Howe shifts by 30 minutes. For wildcard expressions cronsim steps by elapsed
    time (an hour, or a jump of minutes to the next match) and then reads the clock,
    which across the change has moved 30 minutes more or less than the step: it
    overshoots wall times the clock shows in the hour after the change. Its
    fixed-time path walks wall times and is right there.

    What the README's "Time" section says, checked on every generated case: fixed-time
    expressions agree with cronsim; wildcard ones match the wall clock read minute by
    minute, and cronsim's slots are cronctl's minus some in the hour after the change.
    """
    short = 0
    for case in cases((LORD_HOWE,)):
        start, end = case.transition - HALF_WINDOW, case.transition + HALF_WINDOW
        ours, theirs = cronctl_slots(case, start, end), cronsim_slots(case, start, end)
        if parse_cron(case.expr).fixed_time:
            assert ours == theirs, case
            continue
        assert ours == clock_slots(case, start, end), case
        missed = set(ours) - set(theirs)
        assert set(theirs) <= set(ours), case
        assert all(case.transition <= slot < case.transition + timedelta(hours=1) for slot in missed), case
        short += bool(missed)
    if short == 0:
        pytest.fail("cronsim no longer misses slots on Lord Howe: drop the README's note and compare this zone "
                    "in test_cronctl_agrees_with_cronsim_around_every_transition")


def test_the_lord_howe_case_the_readme_cites() -> None:
    """2026-04-05 02:00 +11:00 -> 01:30 +10:30: the clock then shows 02:00, 02:19 and
    02:38 once each (15:30Z, 15:49Z, 16:08Z); cronsim starts `*/19 2 * * *` at 02:38."""
    zone = ZoneInfo(LORD_HOWE)
    start = datetime(2026, 4, 4, 12, 0, tzinfo=zone)
    clock = [datetime(2026, 4, 4, 15, minute, tzinfo=UTC).astimezone(zone) for minute in (30, 49)]
    assert [moment.isoformat(timespec="minutes") for moment in clock] == [
        "2026-04-05T02:00+10:30", "2026-04-05T02:19+10:30"]

    ours = []
    after = start
    for _ in range(4):
        after = cron_next(parse_cron("*/19 2 * * *"), LORD_HOWE, after)
        ours.append(after.astimezone(zone).isoformat(timespec="minutes"))
    assert ours == ["2026-04-05T02:00+10:30", "2026-04-05T02:19+10:30",
                    "2026-04-05T02:38+10:30", "2026-04-05T02:57+10:30"]
    theirs = [slot.isoformat(timespec="minutes") for slot in islice(CronSim("*/19 2 * * *", start), 2)]
    assert theirs in (ours[:2], ["2026-04-05T02:38+10:30", "2026-04-05T02:57+10:30"])
