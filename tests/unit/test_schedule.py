from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronctl.errors import ScheduleError
from cronctl.schedule.cron import count_slots, cron_cadence, cron_next, cron_prev
from cronctl.schedule.cronexpr import describe_cron, parse_cron
from cronctl.schedule.intervals import default_grace, every_count, every_next, jitter_offset, parse_at, retry_delay
from cronctl.schedule.zones import check_timezone

UTC = timezone.utc
BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"
LORD_HOWE = "Australia/Lord_Howe"
HAVANA = "America/Havana"


def local(tz: str, text: str, fold: int = 0) -> datetime:
    """A local wall time as aware UTC, e.g. local(BERLIN, '2026-10-25 02:30', fold=1).

    Converted to UTC because Python never finds a fold=1 time equal to a time
    in another zone (PEP 495), which would make comparisons meaningless.
    """
    wall = datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz), fold=fold)
    return wall.astimezone(UTC)


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def next_slots(expr: str, tz: str, after: datetime, count: int) -> list[datetime]:
    parsed = parse_cron(expr)
    slots = []
    for _ in range(count):
        after = cron_next(parsed, tz, after)
        slots.append(after)
    return slots


def as_local(slots: list[datetime], tz: str) -> list[str]:
    """Slots as local ISO strings with offsets, which makes DST cases readable."""
    return [slot.astimezone(ZoneInfo(tz)).isoformat(timespec="minutes") for slot in slots]


# ---------------------------------------------------------------- DST tables

