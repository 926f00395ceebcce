"""Runs spoken in leases: claim, dispatch, renew, finish, release.

Each function mutates one store document in place inside the caller's
transaction and returns what happened, with the audit rows to write once the
transaction has committed. Nothing here touches a process or a clock.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from cronctl.jobs.state import JobView
from cronctl.models import FAILED_STATUSES, AuditEvent, Catchup, Fault, JobSpec, Overlap, RunStatus, Trigger
from cronctl.schedule.intervals import retry_delay
from cronctl.schedule.slots import cadence, collect_due, fire_at, starting_deadline
from cronctl.store import chain_doc, notify_owed
from cronctl.store.schema import claims_of, find_claim
from cronctl.timefmt import from_iso, to_iso

DEFAULT_LEASE = 60.0
FAILED_FOR_RETRY = FAILED_STATUSES


@dataclass(frozen=True)
class Owner:
    """Who holds a claim: one loop generation in one process of one boot."""

    generation: str
    pid: int
    start_time: float
    boot_id: str

    def to_dict(self) -> dict[str, Any]:
        return {"generation": self.generation, "pid": self.pid, "start_time": self.start_time, "boot_id": self.boot_id}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Owner:
        """Tolerant of a partial record: the fence compares generation and pid only."""
        return cls(str(data.get("generation") or ""), int(data.get("pid") or 0),
                   float(data.get("start_time") or 0.0), str(data.get("boot_id") or ""))

    def owns(self, claim: dict[str, Any]) -> bool:
        owner = claim.get("owner") or {}
        return owner.get("generation") == self.generation and owner.get("pid") == self.pid


@dataclass(frozen=True)
class Lease:
    """A lease on the system-wide monotonic clock, with its wall-clock reading for humans."""

    until_mono: float
    until_wall: datetime


@dataclass
class Event:
    """An audit row to write after the transaction commits."""

    name: AuditEvent
    details: dict[str, Any]


@dataclass
class NewClaim:
    job: str
    run_id: str
    slot: datetime
    trigger: str
    attempt: int
    spec: JobSpec
    late: bool
    replaces: list[str] = field(default_factory=list)  # runs to kill first (overlap: replace)
    # Claimed ahead of its slot: the child waits at its gate until this instant (slot + jitter).
    held_until: datetime | None = None
    # Claimed ahead: what the claim set next_run_at to (handing the slot back restores it).
    advanced_to: str | None = None
    fence: int = 0  # the claim's fence number, given to the job as CRONCTL_FENCE (next_fence)
    # What the run is told beside its spec's env, not part of the spec (a run claimed ahead is
    # handed back when its spec changed): a chain root's CRONCTL_CHAIN_ID (store/chains.py).
    extra_env: dict[str, str] = field(default_factory=dict)
    chain: str | None = None  # a chain node's chain (store/chains.py): its end decides the nodes below
    # Chain nodes this run's end may make ready (store/chains.py): how many children the loop
    # keeps warm for the hop (loop/warm_hops.py). A hint: 0 when not known.
    warm_hint: int = 0


@dataclass
class ClaimBatch:
    claims: list[NewClaim] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    deferred: int = 0  # due but over --max-parallel; claimed on a later tick
    # Runs of this batch marked dispatched in the claim's own write (a hop's warm children,
    # UnitLeaseStore.claim_chain): their gates may open as soon as it commits.
    dispatched: list[Dispatched] = field(default_factory=list)


def new_run_id(now: datetime) -> str:
    """Sortable by time, unique without coordination."""
    return f"{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def next_fence(state: dict[str, Any], now: datetime) -> int:
    """The job's next fence number (SPEC §9, CRONCTL_FENCE): one more than its last claim's.

    Kept in the job's state, so it increases under the same lock (the JSON store's file
    lock, PostgreSQL's row lock) that serializes the job's claims, on both stores alike. A
    job's first claim starts from the wall clock in milliseconds, so a job removed and
    defined again under the same name starts above every number its old self handed out.
    """
    last = state.get("fence")
    fence = int(last) + 1 if isinstance(last, int) else int(now.timestamp() * 1000)
    state["fence"] = fence
    return fence


def _claim_record(new: NewClaim, owner: Owner, lease: Lease, now: datetime) -> dict[str, Any]:
    return {
        "run_id": new.run_id,
        "fence": new.fence,
        "slot": to_iso(new.slot),
        "trigger": new.trigger,
        "attempt": new.attempt,
        "owner": owner.to_dict(),
        "boot_id": owner.boot_id,
        "claimed_at": to_iso(now),
        "lease_until_mono": lease.until_mono,
        "lease_until": to_iso(lease.until_wall),
        "dispatched": False,
        "child": None,
        "started_at": None,
        "started_mono": None,
        "timeout": new.spec.timeout,
        "kill_grace": new.spec.kill_grace,
        "late": new.late,
        # When the scheduler meant it to start (slot + jitter): the base of fire lateness.
        "due_at": to_iso(fire_at(new.spec, new.slot)) if new.trigger != Trigger.FORCE else None,
        **({"held_until": to_iso(new.held_until)} if new.held_until is not None else {}),
    }


# --- claim -------------------------------------------------------------------------


def claim_due(
    doc: dict[str, Any], now: datetime, owner: Owner, lease: Lease, capacity: int | None = None
) -> ClaimBatch:
    """Claim every due job in this one document write (SPEC §5.1)."""
    batch = ClaimBatch()
    now_iso = to_iso(now) or ""
    # Longest due first: under --max-parallel the jobs deferred on one tick come
    # first on the next, instead of the same names winning every time.
    due = sorted((key, name) for name, entry in doc["jobs"].items()
                 if (key := _due_since(entry["state"], now_iso)) is not None)
    for _, name in due:
        entry = doc["jobs"][name]
        state = entry["state"]
        view = JobView.from_entry(entry)
        if view.paused or state.get("completed"):
            continue
        if capacity is not None and len(batch.claims) >= capacity:
            batch.deferred += 1
            continue
        _claim_job(view, state, now, owner, lease, batch)
    return batch


def _due_since(state: dict[str, Any], now_iso: str) -> str | None:
    """The earliest due stamp (retry or slot) at or before now, else None.

    A cheap string test: UTC ISO stamps of one format sort like the instants they name.
    """
    stamps = [stamp for stamp in ((state.get("retry") or {}).get("due_at"), state.get("next_run_at"))
              if stamp and stamp <= now_iso]
    return min(stamps) if stamps else None


def repeat_spent(spec: JobSpec, state: dict[str, Any]) -> bool:
    """Whether a finite repeat has no slot left to give: started runs plus claims about to start."""
    if spec.repeat is None:
        return False
    pending = sum(1 for claim in (state.get("claims") or {}).values()
                  if claim.get("trigger") != Trigger.FORCE and not claim.get("dispatched"))
    return int(state.get("runs_started") or 0) + pending >= spec.repeat


def _claim_job(view: JobView, state: dict[str, Any], now: datetime, owner: Owner, lease: Lease,
               batch: ClaimBatch) -> None:
    spec = view.spec
    retry = state.get("retry")
    if retry and from_iso(retry["due_at"]) <= now:  # type: ignore[operator]
        state["retry"] = None
        slot = from_iso(retry["slot"])
        assert slot is not None
        _fire_or_skip(view, state, slot, Trigger.RETRY, int(retry["attempt"]), False, now, owner, lease, batch,
                      due_at=retry["due_at"])
        return
    next_run = view.next_run_at
    if next_run is None or repeat_spent(spec, state):
        # A spent budget leaves next_run_at as it is: if the last run's claim is
        # released without a start, the job catches up from there.
        return
    due = collect_due(spec, next_run, now)
    if due is None:
        return
    state["next_run_at"] = to_iso(due.next_slot)
    overdue = (now - fire_at(spec, due.latest)).total_seconds()
    late = overdue > starting_deadline(spec, due.latest)
    if late and spec.catchup is Catchup.SKIP:
        # One row for the whole misfire, counting every slot that did not fire.
        batch.events.append(Event(AuditEvent.RUN_MISSED, {
            "job": spec.name, "slot": to_iso(due.latest), "count": due.missed + 1,
            "first_missed": to_iso(next_run), "reason": "starting_deadline",
            "overdue_s": round(overdue, 3), "catchup": spec.catchup.value,
        }))
        return
    if due.missed:
        batch.events.append(Event(AuditEvent.RUN_MISSED, {
            "job": spec.name, "slot": to_iso(due.latest), "count": due.missed,
            "first_missed": to_iso(next_run), "reason": "coalesced", "catchup": spec.catchup.value,
        }))
    _fire_or_skip(view, state, due.latest, Trigger.SCHEDULE, 1, late, now, owner, lease, batch)


def _fire_or_skip(view: JobView, state: dict[str, Any], slot: datetime, trigger: Trigger, attempt: int, late: bool,
                  now: datetime, owner: Owner, lease: Lease, batch: ClaimBatch,
                  held_until: datetime | None = None, due_at: str | None = None, run_id: str | None = None) -> None:
    spec = view.spec
    claims: dict[str, Any] = state.setdefault("claims", {})
    replaces: list[str] = []
    if claims and spec.overlap is Overlap.SKIP:
        running = ", ".join(claims)
        batch.events.append(Event(AuditEvent.RUN_SKIPPED, {
            "job": spec.name, "slot": to_iso(slot), "reason": "overlap", "running": running, "trigger": trigger.value,
        }))
        return
    if claims and spec.overlap is Overlap.REPLACE:
        replaces = list(claims)
    new = NewClaim(spec.name, run_id or new_run_id(now), slot, trigger.value, attempt, spec, late, replaces, held_until,
                   fence=next_fence(state, now))
    claims[new.run_id] = _claim_record(new, owner, lease, now)
    if due_at is not None:  # a retry is late from its own due time, not from its slot's
        claims[new.run_id]["due_at"] = due_at
    batch.claims.append(new)
    batch.events.append(Event(AuditEvent.RUN_CLAIMED, {
        "job": spec.name, "run_id": new.run_id, "slot": to_iso(slot), "trigger": trigger.value, "attempt": attempt,
        "late": late or None, "reason": "scheduler_missed" if late else None, "replaces": replaces or None,
        "pid": owner.pid, "generation": owner.generation, "held_until": to_iso(held_until), "fence": new.fence,
    }))


# --- claiming ahead of the slot -----------------------------------------------------------
#
# Forking hundreds of children takes longer than a slot may be late. So the loop claims a
# slot a little ahead, spawns its child blocked at the gate, and opens the gate at the
# instant (DESIGN "Performance notes"). The claim is the same claim: one write claims the
# slot and advances next_run_at past it, so the slot still fires at most once and every
# later write is fenced. Until the gate opens nothing of the job has run: the claim says
# `dispatched: false` (a crash then is `run_claimed_without_dispatch`) until a write made
# just before the instant marks it dispatched, and a run whose job was paused, edited or
# removed meanwhile is handed back (`unhold`) with its slot, as if never claimed.


def ahead_fire(entry: dict[str, Any]) -> datetime | None:
    """When a job's next slot fires (slot + jitter), if it may be claimed ahead; else None.

    Only a plain next slot of a job that nothing else is going on with: no claim (an
    overlap decision belongs to the instant), no pending retry, not paused or done.
    """
    state = entry["state"]
    if state.get("claims") or state.get("retry") or state.get("completed") or state.get("paused") \
            or entry.get("paused"):
        return None
    return slot_fire(entry)


def wake_at(entry: dict[str, Any]) -> datetime | None:
    """The earliest instant the job has something due: its pending retry, or its next slot
    where it really fires (plus its jitter); None when nothing is left to fire. Whether the
    job is paused is the caller's to judge (the JSON loop skips it, PostgreSQL's due index
    filters on its `paused` column)."""
    state = entry["state"]
    if state.get("completed"):
        return None
    due = [when for when in (from_iso((state.get("retry") or {}).get("due_at")), slot_fire(entry))
           if when is not None]
    return min(due) if due else None


def slot_fire(entry: dict[str, Any]) -> datetime | None:
    """When the job's next slot fires: the slot plus its jitter; None when it has none left."""
    state = entry["state"]
    slot = from_iso(state.get("next_run_at"))
    if slot is None:
        return None
    jitter = entry.get("jitter")
    if entry.get("repeat") is not None or (jitter and jitter != "0s"):
        spec = JobView.from_entry(entry).spec
        if repeat_spent(spec, state):
            return None
        return fire_at(spec, slot)
    return slot


