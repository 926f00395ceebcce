"""parse_cron and cron_next remember what they computed (apply -f of 10,000 jobs asks the
same few expressions at one instant): the answer must be what computing it again gives,
a bad expression must fail every time, and the memory stays bounded."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cronctl.errors import ScheduleError
from cronctl.schedule import cron, cronexpr, zones


def test_parse_remembers_the_same_parse() -> None:
    first = cronexpr.parse_cron("*/5 3 * * mon")
    assert cronexpr.parse_cron("*/5 3 * * mon") is first
    assert first == cronexpr._parse("*/5 3 * * mon")


def test_a_bad_expression_fails_every_time() -> None:
    for _ in range(2):
        with pytest.raises(ScheduleError, match="day-of-month"):
            cronexpr.parse_cron("0 0 32 * *")
    assert "0 0 32 * *" not in cronexpr._PARSED


def test_next_remembered_is_next_computed() -> None:
    expr = cronexpr.parse_cron("7 * * * *")
    start = datetime(2026, 3, 29, 0, 30, tzinfo=timezone.utc)
    for step in range(50):
        after = start + timedelta(minutes=17 * step)
        remembered = [cron.cron_next(expr, "Europe/Berlin", after) for _ in range(2)]
        computed = zones.aware(next(cron._slots_after(expr, zones.check_timezone("Europe/Berlin"), after)))
        assert remembered == [computed, computed]
        assert remembered[0].tzinfo == computed.tzinfo


def test_memories_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cronexpr, "_PARSED_MAX", 3)
    monkeypatch.setattr(cronexpr, "_PARSED", {})
    monkeypatch.setattr(cron, "_NEXT_FOUND_MAX", 3)
    monkeypatch.setattr(cron, "_NEXT_FOUND", {})
    expr = cronexpr.parse_cron("* * * * *")
    for minute in range(10):
        cronexpr.parse_cron(f"{minute} * * * *")
        cron.cron_next(expr, "UTC", datetime(2026, 1, 1, 0, minute, tzinfo=timezone.utc))
    assert len(cronexpr._PARSED) <= 3 and len(cron._NEXT_FOUND) <= 3
