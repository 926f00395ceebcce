"""Runs spoken in leases, in SQL: claim, gate, renew, finish, reclaim, release (MULTIHOST §3–§4).

Every function is one short READ COMMITTED transaction on the caller's connection that
spawns nothing (`short_transaction`: its time limits are set inside it), and writes the
audit rows of its decisions inside that transaction.
PostgreSQL arbitrates between loops on any number of hosts:

- a slot fires once: the job row's high-water mark `last_slot` advances by compare-and-set
  in the claim, and `cronctl_runs_once` refuses a second (job, slot, attempt) even after a
  redefinition moved `next_run_at` back;
- an `overlap: skip` job has one live run across hosts: `cronctl_runs_alone`;
- every claim gets a fence from a sequence; every later write names it, so the writes of
  a stale owner (reclaimed, replaced) change nothing;
- the gate: a child starts only once `mark_dispatched` has committed its run `running`.
  Reclaim and the gate both change `state`, so PostgreSQL orders them: a reclaimed
  `claimed` run never started (`not_started`), and a commit whose reply was lost leaves
  an ungated claim, which ends `not_started` too, never a false `lost`;
- leases are on the database clock (`clock_timestamp()`), so hosts' clocks do not matter.

Decisions the schedule math makes (which slot, how many missed, late or not) come from
`cronctl.schedule.slots`, fed with the database's `now`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from cronctl.errors import JobNotFoundError
from cronctl.models import AuditEvent, Catchup, JobSpec, Overlap, RunStatus
from cronctl.schedule.slots import Overdue, collect_due, fire_at, starting_deadline
from cronctl.store.claims import FAILED_FOR_RETRY, Outcome, new_run_id
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.transaction import short_transaction

# SPEC §9: at least 64 KiB of each run's output is kept with the run.
OUTPUT_TAIL_CHARS = 64 * 1024
DEFAULT_CLAIM_LIMIT = 100
_LIVE = "('claimed', 'running')"


@dataclass(frozen=True)
class LoopIdentity:
    """One loop: fresh `loop_id` at each start, on a host, in a boot, as a process."""

    loop_id: UUID
    host_id: str
    boot_id: str
    pid: int
    pid_start: float


@dataclass(frozen=True)
class Claimed:
    """A run this loop now holds: spawn its child gated, then `mark_dispatched` with `fence`."""

    run_id: str
    job: str
    fence: int
    slot: datetime | None  # None for a force-run
    trigger: str
    attempt: int
    spec: JobSpec
    late: bool
    lease_expires_at: datetime
    replaced: tuple[int, ...] = ()  # fences of the live runs this one replaced (overlap: replace)


@dataclass
class ClaimBatch:
    db_now: datetime | None = None
    claimed: list[Claimed] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # jobs whose due slot did not fire (audited why)


@dataclass(frozen=True)
class Gate:
    """A gated child to release: its run's fence and the child's identity."""

    fence: int
    pid: int
    pid_start: float


@dataclass(frozen=True)
class Renewal:
    held: frozenset[int]
    lost: frozenset[int]  # the loop kills these runs' processes: someone else owns them now


@dataclass(frozen=True)
class Finish:
    fenced: bool  # True: the run was no longer ours; nothing was written but the audit row
    run_id: str | None = None
    job: str | None = None


@dataclass(frozen=True)
class Reclaimed:
    run_id: str
    job: str
    fence: int
    status: RunStatus  # not_started (never gated) or lost (gated, then abandoned)
    host_id: str | None
    pid: int | None
    pid_start: float | None


# --- loops -------------------------------------------------------------------------------


def register_loop(conn: Connection, me: LoopIdentity) -> None:
    with short_transaction(conn):
        conn.execute("INSERT INTO cronctl_loops (loop_id, host_id, boot_id, pid, pid_start)"
                     " VALUES (%s, %s, %s, %s, %s)", (me.loop_id, me.host_id, me.boot_id, me.pid, me.pid_start))
        write_audit(conn, [AuditRow(AuditEvent.SCHEDULER_STARTED, details={"pid": me.pid, "boot_id": me.boot_id})],
                    me.loop_id, me.host_id)


def heartbeat(conn: Connection, me: LoopIdentity) -> datetime:
    """Stamp the loop alive on the database clock; returns that stamp."""
    with short_transaction(conn):
        row = conn.execute("UPDATE cronctl_loops SET heartbeat_at = clock_timestamp() WHERE loop_id = %s"
                           " RETURNING heartbeat_at", (me.loop_id,)).fetchone()
    if row is None:
        raise LookupError(f"loop {me.loop_id} is not registered")
    when: datetime = row[0]
    return when


# --- claim -------------------------------------------------------------------------------

# clock_timestamp() is volatile: read once in a sub-select, it becomes a parameter the
# due index can range-scan on, instead of a filter evaluated on every job row.
_DUE = """SELECT name, spec, next_run_at, clock_timestamp() FROM cronctl_jobs
           WHERE NOT paused AND next_run_at IS NOT NULL AND next_run_at <= (SELECT clock_timestamp())
           ORDER BY next_run_at LIMIT %s"""

# The compare-and-set: the row must still be as read (next_run_at) and the slot above the
# high-water mark. A loop that reads without FOR UPDATE still cannot fire a slot twice.
_ADVANCE = """UPDATE cronctl_jobs SET next_run_at = %(next)s, last_slot = %(slot)s
               WHERE name = %(name)s AND next_run_at = %(seen)s AND (last_slot IS NULL OR last_slot < %(slot)s)
               RETURNING 1"""

_ADVANCE_PAST_FIRED = """UPDATE cronctl_jobs SET next_run_at = %(next)s
                          WHERE name = %(name)s AND next_run_at = %(seen)s AND last_slot >= %(slot)s
                          RETURNING 1"""

_INSERT_RUN = """INSERT INTO cronctl_runs (run_id, job, slot, trigger, attempt, exclusive, state, late,
                      loop_id, host_id, boot_id, due_at, lease_expires_at)
                  VALUES (%(run_id)s, %(job)s, %(slot)s, %(trigger)s, %(attempt)s, %(exclusive)s, 'claimed',
                      %(late)s, %(loop_id)s, %(host_id)s, %(boot_id)s, %(due_at)s,
                      clock_timestamp() + make_interval(secs => %(lease)s))
                  ON CONFLICT DO NOTHING RETURNING fence, lease_expires_at"""

_REPLACE_LIVE = f"""UPDATE cronctl_runs SET state = 'killed', reason = 'replaced', kill_requested = true,
                        ended_at = clock_timestamp(), lease_expires_at = NULL
                     WHERE job = %s AND state IN {_LIVE} RETURNING fence, run_id, slot"""


@dataclass(frozen=True)
class DueJob:
    """A job row read as due, with the database's time of the read."""

    name: str
    spec: dict[str, Any]
    seen_next_run_at: datetime
    db_now: datetime