def claim_ahead(doc: dict[str, Any], now: datetime, horizon: datetime, owner: Owner, lease: Lease,
                capacity: int | None = None) -> ClaimBatch:
    """Claim, in this one write, every slot that fires after `now` and by `horizon`."""
    batch = ClaimBatch()
    ahead = sorted((fire, name) for name, entry in doc["jobs"].items()
                   if (fire := ahead_fire(entry)) is not None and now < fire <= horizon)
    for fire, name in ahead:
        if capacity is not None and len(batch.claims) >= capacity:
            batch.deferred += 1
            continue
        entry = doc["jobs"][name]
        view = JobView.from_entry(entry)
        slot = view.next_run_at
        assert slot is not None
        due = collect_due(view.spec, slot, fire)
        if due is None or due.latest != slot:
            continue
        entry["state"]["next_run_at"] = to_iso(due.next_slot)
        _fire_or_skip(view, entry["state"], slot, Trigger.SCHEDULE, 1, False, now, owner, lease, batch, held_until=fire)
    return batch


def unhold(doc: dict[str, Any], job: str, run_id: str, advanced_to: str | None, why: str) -> Event | None:
    """Hand back a slot claimed ahead whose gate never opened: nothing of it ran.

    The claim goes, and next_run_at returns to the slot unless someone moved it since
    (an edit of the schedule recomputes it from now; that stands).
    """
    entry = doc["jobs"].get(job)
    state = (entry or {}).get("state", {})
    claim = (state.get("claims") or {}).pop(run_id, None)
    if claim is None:
        return None
    if claim.get("trigger") == Trigger.SCHEDULE and state.get("next_run_at") == advanced_to:
        state["next_run_at"] = claim["slot"]
    if claim.get("dispatched") and claim.get("trigger") != Trigger.FORCE:
        state["runs_started"] = max(0, int(state.get("runs_started") or 0) - 1)
    return Event(AuditEvent.RUN_SKIPPED, {
        "job": job, "run_id": run_id, "slot": claim["slot"], "reason": "cancelled_before_slot", "why": why,
        "trigger": claim.get("trigger"), "next_run_at": state.get("next_run_at") if entry else None,
    })