# Debian's DST rule (cron(8), SPEC §4): fixed-time expressions (minute and hour
# both begin with something other than `*`) catch up a gap once at its end and
# fire once, in the first fold; wildcard ones follow the clock as it runs.
DST_CASES = [
    # Berlin spring forward, 2026-03-29 02:00 CET -> 03:00 CEST.
    (
        "30 2 * * *",
        BERLIN,
        "2026-03-28 12:00",
        ["2026-03-29T03:00+02:00", "2026-03-30T02:30+02:00"],
    ),
    (
        "0,15,30,45 2 * * *",
        BERLIN,
        "2026-03-28 12:00",
        ["2026-03-29T03:00+02:00", "2026-03-30T02:00+02:00"],
    ),
    # Fixed-time: 02:00 and 02:30 collapse into one catch-up at 03:00, which
    # is also the real 03:00.
    (
        "0,30 1-3 * * *",
        BERLIN,
        "2026-03-29 00:45",
        [
            "2026-03-29T01:00+01:00",
            "2026-03-29T01:30+01:00",
            "2026-03-29T03:00+02:00",
            "2026-03-29T03:30+02:00",
        ],
    ),
    # Wildcards: 02:00-02:59 never shows on the clock, so only real wall times fire.
    (
        "*/20 2-3 * * *",
        BERLIN,
        "2026-03-29 01:00",
        ["2026-03-29T03:00+02:00", "2026-03-29T03:20+02:00", "2026-03-29T03:40+02:00"],
    ),
    (
        "30 * * * *",
        BERLIN,
        "2026-03-29 00:45",
        ["2026-03-29T01:30+01:00", "2026-03-29T03:30+02:00", "2026-03-29T04:30+02:00"],
    ),
    (
        "*/15 2 * * *",
        BERLIN,
        "2026-03-28 02:40",
        ["2026-03-28T02:45+01:00", "2026-03-30T02:00+02:00", "2026-03-30T02:15+02:00"],
    ),
    (
        "*/15 * * * *",
        BERLIN,
        "2026-03-29 01:40",
        ["2026-03-29T01:45+01:00", "2026-03-29T03:00+02:00", "2026-03-29T03:15+02:00"],
    ),
    (
        "0 * * * *",
        BERLIN,
        "2026-03-29 00:30",
        ["2026-03-29T01:00+01:00", "2026-03-29T03:00+02:00", "2026-03-29T04:00+02:00"],
    ),
    # Berlin fall back, 2026-10-25 03:00 CEST -> 02:00 CET.
    (
        "30 2 * * *",
        BERLIN,
        "2026-10-24 12:00",
        ["2026-10-25T02:30+02:00", "2026-10-26T02:30+01:00"],
    ),
    # Every hour, but fixed-time: `0-23` begins with a digit.
    (
        "30 0-23 * * *",
        BERLIN,
        "2026-10-25 01:00",
        ["2026-10-25T01:30+02:00", "2026-10-25T02:30+02:00", "2026-10-25T03:30+01:00"],
    ),
    # A wildcard minute is enough to follow the clock through both folds.
    (
        "*/16 2 * * *",
        BERLIN,
        "2026-10-25 01:00",
        [
            "2026-10-25T02:00+02:00",
            "2026-10-25T02:16+02:00",
            "2026-10-25T02:32+02:00",
            "2026-10-25T02:48+02:00",
            "2026-10-25T02:00+01:00",
            "2026-10-25T02:16+01:00",
            "2026-10-25T02:32+01:00",
            "2026-10-25T02:48+01:00",
            "2026-10-26T02:00+01:00",
        ],
    ),
    (
        "0 * * * *",
        BERLIN,
        "2026-10-25 01:30",
        ["2026-10-25T02:00+02:00", "2026-10-25T02:00+01:00", "2026-10-25T03:00+01:00"],
    ),
    (
        "@hourly",
        BERLIN,
        "2026-10-25 01:30",
        ["2026-10-25T02:00+02:00", "2026-10-25T02:00+01:00", "2026-10-25T03:00+01:00"],
    ),
    (
        "30 */2 * * *",
        BERLIN,
        "2026-10-25 01:00",
        ["2026-10-25T02:30+02:00", "2026-10-25T02:30+01:00", "2026-10-25T04:30+01:00"],
    ),
    # New York, 2026-03-08 02:00 EST -> 03:00 EDT and 2026-11-01 02:00 EDT -> 01:00 EST.
    (
        "30 2 * * *",
        NEW_YORK,
        "2026-03-07 12:00",
        ["2026-03-08T03:00-04:00", "2026-03-09T02:30-04:00"],
    ),
    (
        "30 1 * * *",
        NEW_YORK,
        "2026-10-31 12:00",
        ["2026-11-01T01:30-04:00", "2026-11-02T01:30-05:00"],
    ),
    (
        "*/30 * * * *",
        NEW_YORK,
        "2026-11-01 00:45",
        [
            "2026-11-01T01:00-04:00",
            "2026-11-01T01:30-04:00",
            "2026-11-01T01:00-05:00",
            "2026-11-01T01:30-05:00",
            "2026-11-01T02:00-05:00",
        ],
    ),
    # Havana changes at midnight: 2026-03-08 00:00 CST -> 01:00 CDT and
    # 2026-11-01 01:00 CDT -> 00:00 CST.
    (
        "30 0 * * *",
        HAVANA,
        "2026-03-07 12:00",
        ["2026-03-08T01:00-04:00", "2026-03-09T00:30-04:00"],
    ),
    (
        "30 * * * *",
        HAVANA,
        "2026-03-07 23:00",
        ["2026-03-07T23:30-05:00", "2026-03-08T01:30-04:00"],
    ),
    (
        "*/30 0 * * *",
        HAVANA,
        "2026-10-31 23:45",
        [
            "2026-11-01T00:00-04:00",
            "2026-11-01T00:30-04:00",
            "2026-11-01T00:00-05:00",
            "2026-11-01T00:30-05:00",
            "2026-11-02T00:00-05:00",
        ],
    ),
    (
        "0 0 * * *",
        HAVANA,
        "2026-10-31 23:45",
        ["2026-11-01T00:00-04:00", "2026-11-02T00:00-05:00"],
    ),
    # Lord Howe moves by 30 minutes: 2026-04-05 02:00 -> 01:30, 2026-10-04 02:00 -> 02:30.
    (
        "45 1 * * *",
        LORD_HOWE,
        "2026-04-04 12:00",
        ["2026-04-05T01:45+11:00", "2026-04-06T01:45+10:30"],
    ),
    (
        "*/15 * * * *",
        LORD_HOWE,
        "2026-04-05 01:20",
        [
            "2026-04-05T01:30+11:00",
            "2026-04-05T01:45+11:00",
            "2026-04-05T01:30+10:30",
            "2026-04-05T01:45+10:30",
            "2026-04-05T02:00+10:30",
        ],
    ),
    (
        "15 2 * * *",
        LORD_HOWE,
        "2026-10-03 12:00",
        ["2026-10-04T02:30+11:00", "2026-10-05T02:15+11:00"],
    ),
    (
        "0,45 2 * * *",
        LORD_HOWE,
        "2026-10-04 01:00",
        ["2026-10-04T02:30+11:00", "2026-10-04T02:45+11:00", "2026-10-05T02:00+11:00"],
    ),
    (
        "*/10 2 * * *",
        LORD_HOWE,
        "2026-10-04 01:00",
        ["2026-10-04T02:30+11:00", "2026-10-04T02:40+11:00", "2026-10-04T02:50+11:00"],
    ),
    # 02:00-02:59 exists once after the fold (01:30-01:59 repeats); cronsim
    # starts at 02:38 here (README, "Time").
    (
        "*/19 2 * * *",
        LORD_HOWE,
        "2026-04-04 12:00",
        [
            "2026-04-05T02:00+10:30",
            "2026-04-05T02:19+10:30",
            "2026-04-05T02:38+10:30",
            "2026-04-05T02:57+10:30",
        ],
    ),
]