def claim_due(conn: Connection, me: LoopIdentity, lease_s: float, limit: int = DEFAULT_CLAIM_LIMIT) -> ClaimBatch:
    """Claim every due job (up to `limit`) that no other loop is claiming right now, in one transaction."""
    with short_transaction(conn):
        return claim_read(conn, me, read_due(conn, limit), lease_s)


def read_due(conn: Connection, limit: int = DEFAULT_CLAIM_LIMIT, lock: bool = True) -> list[DueJob]:
    """The due job rows, oldest first, inside the caller's transaction.

    `lock` takes them FOR UPDATE SKIP LOCKED, so concurrent loops split the due jobs
    instead of queueing behind each other. Without it (a loop that only reads) the
    compare-and-set in `claim_read` alone keeps a slot from firing twice.
    """
    query = _DUE + (" FOR UPDATE SKIP LOCKED" if lock else "")
    return [DueJob(*row) for row in conn.execute(query, (limit,)).fetchall()]


def claim_read(conn: Connection, me: LoopIdentity, due_jobs: list[DueJob], lease_s: float) -> ClaimBatch:
    """Claim the slots of jobs read by `read_due`, inside the caller's transaction; audit rows included."""
    batch = ClaimBatch()
    audit: list[AuditRow] = []
    for job in due_jobs:
        batch.db_now = job.db_now
        spec = JobSpec.from_dict(job.spec)
        due = collect_due(spec, job.seen_next_run_at, job.db_now)
        if due is None:  # jitter: not fireable yet
            continue
        claimed = _claim_slot(conn, me, spec, job.seen_next_run_at, due, job.db_now, lease_s, audit)
        if claimed is None:
            batch.skipped.append(job.name)
        else:
            batch.claimed.append(claimed)
    write_audit(conn, audit, me.loop_id, me.host_id)
    return batch