def claim_force(doc: dict[str, Any], name: str, now: datetime, owner: Owner, lease: Lease) -> ClaimBatch:
    """A fire outside the schedule: same claim and overlap rules, next_run_at untouched."""
    from cronctl.jobs.state import get_entry

    batch = ClaimBatch()
    entry = get_entry(doc, name)
    _fire_or_skip(JobView.from_entry(entry), entry["state"], now, Trigger.FORCE, 1, False, now, owner, lease, batch)
    return batch


# --- dispatch and renew ------------------------------------------------------------------


@dataclass(frozen=True)
class Dispatched:
    job: str
    run_id: str
    pid: int
    start_time: float
    started_mono: float


def mark_dispatched(doc: dict[str, Any], owner: Owner, runs: list[Dispatched], now: datetime,
                    observe: bool = True) -> list[Dispatched]:
    """Persist the gated children's identities; returns the ones still owned (others must be cancelled).

    `now` is when their gates open; `observe=False` leaves the lateness histogram to the
    caller, which knows the real opening only later (runs claimed ahead).
    """
    kept: list[Dispatched] = []
    for run in runs:
        claim = _owned_claim(doc, run.job, run.run_id, owner)
        if claim is None:
            continue
        claim.update({
            "dispatched": True, "child": {"pid": run.pid, "start_time": run.start_time},
            "started_at": to_iso(now), "started_mono": run.started_mono,
        })
        state = doc["jobs"][run.job]["state"]
        notify_owed.after_start(doc, run.job, claim, now)
        if claim["trigger"] != Trigger.FORCE:
            state["runs_started"] = int(state.get("runs_started") or 0) + 1
        if claim.get("due_at") and observe:
            observe_lateness(doc, (now - from_iso(claim["due_at"])).total_seconds())  # type: ignore[operator]
        kept.append(run)
    return kept


