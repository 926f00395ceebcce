"""Schedules in words, for people: "At 03:00, Monday through Friday"."""

from __future__ import annotations

from functools import lru_cache

from cronctl.durations import format_duration
from cronctl.models import JobSpec
from cronctl.schedule.cronexpr import describe_cron, parse_cron


def signal_text(number: int) -> str:
    """How a run that a signal ended is said: "killed by signal 9 (SIGKILL)"."""
    import signal

    try:
        return f"killed by signal {number} ({signal.Signals(number).name})"
    except ValueError:  # a real-time or unknown signal has no name
        return f"killed by signal {number}"


def describe(spec: JobSpec) -> str:
    if spec.after:
        verb = ("finish" if spec.requires == "done" else "succeed") + ("s" if len(spec.after) == 1 else "")
        return f"After {' and '.join(spec.after)} {verb}, in the same chain"
    if spec.every is not None:
        return _every_words(spec.every)
    if spec.at is not None:
        from zoneinfo import ZoneInfo

        local = spec.at.astimezone(ZoneInfo(spec.timezone))
        return f"Once, at {local.strftime('%Y-%m-%d %H:%M')} {spec.timezone}"
    assert spec.cron is not None
    return describe_expression(spec.cron)


@lru_cache(maxsize=4096)
def _every_words(seconds: float) -> str:
    """Once per interval: `list` and `next` word every job (10,000 at once), few intervals."""
    return f"Every {format_duration(seconds)}"


@lru_cache(maxsize=4096)
def describe_expression(expr: str) -> str:
    """cron-descriptor's wording, corrected to Debian's day rule.

    cron-descriptor always joins a restricted day-of-month and day-of-week with "or";
    crontab(5) (and cronctl) use AND when either field begins with '*' (e.g. '*/2').
    """
    parsed = parse_cron(expr)
    try:
        from cron_descriptor import Options, get_description  # type: ignore[import-untyped]

        options = Options()
        options.use_24hour_time_format = True
        text = str(get_description(" ".join(parsed.fields), options))
    except Exception:  # an expression it cannot word: our own plainer wording
        return describe_cron(parsed)
    dom, dow = parsed.fields[2], parsed.fields[4]
    both_restricted = dom != "*" and dow != "*"
    if both_restricted and (parsed.dom_star or parsed.dow_star):
        text = text.replace(", or on ", ", and only on ", 1) + " (both day fields must match)"
    return text
