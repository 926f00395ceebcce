"""The run path's judgments on a locked document, beside the claim decisions of claims.py.

Each function takes the document of one unit of work (store/unit.py: the JSON store's,
or the one PostgreSQL assembles from the locked job rows), changes it, and returns what
must follow (audit events, a run's `Finished`). Nothing here locks, writes, or reads a
clock: `now` is the unit's judging instant. Every backend runs these same functions, so
both decide alike by construction.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cronctl.jobs.health import persisted_error_wedge
from cronctl.jobs.state import JobView
from cronctl.models import AuditEvent, Fault, RunStatus
from cronctl.schedule.slots import first_slot
from cronctl.store import claims as claims_mod
from cronctl.store.claims import Dispatched, Event, Finished, Outcome, Owner
from cronctl.store.lease_types import HeldGate, Refused, RunEnd
from cronctl.store.schema import bump_counter, find_claim
from cronctl.timefmt import from_iso, to_iso

# What a run's end needs delivered: its `Finished` and the audit rows that go with it, in order.
Ended = tuple[Finished, list[Event]]


def end_run(doc: dict[str, Any], job: str | None, end: RunEnd, owner: Owner, now: datetime) -> Finished:
    """The fenced terminal write of one ended run; a real end clears a blocked config and
    keeps the run's log in its record."""
    done = claims_mod.finish(doc, job or "?", end.run_id, owner, end.outcome, now)
    if not done.fenced and done.record is not None and job is not None:
        doc["jobs"][job]["state"].pop("blocked", None)
        done.record["log"] = end.log
    return done


def refuse(doc: dict[str, Any], item: Refused, owner: Owner, now: datetime) -> tuple[Finished | None, list[Event]]:
    """A claim whose child could not be spawned: (None, rows) when it is released without
    a record (a spawn failure, or a blocked config already recorded as it is now), else the
    recorded end with its rows.

    A forced run (`always_record`) is recorded every time, its `event` first, and never
    marks the job blocked: whoever forced it, perhaps with --wait, learns from its record
    that nothing ran.
    """
    state = doc["jobs"].get(item.job, {}).get("state", {})
    if item.outcome is None or _blocked_again(item, item.outcome, state):
        claims_mod.release(doc, item.job, item.run_id)
        return None, [item.event]
    done = claims_mod.finish(doc, item.job, item.run_id, owner, item.outcome, now)
    if item.always_record:
        return done, [item.event, *done.events]
    state["blocked"] = item.outcome.output_tail
    return done, done.events


def _blocked_again(item: Refused, outcome: Outcome, state: dict[str, Any]) -> bool:
    """A blocked config already recorded as it is now: released without another record."""
    return not item.always_record and state.get("blocked") == outcome.output_tail


def hand_back_changed(doc: dict[str, Any], gate: HeldGate, owner: Owner) -> Event | None:
    """A run claimed ahead whose job was paused, edited or removed, or whose claim was
    taken, since its claim: handed back (nothing of it ran), with the row that says why.
    None: its gate may open."""
    why = changed_since_claim(doc, gate, owner)
    if why is None:
        return None
    event = claims_mod.unhold(doc, gate.job, gate.run_id, gate.advanced_to, why)
    return event or Event(AuditEvent.RUN_SKIPPED, {
        "job": gate.job, "run_id": gate.run_id, "slot": gate.slot, "reason": "cancelled_before_slot", "why": why})


def changed_since_claim(doc: dict[str, Any], gate: HeldGate, owner: Owner) -> str | None:
    """Why a run claimed ahead must not start after all, or None."""
    entry = doc["jobs"].get(gate.job)
    if entry is None:
        return "removed"
    claim = find_claim(doc, gate.job, gate.run_id)
    if claim is None or not owner.owns(claim):
        return "claim_released"
    view = JobView.from_entry(entry)
    if view.paused:
        return "paused"
    if view.spec != gate.spec:
        return "edited"
    return None


def _held_by(claim: dict[str, Any], owner: Owner | None) -> bool:
    """Whether `claim` is still held by `owner` (None: by nobody, as it was seen)."""
    if owner is None:
        return not claim.get("owner")
    return owner.owns(claim)