# Upper bounds (seconds) of the fire-lateness histogram persisted for `cronctl metrics`.
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)


def observe_lateness(doc: dict[str, Any], seconds: float) -> None:
    """A cumulative histogram in the store, so it survives restarts like a Prometheus counter."""
    hist = doc.setdefault("metrics", {}).setdefault("fire_lateness_seconds", {"buckets": {}, "sum": 0.0, "count": 0})
    seconds = max(0.0, seconds)
    for bound in LATENESS_BUCKETS:
        if seconds <= bound:
            key = repr(bound)
            hist["buckets"][key] = int(hist["buckets"].get(key) or 0) + 1
    hist["sum"] = round(float(hist["sum"]) + seconds, 6)
    hist["count"] = int(hist["count"]) + 1


def renew(doc: dict[str, Any], owner: Owner, run_ids: dict[str, str], lease: Lease) -> list[str]:
    """Extend the leases of the runs this owner really supervises; returns run_ids it no longer owns."""
    lost: list[str] = []
    for run_id, job in run_ids.items():
        claim = _owned_claim(doc, job, run_id, owner)
        if claim is None:
            lost.append(run_id)
            continue
        claim["lease_until_mono"] = lease.until_mono
        claim["lease_until"] = to_iso(lease.until_wall)
    return lost


