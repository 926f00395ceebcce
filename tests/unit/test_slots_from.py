"""slots_from (the slots `next` lists) adds the interval directly on a whole-millisecond
`every` grid: it must give exactly what slot_after gives one slot at a time, for every
kind of schedule, grid and start, and stop where slot_after stops (year 9999)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import islice
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronctl.models import JobSpec
from cronctl.schedule.slots import slot_after, slots_from

UTC = timezone.utc


def by_slot_after(spec: JobSpec, first: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    slot: datetime | None = first
    try:
        while slot is not None and len(out) < count:
            out.append(slot)
            slot = slot_after(spec, slot, slot)
    except OverflowError:
        pass
    return out


def by_slots_from(spec: JobSpec, first: datetime, count: int) -> list[datetime]:
    out: list[datetime] = []
    try:
        for slot in slots_from(spec, first):
            out.append(slot)
            if len(out) >= count:
                break
    except OverflowError:
        pass
    return out


def same_both_ways(spec: JobSpec, first: datetime, count: int = 7) -> None:
    want, got = by_slot_after(spec, first, count), by_slots_from(spec, first, count)
    assert got == want
    assert [(slot.tzinfo, slot.isoformat()) for slot in got] == [(slot.tzinfo, slot.isoformat()) for slot in want]


@pytest.mark.parametrize("every", [3600.0, 0.001, 0.25, 1.5, 86400.0 * 400, 0.0005, 1.0000004, 7 / 3])
@pytest.mark.parametrize("first", [
    datetime(2026, 12, 3, 17, 43, 51, 962000, tzinfo=UTC),  # a slot as the store keeps it
    datetime(2026, 12, 3, 17, 43, 51, 962345, tzinfo=UTC),  # off the millisecond
    datetime(2026, 12, 3, 18, 43, 51, tzinfo=ZoneInfo("Europe/Berlin")),  # not in UTC
    datetime(2026, 12, 3, 18, 43, 51, tzinfo=timezone(timedelta(hours=1))),
])
def test_every_grid_matches_slot_after(every: float, first: datetime) -> None:
    same_both_ways(JobSpec(name="j", command="true", every=every), first)


@given(every_ms=st.integers(min_value=1, max_value=10**10), micro=st.integers(min_value=0, max_value=999_999),
       count=st.integers(min_value=1, max_value=20))
def test_every_grid_matches_slot_after_for_any_interval(every_ms: int, micro: int, count: int) -> None:
    first = datetime(2026, 3, 29, 0, 30, 0, micro, tzinfo=UTC)
    same_both_ways(JobSpec(name="j", command="true", every=every_ms / 1000), first, count)


def test_stops_where_slot_after_stops_at_year_9999() -> None:
    first = datetime(9999, 12, 31, 20, 0, 0, tzinfo=UTC)
    spec = JobSpec(name="j", command="true", every=3600.0)
    assert by_slots_from(spec, first, 10) == by_slot_after(spec, first, 10)
    assert len(by_slots_from(spec, first, 10)) == 4


@pytest.mark.parametrize("spec", [
    JobSpec(name="c", command="true", cron="*/7 * * * *", timezone="Europe/Berlin"),
    JobSpec(name="a", command="true", at=datetime(2027, 1, 1, tzinfo=UTC)),
])
def test_cron_and_one_shot_match_slot_after(spec: JobSpec) -> None:
    same_both_ways(spec, datetime(2026, 3, 29, 0, 30, tzinfo=UTC))
    assert list(islice(slots_from(spec, datetime(2026, 1, 1, tzinfo=UTC)), 3))[0] == datetime(2026, 1, 1, tzinfo=UTC)
