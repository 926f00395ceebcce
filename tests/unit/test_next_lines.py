"""`next`'s instant lines, written from naive twins of the UTC instants (speed), read as
they did when each aware instant was written with isoformat."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from hypothesis import given, settings
from hypothesis import strategies as st

from cronctl.cli.render import _add_instant_lines, local_iso


def reference(instants: list[tuple[datetime, datetime]]) -> list[str]:
    lines = []
    for local, utc in instants:
        utc = utc.astimezone(UTC)
        text = utc.isoformat(timespec="seconds" if utc.microsecond < 1000 else "milliseconds")
        if local is utc or not local.utcoffset():
            lines.append(f"  {text}   {text[:-6]}Z")
        else:
            lines.append(f"  {local_iso(local)}   {text[:-6]}Z")
    return lines


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Europe/London", "Pacific/Chatham"]


@settings(max_examples=600)
@given(st.datetimes(min_value=datetime(1, 1, 20), max_value=datetime(9990, 1, 1)),
       st.lists(st.integers(min_value=-10**12, max_value=10**12), min_size=0, max_size=6),
       st.sampled_from(ZONES), st.booleans(), st.booleans())
def test_the_lines_are_the_isoformat_lines(start: datetime, steps: list[int], zone: str, same_object: bool,
                                           fixed_offset: bool) -> None:
    first = start.replace(tzinfo=UTC)
    utcs = [first] + [first + timedelta(microseconds=step) for step in steps]
    if fixed_offset:  # an instant handed over in another offset is converted first
        utcs = [u.astimezone(timezone(timedelta(hours=5))) for u in utcs]
    pairs = []
    for utc in utcs:
        local = utc if same_object and zone == "UTC" else utc.astimezone(ZoneInfo(zone))
        pairs.append((local, utc))
    got: list[str] = []
    _add_instant_lines(got, pairs)
    assert got == reference(pairs)


@settings(max_examples=200)
@given(st.datetimes(min_value=datetime(9999, 12, 1), max_value=datetime(9999, 12, 31, 23)) | st.datetimes(),
       st.sampled_from([1.0, 60.0, 3600.0, 86400.0 * 7, 0.5, 1.2345]), st.integers(min_value=1, max_value=8))
def test_upcoming_slots_of_a_grid_are_slots_from_up_to_the_end_of_the_calendar(start: datetime, every: float,
                                                                              count: int) -> None:
    from itertools import islice

    from cronctl.jobs.state import JobView, new_state
    from cronctl.models import JobSpec
    from cronctl.ops.definitions import upcoming_slots
    from cronctl.schedule.slots import slots_from

    first = start.replace(tzinfo=UTC, microsecond=start.microsecond // 1000 * 1000)
    spec = JobSpec(name="job", command="true", every=every)
    view = JobView(spec, new_state(first, first))
    want: list[datetime] = []
    try:
        want.extend(islice(slots_from(spec, view.next_run_at or first), count))
    except OverflowError:
        pass
    assert upcoming_slots(view, first, count, use_state=True) == want