def _owned_claim(doc: dict[str, Any], job: str, run_id: str, owner: Owner) -> dict[str, Any] | None:
    claim = find_claim(doc, job, run_id)
    if claim is None or not owner.owns(claim):
        return None
    return claim


# --- finish ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What ended a run, in the store's words."""

    status: RunStatus
    reason: str | None
    exit_code: int | None = None
    signal: int | None = None
    duration: float | None = None
    output_tail: str = ""
    fault: Fault | None = None


@dataclass
class Finished:
    fenced: bool
    record: dict[str, Any] | None = None  # the history record written
    events: list[Event] = field(default_factory=list)
    run_on_failure: bool = False
    keep_runs: int | None = None  # the job's own retention of run logs (SPEC §13), None: the default


def finish(doc: dict[str, Any], job: str, run_id: str, owner: Owner | None, outcome: Outcome,
           now: datetime) -> Finished:
    """The fenced terminal write: refused unless `owner` (None: the healer) still holds the claim."""
    entry = doc["jobs"].get(job)
    claims = claims_of(entry)
    claim = claims.get(run_id)
    if entry is None or claim is None or (owner is not None and not owner.owns(claim)):
        return Finished(fenced=True, events=[Event(AuditEvent.RUN_FENCED, {
            "job": job, "run_id": run_id, "status": outcome.status.value,
            "reason": "claim_not_owned" if claim is not None else "claim_gone",
            "pid": owner.pid if owner else None,
        })])
    del claims[run_id]
    spec = JobView.from_entry(entry).spec
    state = entry["state"]
    record = _history_record(job, run_id, claim, outcome, now)
    _record_last(state, record, outcome)
    result = Finished(fenced=False, record=record, keep_runs=spec.keep_runs)
    result.events.append(Event(AuditEvent.RUN_FINISHED, {
        "job": job, "run_id": run_id, "slot": claim["slot"], "status": outcome.status.value,
        "exit_code": outcome.exit_code, "signal": outcome.signal, "reason": outcome.reason,
        "duration_s": record["duration"], "attempt": claim["attempt"], "late": claim.get("late") or None,
        "fault": record["fault"],
    }))
    if outcome.status is RunStatus.KILLED:
        result.events.insert(0, Event(AuditEvent.RUN_KILLED, {
            "job": job, "run_id": run_id, "slot": claim["slot"], "reason": outcome.reason}))
    retrying = _schedule_retry(spec, state, claim, outcome, now, result)
    if outcome.status in FAILED_FOR_RETRY and not retrying:
        result.run_on_failure = spec.on_failure is not None
    _complete_if_done(spec, state)
    chain_rows = chain_doc.after_finish(doc, job, claim, record, retrying, now)
    result.events.extend(Event(name, details) for name, details in chain_rows)
    notify_owed.after_finish(doc, job, claim, record, outcome.output_tail, now)
    return result


def _history_record(job: str, run_id: str, claim: dict[str, Any], outcome: Outcome, now: datetime) -> dict[str, Any]:
    started = from_iso(claim.get("started_at"))
    duration = outcome.duration
    if duration is None and started is not None:
        duration = max(0.0, (now - started).total_seconds())
    late = bool(claim.get("late"))
    return {
        "job": job, "run_id": run_id, "slot": claim["slot"], "trigger": claim["trigger"],
        "attempt": claim["attempt"], "claimed_at": claim["claimed_at"], "started_at": claim.get("started_at"),
        "ended_at": to_iso(now), "duration": None if duration is None else round(duration, 3),
        "status": outcome.status.value, "exit_code": outcome.exit_code, "signal": outcome.signal,
        "reason": outcome.reason, "fault": _value(outcome.fault or _default_fault(outcome.status)),
        "late": late, "late_reason": "scheduler_missed" if late else None,
        "output_tail": outcome.output_tail[-2000:],
    }


