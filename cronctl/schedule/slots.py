"""Where a job's slots fall: pure functions of (spec, now), built on schedule.py.

`next_run_at` in the store is always a slot (a UTC instant on the job's
schedule). Jitter is a fixed per-job delay added when the slot is fired, so a
slot keeps its identity whatever the jitter.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from cronctl.models import JobSpec
from cronctl.schedule.cron import count_slots, cron_cadence, cron_next, cron_prev
from cronctl.schedule.cronexpr import parse_cron
from cronctl.schedule.intervals import default_grace, every_count, every_next, jitter_offset
from cronctl.timefmt import utc_ms


def first_slot(spec: JobSpec, now: datetime) -> datetime | None:
    """The first slot of a job created, edited or resumed at `now`."""
    if spec.cron is not None:
        return cron_next(parse_cron(spec.cron), spec.timezone, now)
    if spec.every is not None:
        return utc_ms(now + timedelta(seconds=spec.every))
    return spec.at


def slot_after(spec: JobSpec, slot: datetime, after: datetime) -> datetime | None:
    """The first slot strictly after `after`, on the grid that `slot` belongs to (None: no more)."""
    if spec.cron is not None:
        return cron_next(parse_cron(spec.cron), spec.timezone, max(slot, after))
    if spec.every is not None:
        return utc_ms(every_next(slot, spec.every, max(slot, after)))
    return None


def slots_from(spec: JobSpec, first: datetime) -> Iterator[datetime]:
    """`first`, then each slot after the one before: what `slot_after(spec, slot, slot)` gives
    one at a time. Raises what slot_after raises (OverflowError past year 9999) once the
    slots before it are yielded.

    On an `every` grid of whole milliseconds from a UTC slot on a millisecond, each slot
    is the one before plus the interval, exactly: `next` of 10,000 jobs asks for 50,000
    slots, and the general step (grid arithmetic, then the store's rounding) was a fifth
    of it. tests/unit/test_slots_from.py compares both ways."""
    yield first
    delta = grid_step(spec, first)
    if delta is not None:
        on_grid = first
        while True:
            on_grid += delta
            yield on_grid
    slot: datetime | None = first
    while slot is not None:
        slot = slot_after(spec, slot, slot)
        if slot is not None:
            yield slot


def grid_step(spec: JobSpec, first: datetime) -> timedelta | None:
    """The interval when each slot after `first` is the one before plus it, exactly (an
    `every` grid of whole milliseconds from a UTC slot on a millisecond); else None."""
    step = round(spec.every * 1_000_000) if spec.every is not None and spec.cron is None else 0
    if step > 0 and step % 1000 == 0 and first.tzinfo is timezone.utc and first.microsecond % 1000 == 0:
        return timedelta(microseconds=step)
    return None


def cadence(spec: JobSpec, slot: datetime) -> float | None:
    """Seconds between this slot and the next one; None for a one-shot."""
    if spec.cron is not None:
        return cron_cadence(parse_cron(spec.cron), spec.timezone, slot)
    return spec.every


def grace(spec: JobSpec, slot: datetime) -> float:
    if spec.grace is not None:
        return spec.grace
    return default_grace(cadence(spec, slot) or 0.0)


def starting_deadline(spec: JobSpec, slot: datetime) -> float:
    if spec.starting_deadline is not None:
        return spec.starting_deadline
    return grace(spec, slot)


def fire_at(spec: JobSpec, slot: datetime) -> datetime:
    """When a slot is really started: the slot plus the job's stable jitter."""
    if spec.jitter <= 0:
        return slot
    return slot + timedelta(seconds=jitter_offset(spec.name, spec.jitter))


@dataclass(frozen=True)
class Overdue:
    """The slots due at `now`, coalesced: fire (at most) the latest one."""

    latest: datetime  # the latest slot that is due
    missed: int  # how many earlier due slots are coalesced into it
    next_slot: datetime | None  # the first slot after `now`


def collect_due(spec: JobSpec, next_run_at: datetime, now: datetime) -> Overdue | None:
    """None when `next_run_at` is not due yet (jitter included)."""
    # A slot is fireable once slot + jitter <= now, i.e. slot <= cutoff.
    cutoff = now - (fire_at(spec, next_run_at) - next_run_at)
    if next_run_at > cutoff:
        return None
    if spec.every is not None:
        later = every_count(next_run_at, spec.every, cutoff)
        latest = utc_ms(next_run_at + timedelta(seconds=spec.every * later))
        return Overdue(latest, later, utc_ms(latest + timedelta(seconds=spec.every)))
    if spec.cron is not None:
        expr = parse_cron(spec.cron)
        latest = max(next_run_at, cron_prev(expr, spec.timezone, cutoff + timedelta(microseconds=1)))
        missed = count_slots(expr, spec.timezone, next_run_at, latest, limit=MAX_MISSED_COUNT)
        return Overdue(latest, missed, cron_next(expr, spec.timezone, latest))
    return Overdue(latest=next_run_at, missed=0, next_slot=None)


# Counting the slots of a very long downtime stops here; the count then means "at least".
MAX_MISSED_COUNT = 100_000