@pytest.mark.parametrize(("expr", "tz", "start", "expected"), DST_CASES)
def test_cron_next_follows_the_dst_rules(
    expr: str, tz: str, start: str, expected: list[str]
) -> None:
    slots = next_slots(expr, tz, local(tz, start), len(expected))
    assert as_local(slots, tz) == expected


@pytest.mark.parametrize(("expr", "tz", "start", "expected"), DST_CASES)
def test_cron_prev_walks_the_same_slots_backwards(
    expr: str, tz: str, start: str, expected: list[str]
) -> None:
    parsed = parse_cron(expr)
    slots = next_slots(expr, tz, local(tz, start), len(expected))
    for earlier, later in zip(slots, slots[1:]):
        assert cron_prev(parsed, tz, later) == earlier
        # Strictly before, also from just after the later slot.
        assert cron_prev(parsed, tz, later + timedelta(seconds=1)) == later


def test_fixed_time_fires_exactly_once_on_the_fall_back_night() -> None:
    night = (utc("2026-10-24 20:00"), utc("2026-10-25 06:00"))
    assert count_slots(parse_cron("30 2 * * *"), BERLIN, *night) == 1


def test_fixed_time_fires_once_at_three_on_the_spring_forward_night() -> None:
    parsed = parse_cron("30 2 * * *")
    night = (utc("2026-03-28 20:00"), utc("2026-03-29 06:00"))
    assert count_slots(parsed, BERLIN, *night) == 1
    assert cron_next(parsed, BERLIN, night[0]) == local(BERLIN, "2026-03-29 03:00")


def test_quarter_hours_fire_in_both_folds_of_the_fall_back_night() -> None:
    # Wall 02:00 CEST is 00:00 UTC; wall 03:00 CET is 02:00 UTC: two hours of
    # elapsed time between them, so eight quarter-hour slots.
    start = local(BERLIN, "2026-10-25 02:00") - timedelta(seconds=1)
    end = local(BERLIN, "2026-10-25 03:00") - timedelta(seconds=1)
    assert count_slots(parse_cron("*/15 * * * *"), BERLIN, start, end) == 8


def test_a_gap_slot_is_not_duplicated_by_the_real_slot_at_the_same_instant() -> None:
    parsed = parse_cron("0 2,3 * * *")
    slots = next_slots("0 2,3 * * *", BERLIN, local(BERLIN, "2026-03-29 00:00"), 2)
    assert as_local(slots, BERLIN) == ["2026-03-29T03:00+02:00", "2026-03-30T02:00+02:00"]
    assert count_slots(parsed, BERLIN, utc("2026-03-28 23:00"), utc("2026-03-29 23:00")) == 1


