from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronctl.durations import format_duration, parse_duration
from cronctl.errors import DurationError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        ("1d2h", 93600.0),
        ("1m30s", 90.0),
        ("1s250ms", 1.25),
        ("1d2h3m4s5ms", 93784.005),
        ("1.5s", 1.5),
        ("0.5h", 1800.0),
        (".25m", 15.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("0ms", 0.0),
        ("  10m  ", 600.0),
    ],
)
def test_duration_text_parses_to_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_zero_may_be_written_as_a_number() -> None:
    assert parse_duration(0) == 0.0
    assert parse_duration(0.0) == 0.0


@pytest.mark.parametrize(
    "value",
    [
        "5x",
        "",
        "   ",
        "30",
        "1.5",
        30,
        2.5,
        -1,
        "-5s",
        "30s1m",
        "1h1h",
        "1.5h30m",
        "5M",
        "1h 30m",
        "s",
        "0.0001s",
        "99999d",
        "٣s",
        True,
        False,
        None,
        float("nan"),
        float("inf"),
        [1],
    ],
)
def test_bad_durations_are_rejected(value: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(value)  # type: ignore[arg-type]


def test_error_message_names_the_value_the_field_and_the_fix() -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration("5x", field="timeout")
    assert str(caught.value) == (
        "bad duration '5x' for timeout: use a number with a unit, e.g. 500ms, 30s, 5m, 1h30m, 2d"
    )


def test_a_bare_number_is_called_ambiguous() -> None:
    with pytest.raises(DurationError, match="ambiguous"):
        parse_duration("30", field="every")


def test_a_negative_duration_is_called_negative() -> None:
    with pytest.raises(DurationError, match="negative"):
        parse_duration("-5s")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (90, "1m30s"),
        (5400, "1h30m"),
        (172800, "2d"),
        (1.25, "1s250ms"),
        (86400 + 1, "1d1s"),
        (3600, "1h"),
        (0.001, "1ms"),
        (-90, "-1m30s"),
    ],
)
def test_format_gives_the_canonical_shortest_form(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_format_rounds_to_milliseconds() -> None:
    assert format_duration(1.0004) == "1s"


@given(st.integers(min_value=0, max_value=36_500 * 86_400_000))
def test_parse_of_format_returns_every_millisecond_multiple(total_ms: int) -> None:
    seconds = total_ms / 1000
    assert parse_duration(format_duration(seconds)) == seconds


@given(
    st.integers(0, 99),
    st.integers(0, 23),
    st.integers(0, 59),
    st.integers(0, 59),
    st.integers(0, 999),
)
def test_combined_units_add_up(days: int, hours: int, minutes: int, secs: int, ms: int) -> None:
    text = "".join(
        f"{count}{unit}"
        for count, unit in [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s"), (ms, "ms")]
        if count
    ) or "0s"
    total_ms = (((days * 24 + hours) * 60 + minutes) * 60 + secs) * 1000 + ms
    assert parse_duration(text) == total_ms / 1000