def _claim_slot(conn: Connection, me: LoopIdentity, spec: JobSpec, seen: datetime, due: Overdue,
                db_now: datetime, lease_s: float, audit: list[AuditRow]) -> Claimed | None:
    params = {"name": spec.name, "seen": seen, "slot": due.latest, "next": due.next_slot}
    if conn.execute(_ADVANCE, params).fetchone() is None:
        if conn.execute(_ADVANCE_PAST_FIRED, params).fetchone() is not None:
            audit.append(AuditRow(AuditEvent.RUN_SKIPPED, job=spec.name, slot=due.latest, reason="slot_already_fired",
                                  details={"next_run_at": due.next_slot}))
        return None  # else another loop moved the row since we read it: its decision, its audit
    overdue = (db_now - fire_at(spec, due.latest)).total_seconds()
    late = overdue > starting_deadline(spec, due.latest)
    missed = {"job": spec.name, "first_missed": seen, "catchup": spec.catchup.value}
    if late and spec.catchup is Catchup.SKIP:
        # One row for the whole misfire, counting every slot that did not fire.
        audit.append(AuditRow(AuditEvent.RUN_MISSED, job=spec.name, slot=due.latest, reason="starting_deadline",
                              details={**missed, "count": due.missed + 1, "overdue_s": round(overdue, 3)}))
        return None
    if due.missed:
        audit.append(AuditRow(AuditEvent.RUN_MISSED, job=spec.name, slot=due.latest, reason="coalesced",
                              details={**missed, "count": due.missed}))
    return _claim_run(conn, me, spec, due.latest, "schedule", 1, late, db_now, lease_s, audit)


def claim_force(conn: Connection, me: LoopIdentity, job: str, lease_s: float) -> Claimed | None:
    """A fire outside the schedule: no slot, next_run_at untouched, the same overlap rules."""
    audit: list[AuditRow] = []
    with short_transaction(conn):
        row = conn.execute("SELECT spec, clock_timestamp() FROM cronctl_jobs WHERE name = %s FOR UPDATE",
                           (job,)).fetchone()
        if row is None:
            raise JobNotFoundError(f"no job named {job!r} in the PostgreSQL store")
        claimed = _claim_run(conn, me, JobSpec.from_dict(row[0]), None, "force", 1, False, row[1], lease_s, audit)
        write_audit(conn, audit, me.loop_id, me.host_id)
    return claimed


def _claim_run(conn: Connection, me: LoopIdentity, spec: JobSpec, slot: datetime | None, trigger: str,
               attempt: int, late: bool, db_now: datetime, lease_s: float, audit: list[AuditRow]) -> Claimed | None:
    replaced: list[Any] = []
    if spec.overlap is Overlap.REPLACE:
        # The old runs end here, in the claim's transaction; their owners find their
        # fences gone at the next renewal and kill what is left of them.
        replaced = conn.execute(_REPLACE_LIVE, (spec.name,)).fetchall()
        audit.extend(AuditRow(AuditEvent.RUN_KILLED, job=spec.name, run_id=run_id, slot=old_slot, fence=fence,
                              reason="replaced") for fence, run_id, old_slot in replaced)
    run_id = new_run_id(db_now)
    row = conn.execute(_INSERT_RUN, {
        "run_id": run_id, "job": spec.name, "slot": slot, "trigger": trigger, "attempt": attempt,
        "exclusive": spec.overlap is Overlap.SKIP, "late": late, "loop_id": me.loop_id, "host_id": me.host_id,
        "boot_id": me.boot_id, "due_at": fire_at(spec, slot) if slot is not None else None, "lease": lease_s,
    }).fetchone()
    if row is None:
        audit.append(_refused_row(conn, spec.name, slot, trigger, attempt))
        return None
    fence, lease_expires_at = row
    audit.append(AuditRow(AuditEvent.RUN_CLAIMED, job=spec.name, run_id=run_id, slot=slot, fence=fence,
                          reason="scheduler_missed" if late else None, details={
                              "trigger": trigger, "attempt": attempt, "late": late or None, "pid": me.pid,
                              "replaces": [r[1] for r in replaced] or None}))
    return Claimed(run_id, spec.name, fence, slot, trigger, attempt, spec, late, lease_expires_at,
                   tuple(r[0] for r in replaced))