def test_next_from_inside_the_second_fold_finds_the_remaining_repeats() -> None:
    after = local(BERLIN, "2026-10-25 02:20", fold=1)
    for wildcard in ("*/15 * * * *", "*/15 2 * * *"):
        assert cron_next(parse_cron(wildcard), BERLIN, after) == local(BERLIN, "2026-10-25 02:30", fold=1)
    fixed = parse_cron("0,15,30,45 2 * * *")
    assert as_local([cron_next(fixed, BERLIN, after)], BERLIN) == ["2026-10-26T02:00+01:00"]


def test_next_from_the_first_fold_still_reaches_the_repeats_of_wall_times_behind_it() -> None:
    # From 02:40 CEST, 02:00 and 02:20 have fired once and repeat after 02:40 CEST.
    after = local(BERLIN, "2026-10-25 02:40")
    assert as_local(next_slots("*/20 2 * * *", BERLIN, after, 4), BERLIN) == [
        "2026-10-25T02:00+01:00",
        "2026-10-25T02:20+01:00",
        "2026-10-25T02:40+01:00",
        "2026-10-26T02:00+01:00",
    ]


def test_repeats_behind_a_first_fold_start_come_before_the_next_fold_a_year_later() -> None:
    # Every match is on Berlin's fall-back night (the Sunday of 25-31 October), so
    # the next wall time after the fold is itself in a fold, a year later.
    after = local(BERLIN, "2026-10-25 02:30")
    assert as_local(next_slots("*/20 2 25-31 10 */7", BERLIN, after, 5), BERLIN) == [
        "2026-10-25T02:40+02:00",
        "2026-10-25T02:00+01:00",
        "2026-10-25T02:20+01:00",
        "2026-10-25T02:40+01:00",
        "2027-10-31T02:00+02:00",
    ]


@pytest.mark.parametrize(
    ("expr", "fixed"),
    [
        ("30 2 * * *", True),
        ("0,30 1-3 * * *", True),
        ("30 0-23 * * *", True),
        ("@daily", True),
        ("30 * * * *", False),
        ("*/15 2 * * *", False),
        ("0 */2 * * *", False),
        ("* * * * *", False),
        ("@hourly", False),
    ],
)
def test_the_first_character_of_minute_and_hour_decides_whether_a_time_is_fixed(
    expr: str, fixed: bool
) -> None:
    assert parse_cron(expr).fixed_time is fixed


def test_a_wildcard_schedule_fires_nothing_for_the_wall_times_a_gap_skips() -> None:
    # The case: Debian's cron runs `30 * * * *` at 03:30 only, not also at 03:00.
    night = (local(BERLIN, "2026-03-29 01:45"), local(BERLIN, "2026-03-29 03:45"))
    assert count_slots(parse_cron("30 * * * *"), BERLIN, *night) == 1
    assert count_slots(parse_cron("*/15 2 * * *"), BERLIN, *night) == 0


def test_a_wildcard_schedule_whose_every_match_is_skipped_by_gaps_is_refused() -> None:
    # 02:xx on the Sunday of 25-31 March is always inside Berlin's spring gap.
    parsed = parse_cron("*/5 2 25-31 3 */7")
    with pytest.raises(ScheduleError, match="every wall time it matches falls in a DST gap"):
        cron_next(parsed, BERLIN, utc("2026-01-01 00:00"))
    assert cron_next(parsed, "UTC", utc("2026-01-01 00:00")) == utc("2026-03-29 02:00")
    # In 1980 Germany's summer time began on 6 April, so the past still has a slot.
    assert cron_prev(parsed, BERLIN, utc("2026-01-01 00:00")) == local(BERLIN, "1980-03-30 02:55")


def test_every_follows_elapsed_time_through_both_dst_changes() -> None:
    for start in (utc("2026-03-28 23:30"), utc("2026-10-24 23:30")):
        slots = [start]
        for _ in range(6):
            slots.append(every_next(slots[-1], 1800, slots[-1]))
        assert {later - earlier for earlier, later in zip(slots, slots[1:])} == {timedelta(minutes=30)}