def reclaim_claim(doc: dict[str, Any], job: str, run_id: str, seen_owner: Owner | None, reason: str,
                  now: datetime, processes_killed: int) -> Ended | None:
    """End a broken owner's claim as lost (it was dispatched) or not_started; its finish and
    the rows to write, or None when the claim is gone or another owner holds it now (fenced
    on the owner seen when it was judged broken)."""
    current = find_claim(doc, job, run_id)
    if current is None or not _held_by(current, seen_owner):
        return None
    dispatched = bool(current.get("dispatched"))
    outcome = Outcome(
        RunStatus.LOST if dispatched else RunStatus.NOT_STARTED,
        "executor_lost_mid_run" if dispatched else "run_claimed_without_dispatch",
        fault=Fault.PLATFORM,
    )
    done = claims_mod.finish(doc, job, run_id, None, outcome, now)
    bump_counter(doc, "operator_release" if reason == "operator" else reason)
    rows = [Event(AuditEvent.CLAIM_RECLAIMED, {
        "job": job, "run_id": run_id, "slot": current.get("slot"), "reason": reason, "status": outcome.status.value,
        "run_reason": outcome.reason, "processes_killed": processes_killed,
        "owner_pid": seen_owner.pid if seen_owner is not None else None,
    }), *done.events]
    return done, rows


def end_past_deadline(doc: dict[str, Any], job: str, run_id: str, deadline_s: float, now: datetime,
                      processes_killed: int) -> Ended | None:
    """A run past any deadline it could have, recorded `timeout`; None when its runner
    recorded it meanwhile (a real ending is never overwritten)."""
    if find_claim(doc, job, run_id) is None:
        return None
    done = claims_mod.finish(doc, job, run_id, None, Outcome(RunStatus.TIMEOUT, "deadline_janitor", fault=Fault.JOB),
                             now)
    bump_counter(doc, "deadline_terminated")
    return done, [Event(AuditEvent.RECOVERY_DEADLINE_TERMINATED, {
        "job": job, "run_id": run_id, "reason": "deadline_janitor", "deadline_s": round(deadline_s, 3),
        "processes_killed": processes_killed,
    }), *done.events]


def end_unsupervised(doc: dict[str, Any], job: str, run_id: str, outcome: Outcome, now: datetime,
                     processes_killed: int) -> Ended | None:
    """The end of a run no loop supervises (its processes already ended); None: no such claim."""
    if find_claim(doc, job, run_id) is None:
        return None
    done = claims_mod.finish(doc, job, run_id, None, outcome, now)
    if done.events:
        done.events[0].details["processes_killed"] = processes_killed
    return done, done.events


def started_rows(doc: dict[str, Any], runs: list[Dispatched]) -> list[Event]:
    """The run.started row of each run just marked dispatched (its gate opens with the commit),
    as its run.finished row is written by its end: in the unit of work that decided it."""
    rows = []
    for run in runs:
        claim = find_claim(doc, run.job, run.run_id)
        assert claim is not None  # mark_dispatched kept it: this owner's claim, in this unit
        rows.append(Event(AuditEvent.RUN_STARTED, {"job": run.job, "run_id": run.run_id, "slot": claim["slot"],
                                                   "pid": run.pid, "attempt": claim["attempt"]}))
    return rows


def adopt_claims(doc: dict[str, Any], old: Owner, new: Owner, runs: dict[str, str]) -> int:
    """Hand `old`'s claims among `runs` (run id -> job) to `new`; how many moved."""
    adopted = 0
    for run_id, job in runs.items():
        claim = find_claim(doc, job, run_id)
        if claim is not None and old.owns(claim):
            claim["owner"] = new.to_dict()
            adopted += 1
    return adopted


def rearm_wedged(doc: dict[str, Any], job: str, now: datetime) -> Event | None:
    """Re-arm `job` if a failure pushed it past its next slot; its audit event, or None.

    The job is marked either way, so one failure is re-armed (or judged not wedged) once.
    """
    entry = doc["jobs"].get(job)
    if entry is None:
        return None
    view = JobView.from_entry(entry)
    if not persisted_error_wedge(view, now):
        return None
    state = entry["state"]
    previous = state.get("next_run_at")
    target = _rearm_target(view, now)
    state["rearmed_for"] = state.get("last_run_at")
    old = from_iso(previous)
    if target is None or (old is not None and target >= old):
        return None
    state["next_run_at"] = to_iso(target)
    bump_counter(doc, "persisted_error_rearmed")
    return Event(AuditEvent.RECOVERY_PERSISTED_ERROR_REARMED, {
        "job": job, "previous_next_run_at": previous, "next_run_at": to_iso(target),
        "last_status": state.get("last_status"), "reason": "persisted_error",
    })


def _rearm_target(view: JobView, now: datetime) -> datetime | None:
    """Now for an interval job; the next legal slot for a cron job."""
    if view.spec.every is not None:
        return now
    return first_slot(view.spec, now - timedelta(microseconds=1))


def observe_all(doc: dict[str, Any], lateness: list[float]) -> None:
    """Each gate's lateness, into the store's metrics."""
    for seconds in lateness:
        claims_mod.observe_lateness(doc, seconds)