def _refused_row(conn: Connection, job: str, slot: datetime | None, trigger: str, attempt: int) -> AuditRow:
    """Why the run row was refused: a live run of an `overlap: skip` job, or the slot already has its run."""
    running = [r[0] for r in conn.execute(f"SELECT run_id FROM cronctl_runs WHERE job = %s AND state IN {_LIVE}"
                                          " ORDER BY claimed_at", (job,))]
    reason = "overlap" if running else "slot_already_fired"
    return AuditRow(AuditEvent.RUN_SKIPPED, job=job, slot=slot, reason=reason,
                    details={"running": ", ".join(running) or None, "trigger": trigger, "attempt": attempt})


# --- the gate and renewal ------------------------------------------------------------------

_GATE = """UPDATE cronctl_runs AS r SET state = 'running', pid = g.pid, pid_start = g.pid_start,
               dispatched_at = clock_timestamp(), lease_expires_at = clock_timestamp() + make_interval(secs => %s)
             FROM unnest(%s::bigint[], %s::integer[], %s::double precision[]) AS g(fence, pid, pid_start)
            WHERE r.fence = g.fence AND r.loop_id = %s AND r.state = 'claimed' AND NOT r.kill_requested
            RETURNING r.fence, r.run_id, r.job, r.slot, r.pid"""


def mark_dispatched(conn: Connection, me: LoopIdentity, gates: list[Gate], lease_s: float) -> frozenset[int]:
    """Mark gated children `running` in one statement; returns the fences whose gates may open.

    A fence missing from the result was reclaimed (or replaced) first: kill that child,
    nothing of the job has run. The lease restarts here, so a reclaim waiting behind this
    commit finds a fresh lease and leaves the run alone.
    """
    if not gates:
        return frozenset()
    with short_transaction(conn):
        rows = conn.execute(_GATE, (lease_s, [g.fence for g in gates], [g.pid for g in gates],
                                    [g.pid_start for g in gates], me.loop_id)).fetchall()
        write_audit(conn, [AuditRow(AuditEvent.RUN_STARTED, job=job, run_id=run_id, slot=slot, fence=fence,
                                    details={"pid": pid}) for fence, run_id, job, slot, pid in rows],
                    me.loop_id, me.host_id)
    return frozenset(row[0] for row in rows)


_RENEW = f"""UPDATE cronctl_runs SET lease_expires_at = clock_timestamp() + make_interval(secs => %s)
              WHERE loop_id = %s AND fence = ANY(%s) AND state IN {_LIVE} AND NOT kill_requested
              RETURNING fence"""


def renew(conn: Connection, me: LoopIdentity, fences: list[int], lease_s: float) -> Renewal:
    """Extend the leases of the runs this loop supervises; the ones it no longer holds are `lost`."""
    if not fences:
        return Renewal(frozenset(), frozenset())
    with short_transaction(conn):
        held = frozenset(row[0] for row in conn.execute(_RENEW, (lease_s, me.loop_id, fences)))
        lost = frozenset(fences) - held
        if lost:
            rows = conn.execute("SELECT fence, run_id, job, slot, state FROM cronctl_runs WHERE fence = ANY(%s)",
                                (sorted(lost),)).fetchall()
            write_audit(conn, [AuditRow(AuditEvent.RUN_FENCED, job=job, run_id=run_id, slot=slot, fence=fence,
                                        reason="lease_lost", details={"state": state, "pid": me.pid})
                               for fence, run_id, job, slot, state in rows], me.loop_id, me.host_id)
    return Renewal(held, lost)


# --- the end of a run ----------------------------------------------------------------------