def test_next_from_the_first_fold_sees_repeats_of_earlier_wall_times() -> None:
    # After 02:50 CEST, the next `*/30 */30,2` slot is 02:00 CET, whose wall
    # time lies before the start's; the next calendar match is a day later.
    parsed = parse_cron("0,30 */30,2 * * *")
    after = local(BERLIN, "2026-10-25 02:50")
    assert as_local(next_slots("0,30 */30,2 * * *", BERLIN, after, 3), BERLIN) == [
        "2026-10-25T02:00+01:00",
        "2026-10-25T02:30+01:00",
        "2026-10-26T00:00+01:00",
    ]
    assert cron_prev(parsed, BERLIN, local(BERLIN, "2026-10-25 23:00")) == local(
        BERLIN, "2026-10-25 02:30", fold=1
    )


def test_after_may_be_given_in_any_zone() -> None:
    parsed = parse_cron("0 3 * * *")
    in_tokyo = datetime(2026, 6, 1, 12, 0, tzinfo=ZoneInfo("Asia/Tokyo"))
    assert cron_next(parsed, BERLIN, in_tokyo) == utc("2026-06-02 01:00")
    assert cron_next(parsed, BERLIN, in_tokyo).tzinfo is UTC


def test_next_is_strictly_after_a_slot() -> None:
    parsed = parse_cron("0 3 * * *")
    slot = utc("2026-06-02 03:00")
    assert cron_next(parsed, "UTC", slot) == utc("2026-06-03 03:00")
    assert cron_next(parsed, "UTC", slot - timedelta(microseconds=1)) == slot


def test_naive_instants_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        cron_next(parse_cron("* * * * *"), "UTC", datetime(2026, 1, 1))


# ---------------------------------------------------------------- calendar tables


def midnights(expr: str, start: str, count: int) -> list[date]:
    slots = next_slots(expr, "UTC", utc(start), count)
    return [slot.date() for slot in slots]


def test_day_31_fires_only_in_long_months() -> None:
    assert midnights("0 0 31 * *", "2026-01-31 00:00", 5) == [
        date(2026, 3, 31),
        date(2026, 5, 31),
        date(2026, 7, 31),
        date(2026, 8, 31),
        date(2026, 10, 31),
    ]


def test_february_29_fires_on_leap_days_only() -> None:
    assert midnights("0 0 29 2 *", "2026-01-01 00:00", 2) == [date(2028, 2, 29), date(2032, 2, 29)]
    # 2100 is not a leap year.
    assert midnights("0 0 29 2 *", "2096-03-01 00:00", 1) == [date(2104, 2, 29)]


def test_day_of_month_and_weekday_combine_with_or_when_both_are_restricted() -> None:
    # April 2026: Fridays are 3, 10, 17, 24; the 13th is a Monday.
    assert midnights("0 0 13 * 5", "2026-04-01 00:00", 5) == [
        date(2026, 4, 3),
        date(2026, 4, 10),
        date(2026, 4, 13),
        date(2026, 4, 17),
        date(2026, 4, 24),
    ]


def test_a_star_step_in_day_of_month_counts_as_unrestricted_so_they_combine_with_and() -> None:
    # Odd days of the month that are Fridays.
    assert midnights("0 0 */2 * 5", "2026-04-01 00:00", 4) == [
        date(2026, 4, 3),
        date(2026, 4, 17),
        date(2026, 5, 1),
        date(2026, 5, 15),
    ]


def test_a_star_step_in_day_of_week_also_makes_them_combine_with_and() -> None:
    # The 13th when it is a Sunday, Tuesday, Thursday or Saturday.
    assert midnights("0 0 13 * */2", "2026-01-01 00:00", 3) == [
        date(2026, 1, 13),
        date(2026, 6, 13),
        date(2026, 8, 13),
    ]


def test_weekday_alone_fires_every_such_weekday() -> None:
    assert midnights("0 0 * * 5", "2026-04-01 00:00", 3) == [
        date(2026, 4, 3),
        date(2026, 4, 10),
        date(2026, 4, 17),
    ]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0 0 * * 7", "0 0 * * 0"),
        ("0 0 * * sun", "0 0 * * 0"),
        ("0 0 * * mon-fri", "0 0 * * 1-5"),
        ("0 0 * * fri-sun", "0 0 * * 0,5,6"),
        ("0 0 * * 5-7", "0 0 * * 0,5,6"),
        ("0 0 1 jan,Jul *", "0 0 1 1,7 *"),
        ("0 0 * * */2", "0 0 * * 0,2,4,6"),
        ("10-50/20 * * * *", "10,30,50 * * * *"),
        ("*/25 * * * *", "0,25,50 * * * *"),
    ],
)
def test_equivalent_spellings_give_the_same_slots(a: str, b: str) -> None:
    start = utc("2026-02-26 05:00")
    assert next_slots(a, "UTC", start, 12) == next_slots(b, "UTC", start, 12)


