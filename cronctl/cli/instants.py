"""Instants given on the command line: `--since`/`--until` as an ISO instant or a duration ago."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cronctl.durations import parse_duration
from cronctl.errors import CronctlError

if TYPE_CHECKING:
    from cronctl.context import Context


def parse_since(text: str, ctx: Context, option: str = "--since") -> datetime:
    """--since (or --until): a duration ago (1h), else an ISO instant."""
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops.definitions import parse_instant

    try:
        return ctx.clock.now() - timedelta(seconds=parse_duration(text, field=option))
    except CronctlError:
        pass
    try:
        return parse_instant(text)
    except CronctlError:
        # A value that does not parse is bad input (exit 1), as `next --from` says it; exit 2
        # is for a command line that does not parse (an unknown option, a missing value).
        raise CronctlError(f"{option} {text!r}: expected an ISO 8601 instant like 2026-12-24T09:00:00+01:00 "
                         "or a duration ago like 30m, 1h, 2d") from None