_FINISH = f"""UPDATE cronctl_runs SET state = %(status)s, reason = %(reason)s, fault = %(fault)s,
                  exit_code = %(exit_code)s, signal = %(signal)s, output_tail = %(tail)s,
                  duration_s = coalesce(%(duration)s, extract(epoch FROM clock_timestamp() - dispatched_at)),
                  ended_at = clock_timestamp(), lease_expires_at = NULL
               WHERE fence = %(fence)s AND loop_id = %(loop_id)s AND state IN {_LIVE}
               RETURNING run_id, job, slot, attempt, late, duration_s"""


def finish(conn: Connection, me: LoopIdentity, fence: int, outcome: Outcome) -> Finish:
    """The fenced terminal write: refused (and audited `run.fenced`) unless this loop still holds `fence`."""
    with short_transaction(conn):
        row = conn.execute(_FINISH, {
            "status": outcome.status.value, "reason": outcome.reason, "fault": outcome.fault or _fault(outcome.status),
            "exit_code": outcome.exit_code, "signal": outcome.signal, "tail": outcome.output_tail[-OUTPUT_TAIL_CHARS:],
            "duration": outcome.duration, "fence": fence, "loop_id": me.loop_id,
        }).fetchone()
        if row is None:
            fenced = _fenced_row(conn, fence, outcome, me)
            write_audit(conn, [fenced], me.loop_id, me.host_id)
            return Finish(fenced=True, run_id=fenced.run_id, job=fenced.job)
        run_id, job, slot, attempt, late, duration = row
        rows = [AuditRow(AuditEvent.RUN_FINISHED, job=job, run_id=run_id, slot=slot, fence=fence, reason=outcome.reason,
                         details={"status": outcome.status.value, "exit_code": outcome.exit_code,
                                  "signal": outcome.signal, "attempt": attempt, "late": late or None,
                                  "duration_s": None if duration is None else round(duration, 3),
                                  "fault": outcome.fault or _fault(outcome.status)})]
        if outcome.status is RunStatus.KILLED:
            rows.insert(0, AuditRow(AuditEvent.RUN_KILLED, job=job, run_id=run_id, slot=slot, fence=fence,
                                    reason=outcome.reason))
        _record_last(conn, job, run_id, outcome.status, outcome.exit_code, outcome.reason)
        write_audit(conn, rows, me.loop_id, me.host_id)
    return Finish(fenced=False, run_id=run_id, job=job)


def _fenced_row(conn: Connection, fence: int, outcome: Outcome, me: LoopIdentity) -> AuditRow:
    row = conn.execute("SELECT run_id, job, slot, state, loop_id FROM cronctl_runs WHERE fence = %s",
                       (fence,)).fetchone()
    if row is None:
        return AuditRow(AuditEvent.RUN_FENCED, fence=fence, reason="claim_gone",
                        details={"status": outcome.status.value, "pid": me.pid})
    run_id, job, slot, state, owner = row
    return AuditRow(AuditEvent.RUN_FENCED, job=job, run_id=run_id, slot=slot, fence=fence,
                    reason="claim_not_owned" if owner != me.loop_id else "claim_ended",
                    details={"status": outcome.status.value, "recorded": state, "pid": me.pid})


def release(conn: Connection, me: LoopIdentity, fence: int, reason: str = "spawn_failed") -> bool:
    """A claimed run whose child could not be spawned: `not_started`, the next slot fires normally."""
    with short_transaction(conn):
        row = conn.execute("""UPDATE cronctl_runs SET state = 'not_started', reason = %s, fault = 'platform',
                                  ended_at = clock_timestamp(), lease_expires_at = NULL
                               WHERE fence = %s AND loop_id = %s AND state = 'claimed'
                               RETURNING run_id, job, slot""", (reason, fence, me.loop_id)).fetchone()
        if row is None:
            return False
        run_id, job, slot = row
        _record_last(conn, job, run_id, RunStatus.NOT_STARTED, None, reason)
        write_audit(conn, [AuditRow(AuditEvent.RUN_SPAWN_FAILED, job=job, run_id=run_id, slot=slot, fence=fence,
                                    reason=reason)], me.loop_id, me.host_id)
    return True


# --- reclaim -------------------------------------------------------------------------------