@pytest.mark.parametrize(
    ("macro", "start", "expected"),
    [
        ("@yearly", "2026-03-01 00:00", "2027-01-01 00:00"),
        ("@annually", "2026-03-01 00:00", "2027-01-01 00:00"),
        ("@monthly", "2026-03-01 00:00", "2026-04-01 00:00"),
        ("@weekly", "2026-03-01 00:00", "2026-03-08 00:00"),  # Sundays
        ("@daily", "2026-03-01 00:00", "2026-03-02 00:00"),
        ("@midnight", "2026-03-01 00:00", "2026-03-02 00:00"),
        ("@hourly", "2026-03-01 00:00", "2026-03-01 01:00"),
        ("@DAILY", "2026-03-01 00:00", "2026-03-02 00:00"),
    ],
)
def test_macros_expand_to_their_five_field_schedules(macro: str, start: str, expected: str) -> None:
    assert cron_next(parse_cron(macro), "UTC", utc(start)) == utc(expected)


def test_expression_text_is_normalized() -> None:
    assert parse_cron("  0   3 * *  MON ").text == "0 3 * * mon"
    assert parse_cron("@Daily").text == "@daily"


# ---------------------------------------------------------------- rejection


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("0 0 32 * *", "cron '0 0 32 * *': day-of-month value 32 out of range 1-31"),
        ("60 * * * *", "minute value 60 out of range 0-59"),
        ("0 24 * * *", "hour value 24 out of range 0-23"),
        ("0 0 0 * *", "day-of-month value 0 out of range 1-31"),
        ("0 0 * 13 *", "month value 13 out of range 1-12"),
        ("0 0 * * 8", "day-of-week value 8 out of range 0-7"),
        ("0 0 * foo *", "month 'foo' is not a number"),
        ("² * * * *", "minute '²' is not a number"),
        ("0 0 * * mon-", "day-of-week 'mon-' is neither a value nor a range"),
        ("5-1 * * * *", "minute range 5-1 runs backwards"),
        ("*/0 * * * *", "minute step 0 never advances"),
        ("5/15 * * * *", "write 5-59/15 or */15"),
        ("1,,2 * * * *", "minute empty list item"),
        ("0 0 L * *", "not supported"),
        ("0 0 * * 5#2", "not supported"),
        ("0 0 ? * *", "not supported"),
        ("0 0 * * * *", "6 fields"),
        ("0 0 0 * * * 2026", "7 fields"),
        ("0 0 * *", "4 fields"),
        ("", "empty expression"),
        ("@reboot", "@reboot is not supported"),
        ("@reboot", "cronctl run"),
        ("@every 5m", "unknown macro"),
        ("0 0 30 2 *", "cron '0 0 30 2 *': never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("0 0 30,31 2 *", "never fires"),
        ("0 0 31 2 */2", "never fires"),
    ],
)
def test_bad_expressions_are_rejected_naming_the_field(expr: str, message: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_cron(expr)
    assert message in str(caught.value)


@pytest.mark.parametrize("expr", ["0 0 29 2 *", "0 0 30 2 5", "0 0 31 4 mon", "0 0 30,31 2,3 *"])
def test_expressions_that_fire_somewhere_are_accepted(expr: str) -> None:
    assert cron_next(parse_cron(expr), "UTC", utc("2026-01-01 00:00")) > utc("2026-01-01 00:00")


def test_never_firing_expressions_are_rejected_quickly() -> None:
    for expr in ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "* * 30,31 feb *"]:
        began = time.perf_counter()
        with pytest.raises(ScheduleError):
            parse_cron(expr)
        assert time.perf_counter() - began < 0.010


# ---------------------------------------------------------------- counts and cadence


