"""A slot that already fired is not claimed again: its (job, slot, attempt) has a run
(`cronctl_runs_once`), or it is at or before its job's high-water mark `last_slot` (the
latest scheduled slot dispatched, raised at a unit's end: functions._END_UNIT, never lowered).

The pure claim functions decide from the job's `next_run_at`, which a definition written
with a clock behind the database's (or a one-shot put back on its instant) can move back
onto a slot that already fired. The unique index would refuse the second run row, but
only at the end of the claim's transaction, failing every job of the batch with it, tick
after tick. So the claim paths ask the index first, in the same transaction and under
the same row locks: a slot found there is dropped from the batch (next_run_at stays past
it, as the claim moved it) and audited `run.skipped` reason `slot_already_fired`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronctl.models import AuditEvent
from cronctl.store.claims import ClaimBatch, Event, NewClaim
from cronctl.store.pg import functions
from cronctl.store.pg.connect import Connection
from cronctl.timefmt import from_iso, to_iso


def drop_fired(conn: Connection, doc: dict[str, Any], batch: ClaimBatch) -> None:
    """Take out of `batch` (and of `doc`'s claims) every new claim whose slot already has its
    run, and every scheduled one at or before its job's high-water mark."""
    if not batch.claims:
        return
    keys = [_key(new) for new in batch.claims]
    found, marks = functions.fired(conn, keys)  # functions._FIRED
    fired = [new for new, key in zip(batch.claims, keys, strict=True)
             if key in found or _behind_mark(new, key[1], marks.get(new.job))]
    if not fired:
        return
    for new in fired:
        state = doc["jobs"][new.job]["state"]
        state["claims"].pop(new.run_id, None)
        batch.claims.remove(new)
        batch.events = [_skipped(new, state) if _claimed_row_of(event, new) else event for event in batch.events]


def _behind_mark(new: NewClaim, slot: datetime | None, mark: datetime | None) -> bool:
    return new.trigger == "schedule" and slot is not None and mark is not None and slot <= mark


def _key(new: NewClaim) -> tuple[str, datetime | None, int]:
    """The run row's key as it will be written: the slot through the claim record's ISO form (ms)."""
    return new.job, from_iso(to_iso(new.slot)), new.attempt


def _claimed_row_of(event: Event, new: NewClaim) -> bool:
    return event.name is AuditEvent.RUN_CLAIMED and event.details.get("run_id") == new.run_id


def _skipped(new: NewClaim, state: dict[str, Any]) -> Event:
    return Event(AuditEvent.RUN_SKIPPED, {
        "job": new.job, "slot": to_iso(new.slot), "reason": "slot_already_fired", "trigger": new.trigger,
        "attempt": new.attempt, "next_run_at": state.get("next_run_at"),
    })