# A run never gated ends not_started: nothing of it ran. A gated one ends lost.
_RECLAIM = f"""UPDATE cronctl_runs AS r SET
                   state = CASE WHEN r.state = 'claimed' THEN 'not_started' ELSE 'lost' END,
                   reason = CASE WHEN r.state = 'claimed' THEN 'run_claimed_without_dispatch'
                                 ELSE 'executor_lost_mid_run' END,
                   fault = 'platform', ended_at = clock_timestamp(), lease_expires_at = NULL
                FROM (SELECT fence FROM cronctl_runs WHERE {{which}}
                       ORDER BY fence LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS picked
               WHERE r.fence = picked.fence AND r.state IN {_LIVE}
               RETURNING r.run_id, r.job, r.fence, r.state, r.host_id, r.pid, r.pid_start, r.slot, r.loop_id"""

# As in _DUE: the sub-select lets the lease index range-scan instead of filtering every live run.
_EXPIRED = f"state IN {_LIVE} AND lease_expires_at < (SELECT clock_timestamp()) - make_interval(secs => %(margin)s)"
_OWNED_HERE = f"state IN {_LIVE} AND fence = ANY(%(fences)s) AND host_id = %(host_id)s"


def reclaim_expired(conn: Connection, me: LoopIdentity, margin_s: float,
                    limit: int = DEFAULT_CLAIM_LIMIT) -> list[Reclaimed]:
    """End the live runs whose lease expired on the database clock more than `margin_s` ago."""
    return _reclaim(conn, me, _EXPIRED, {"margin": margin_s, "limit": limit}, "lease_expired")


def reclaim_dead_owner(conn: Connection, me: LoopIdentity, fences: list[int]) -> list[Reclaimed]:
    """End runs of this host whose owner the caller found dead (pid + start time, or an earlier boot)."""
    if not fences:
        return []
    return _reclaim(conn, me, _OWNED_HERE, {"fences": fences, "host_id": me.host_id, "limit": len(fences)},
                    "owner_dead")


def _reclaim(conn: Connection, me: LoopIdentity, which: str, params: dict[str, Any], reason: str) -> list[Reclaimed]:
    with short_transaction(conn):
        # `which` is one of this module's constant predicates, never user text.
        rows = conn.execute(_RECLAIM.format(which=which), params).fetchall()
        found = [Reclaimed(run_id, job, fence, RunStatus(state), host, pid, pid_start)
                 for run_id, job, fence, state, host, pid, pid_start, _, _ in rows]
        for run in found:
            _record_last(conn, run.job, run.run_id, run.status, None, reason)
        write_audit(conn, [AuditRow(AuditEvent.CLAIM_RECLAIMED, job=job, run_id=run_id, slot=slot, fence=fence,
                                    reason=reason, details={"status": state, "owner_host": host,
                                                            "owner_loop": str(owner), "pid": pid})
                           for run_id, job, fence, state, host, pid, _, slot, owner in rows], me.loop_id, me.host_id)
    return found


# --- the job's last run --------------------------------------------------------------------

_RECORD_LAST = """UPDATE cronctl_jobs SET state = state || %(last)s || jsonb_build_object('consecutive_failures',
                      CASE WHEN %(status)s = 'success' THEN 0
                           WHEN %(failed)s THEN coalesce((state->>'consecutive_failures')::int, 0) + 1
                           ELSE coalesce((state->>'consecutive_failures')::int, 0) END)
                   WHERE name = %(job)s"""


def _record_last(conn: Connection, job: str, run_id: str, status: RunStatus, exit_code: int | None,
                 reason: str | None) -> None:
    if status is RunStatus.NOT_STARTED:
        # Nothing ran: the job's last real run stays what it was, the failure stays visible.
        last: dict[str, Any] = {"last_not_started": {"run_id": run_id, "reason": reason}}
    else:
        last = {"last_status": status.value, "last_run_id": run_id, "last_exit_code": exit_code, "last_reason": reason}
    conn.execute(_RECORD_LAST, {"last": Jsonb(last), "status": status.value, "failed": status in FAILED_FOR_RETRY,
                                "job": job})


def _fault(status: RunStatus) -> str | None:
    if status in (RunStatus.ERROR, RunStatus.TIMEOUT):
        return "job"
    if status in (RunStatus.LOST, RunStatus.NOT_STARTED):
        return "platform"
    return None