def test_count_slots_counts_the_half_open_window_and_stops_at_the_limit() -> None:
    parsed = parse_cron("*/10 * * * *")
    start, end = utc("2026-05-01 00:00"), utc("2026-05-01 01:00")
    assert count_slots(parsed, "UTC", start, end) == 6  # 00:10 ... 01:00
    assert count_slots(parsed, "UTC", start, end, limit=4) == 4
    assert count_slots(parsed, "UTC", end, start) == 0


def test_cadence_is_the_gap_to_the_next_slot() -> None:
    assert cron_cadence(parse_cron("*/15 * * * *"), "UTC", utc("2026-05-01 00:15")) == 900
    daily = parse_cron("30 2 * * *")
    # The spring-forward slot fires at 03:00, so the next day's 02:30 is 23.5 h later.
    assert cron_cadence(daily, BERLIN, local(BERLIN, "2026-03-29 03:00")) == 23.5 * 3600


def test_a_typical_next_computation_is_fast() -> None:
    parsed = parse_cron("*/5 * * * *")
    after = utc("2026-05-01 10:07:13")
    began = time.perf_counter()
    for _ in range(1000):
        cron_next(parsed, BERLIN, after)
    # Generous bound for slow CI; typically about 35 µs per call.
    assert (time.perf_counter() - began) / 1000 < 0.001


# ---------------------------------------------------------------- every


def test_every_next_is_the_first_grid_slot_after() -> None:
    prev = utc("2026-05-01 00:00")
    assert every_next(prev, 30, prev) == prev + timedelta(seconds=30)
    assert every_next(prev, 30, prev + timedelta(seconds=29)) == prev + timedelta(seconds=30)
    assert every_next(prev, 30, prev + timedelta(seconds=30)) == prev + timedelta(seconds=60)
    assert every_next(prev, 30, prev - timedelta(hours=1)) == prev + timedelta(seconds=30)
    # Ten days of downtime is one step, not a loop.
    assert every_next(prev, 0.1, prev + timedelta(days=10, microseconds=1)) == prev + timedelta(
        days=10, milliseconds=100
    )


def test_every_count_counts_grid_slots_up_to_and_including_end() -> None:
    prev = utc("2026-05-01 00:00")
    assert every_count(prev, 60, prev + timedelta(minutes=5)) == 5
    assert every_count(prev, 60, prev + timedelta(minutes=5) - timedelta(microseconds=1)) == 4
    assert every_count(prev, 60, prev - timedelta(minutes=5)) == 0


def test_every_refuses_a_zero_interval() -> None:
    with pytest.raises(ValueError):
        every_next(utc("2026-05-01 00:00"), 0, utc("2026-05-01 00:00"))


@given(
    prev_us=st.integers(0, 10**15),
    interval_ms=st.integers(1, 10 * 86_400_000),
    delta_us=st.integers(-(10**12), 10**14),
)
def test_every_next_is_after_and_on_the_grid(prev_us: int, interval_ms: int, delta_us: int) -> None:
    prev = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(microseconds=prev_us)
    after = prev + timedelta(microseconds=delta_us)
    interval = interval_ms / 1000
    slot = every_next(prev, interval, after)
    assert slot > after
    steps, remainder = divmod(slot - prev, timedelta(milliseconds=interval_ms))
    assert remainder == timedelta(0) and steps >= 1
    # It is the first such slot: one step earlier is either the previous slot or not after.
    assert steps == 1 or slot - timedelta(milliseconds=interval_ms) <= after
    assert every_count(prev, interval, slot) == steps


# ---------------------------------------------------------------- at


@pytest.mark.parametrize(
    ("value", "tz", "expected"),
    [
        ("2026-12-24T09:00:00+01:00", BERLIN, "2026-12-24 08:00"),
        ("2026-12-24T09:00:00Z", BERLIN, "2026-12-24 09:00"),
        ("2026-12-24 09:00", BERLIN, "2026-12-24 08:00"),
        ("2026-12-24T09:00:30.5", "UTC", "2026-12-24 09:00:30.500"),
        # Skipped wall time: the first instant after the gap.
        ("2026-03-29T02:30", BERLIN, "2026-03-29 01:00"),
        # Repeated wall time: the first occurrence.
        ("2026-10-25T02:30", BERLIN, "2026-10-25 00:30"),
        (datetime(2026, 12, 24, 9, 0), BERLIN, "2026-12-24 08:00"),
        (datetime(2026, 12, 24, 9, 0, tzinfo=UTC), BERLIN, "2026-12-24 09:00"),
    ],
)
def test_parse_at_returns_aware_utc(value: str | datetime, tz: str, expected: str) -> None:
    parsed = parse_at(value, tz)
    assert parsed == utc(expected)
    assert parsed.tzinfo is UTC