def _default_fault(status: RunStatus) -> Fault | None:
    if status in (RunStatus.ERROR, RunStatus.TIMEOUT):
        return Fault.JOB
    if status in (RunStatus.LOST, RunStatus.NOT_STARTED):
        return Fault.PLATFORM
    return None


def _value(fault: Fault | None) -> str | None:
    """The document receives the plain word, so its JSON bytes stay what they were."""
    return None if fault is None else fault.value


def _record_last(state: dict[str, Any], record: dict[str, Any], outcome: Outcome) -> None:
    totals = state.setdefault("runs_by_status", {})
    totals[record["status"]] = int(totals.get(record["status"]) or 0) + 1
    if outcome.status is RunStatus.SUCCESS:
        state["last_success_at"] = record["ended_at"]
    if outcome.status is RunStatus.NOT_STARTED and record["started_at"] is None:
        # Nothing ran: the job's last real run stays what it was, but the failure is visible.
        state["last_not_started"] = {k: record[k] for k in ("run_id", "slot", "reason", "ended_at")}
        return
    state.update({
        "last_run_at": record["started_at"] or record["claimed_at"], "last_status": record["status"],
        "last_exit_code": record["exit_code"], "last_signal": record["signal"], "last_reason": record["reason"],
        "last_run_id": record["run_id"],
        "last_slot": record["slot"], "last_duration": record["duration"], "last_late": record["late"],
    })
    if outcome.status in FAILED_FOR_RETRY:
        state["consecutive_failures"] = int(state.get("consecutive_failures") or 0) + 1
    elif outcome.status is RunStatus.SUCCESS:
        state["consecutive_failures"] = 0


def _schedule_retry(spec: JobSpec, state: dict[str, Any], claim: dict[str, Any], outcome: Outcome,
                    now: datetime, result: Finished) -> bool:
    attempt = int(claim["attempt"])
    if outcome.status not in FAILED_FOR_RETRY or claim["trigger"] == Trigger.FORCE or attempt > spec.retries:
        return False
    slot = from_iso(claim["slot"])
    assert slot is not None
    delay = retry_delay(attempt, spec.retry_delay, cadence(spec, slot))
    due = now + timedelta(seconds=delay)
    state["retry"] = {"attempt": attempt + 1, "due_at": to_iso(due), "slot": claim["slot"]}
    result.events.append(Event(AuditEvent.RUN_RETRY_SCHEDULED, {
        "job": spec.name, "run_id": claim["run_id"], "slot": claim["slot"], "attempt": attempt + 1,
        "due_at": to_iso(due), "delay_s": round(delay, 3),
    }))
    return True


def _complete_if_done(spec: JobSpec, state: dict[str, Any]) -> None:
    if state.get("retry") or state.get("claims"):
        return
    one_shot_done = spec.at is not None and state.get("next_run_at") is None
    repeat_done = spec.repeat is not None and int(state.get("runs_started") or 0) >= spec.repeat
    if one_shot_done or repeat_done:
        state["completed"] = True
        state["next_run_at"] = None


def release(doc: dict[str, Any], job: str, run_id: str) -> bool:
    """Drop a claim whose child never started (spawn failure): the next slot fires normally.

    Nothing of the run happened, so what only this claim carried is handed back:
    a pending retry stays pending, and a one-shot (which has no next slot) is due
    again; otherwise either would be lost without a word.
    """
    entry = doc["jobs"].get(job)
    state = (entry or {}).get("state", {})
    claim = (state.get("claims") or {}).pop(run_id, None)
    if claim is None:
        return False
    if claim.get("trigger") == Trigger.RETRY and not state.get("retry"):
        state["retry"] = {"attempt": claim["attempt"], "due_at": claim["claimed_at"], "slot": claim["slot"]}
    elif claim.get("trigger") == Trigger.SCHEDULE and entry.get("at") and state.get("next_run_at") is None:
        state["next_run_at"] = claim["slot"]
    return True
