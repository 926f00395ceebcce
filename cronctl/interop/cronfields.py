"""Facts of a cron expression's fields that every export format reads: whether a day field
is unrestricted, and runs of consecutive values (the ranges a format writes). Kept apart
from any one format, so that translate.py (shared by all) depends on none of them."""

from __future__ import annotations

from collections.abc import Sequence

ALL_DAYS = frozenset(range(1, 32))
ALL_WEEKDAYS = frozenset(range(7))  # 0 = Sunday, as in cron


def consecutive_runs(ordered: Sequence[int]) -> list[list[int]]:
    """[1, 2, 3, 7, 9, 10] -> [[1, 2, 3], [7], [9, 10]]."""
    runs: list[list[int]] = []
    for value in ordered:
        if runs and value == runs[-1][-1] + 1:
            runs[-1].append(value)
        else:
            runs.append([value])
    return runs