@pytest.mark.parametrize(
    "value", ["tomorrow", "", "2026-12-24", "2026-13-01T00:00", date(2026, 12, 24), 5]
)
def test_parse_at_rejects_what_is_not_a_date_and_time(value: object) -> None:
    with pytest.raises(ScheduleError, match="ISO 8601"):
        parse_at(value, "UTC")  # type: ignore[arg-type]


# ---------------------------------------------------------------- zones and policies


def test_check_timezone_returns_the_zone() -> None:
    assert check_timezone(BERLIN) == ZoneInfo(BERLIN)


@pytest.mark.parametrize("tz", ["Mars/Base", "", "../etc/passwd", "/etc/localtime"])
def test_unknown_time_zones_are_rejected_with_the_fix(tz: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        check_timezone(tz)
    assert str(caught.value) == (
        f"unknown time zone {tz!r}: use an IANA name like Europe/Berlin or UTC"
    )


def test_cron_functions_reject_an_unknown_zone() -> None:
    with pytest.raises(ScheduleError, match="Mars/Base"):
        cron_next(parse_cron("* * * * *"), "Mars/Base", utc("2026-01-01 00:00"))


@pytest.mark.parametrize(
    ("cadence", "grace"), [(60, 120), (240, 120), (600, 300), (86_400, 7200), (30, 120)]
)
def test_default_grace_is_half_the_cadence_clamped(cadence: float, grace: float) -> None:
    assert default_grace(cadence) == grace


def test_retry_delay_doubles_and_is_capped_at_the_cadence() -> None:
    assert [retry_delay(attempt, 60, 600) for attempt in range(1, 6)] == [60, 120, 240, 480, 600]
    assert retry_delay(4, 60, None) == 480
    assert retry_delay(10_000, 1, None) > 0


def test_jitter_is_stable_in_range_and_spread_between_jobs() -> None:
    offsets = {jitter_offset(f"job-{index}", 30) for index in range(200)}
    assert all(0 <= offset < 30 for offset in offsets)
    assert len(offsets) > 150
    assert jitter_offset("backup", 30) == jitter_offset("backup", 30)
    assert jitter_offset("backup", 0) == 0


@given(st.text(max_size=20), st.floats(min_value=0.001, max_value=1e6))
def test_jitter_stays_below_the_bound(name: str, jitter: float) -> None:
    assert 0 <= jitter_offset(name, jitter) < jitter


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("0 3 * * *", "at 03:00 every day"),
        ("30 8,18 * * mon-fri", "at 08:30, 18:30 on Mon, Tue, Wed, Thu, Fri"),
        ("*/15 * * * *", "every 15 minutes every day"),
        ("0 0 1 * *", "at 00:00 on day 1 of the month"),
        ("0 0 13 * 5", "at 00:00 on day 13 of the month or on Fri"),
        ("0 12 * jan,jul *", "at 12:00 every day in Jan, Jul"),
        ("0 0 */2 * 5", "cron '0 0 */2 * 5'"),
    ],
)
def test_describe_cron_reads_common_shapes(expr: str, text: str) -> None:
    assert describe_cron(parse_cron(expr)) == text


def test_sunday_by_name_closes_a_weekday_range_but_stays_sunday_alone() -> None:
    start = utc("2026-02-26 05:00")
    sundays = next_slots("0 0 * * 0", "UTC", start, 3)
    assert next_slots("0 0 * * sun-sun", "UTC", start, 3) == sundays
    assert next_slots("0 0 * * 0-sun", "UTC", start, 3) == sundays
    assert next_slots("0 0 * * sat-sun", "UTC", start, 6) == next_slots(
        "0 0 * * 0,6", "UTC", start, 6
    )
