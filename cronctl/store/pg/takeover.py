"""Claims held ahead by a loop that went silent are taken over, and never block a slot (SPEC §9).

A loop claims a slot shortly before its instant and spawns the child at a closed gate
(`claim_ahead`); the gate opens only after a write marks the run dispatched. If that loop
stops answering in between (a stalled network, a stopped process), its claim holds the
slot, and the job's `overlap: skip` would make every other loop skip the following slots
as `overlap` because of a run that never started. So, on PostgreSQL:

- a claim never dispatched (state `claimed`) whose loop has not beaten for
  `UNREACHABLE_AFTER_S` (3 ticks), or stopped, or is gone, or whose gate should have
  opened that long ago, is reclaimed by another loop
  with its own reason, `owner_unreachable` (`claim.reclaimed`, status `not_started`: its
  gate never opened; as a hand-back, its run row goes, so the slot may fire under its
  key), and the job's next slot goes back to the held slot, so that loop fires it now
  (late, by the job's catch-up rules);
- the old owner's dispatch write then finds its claim gone (it is fenced as every write
  is) and cancels the gate: nothing of that copy ever runs;
- a job whose live claim is one not yet dispatched is left due, not skipped, by a claim
  (`deferred_by_held`): its slot fires once that claim is dispatched or taken over.

The owner's liveness is judged under the job's row lock, on the database clock, from its
`cronctl_loops` row (host, boot, pid as the claim names them).
"""

from __future__ import annotations

from typing import Any

from cronctl.models import AuditEvent, Overlap, RunStatus
from cronctl.store.claims import Event, Owner
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.document import DocTransaction
from cronctl.store.schema import bump_counter, find_claim
from cronctl.timefmt import from_iso, to_iso

OWNER_UNREACHABLE = "owner_unreachable"
# As loops.UNREACHABLE_AFTER_S (3 ticks), which `status` judges by; loops.py imports this module.
UNREACHABLE_AFTER_S = 3.0

# A claimed (never dispatched) run whose owner loop has no fresh, unstopped row; or one held
# ahead whose gate should have opened 3 ticks ago (its owner beats, but the write that claimed
# it never answered it: the claim committed, the reply was lost, no child waits at its gate).
_SILENT_OWNER = f"""(NOT EXISTS (
    SELECT 1 FROM cronctl_loops AS l
     WHERE l.host_id = r.host_id AND l.boot_id IS NOT DISTINCT FROM r.boot_id
       AND l.pid::text = r.claim -> 'owner' ->> 'pid' AND l.stopped_at IS NULL
       AND l.heartbeat_at >= clock_timestamp() - interval '{UNREACHABLE_AFTER_S} seconds')
    OR (r.claim ->> 'held_until')::timestamptz < clock_timestamp() - interval '{UNREACHABLE_AFTER_S} seconds')"""

# For the beat: whether any held claim waits for a takeover. (`r.live`, implied by the state, is
# what lets the planner read the few live runs on cronctl_runs_live.)
HELD_BY_SILENT = f"EXISTS (SELECT 1 FROM cronctl_runs AS r WHERE r.live AND r.state = 'claimed' AND {_SILENT_OWNER})"

_FIND = (f"SELECT r.job, r.run_id FROM cronctl_runs AS r WHERE r.live AND r.state = 'claimed' AND {_SILENT_OWNER}"
         " ORDER BY r.fence")
_STILL = f"SELECT 1 FROM cronctl_runs AS r WHERE r.run_id = %s AND r.live AND r.state = 'claimed' AND {_SILENT_OWNER}"


def held_by_silent_loops(conn: Connection) -> list[tuple[str, str]]:
    """(job, run_id) of the claims to take over, oldest first (read, no lock)."""
    return [(str(job), str(run_id)) for job, run_id in conn.execute(_FIND).fetchall()]


def take_over(tx: DocTransaction, job: str, run_id: str) -> bool:
    """Inside the job's locked transaction: take the held claim back if its loop is still silent.

    As a hand-back (`unhold`), its run row goes (nothing of it ran, and its slot is to fire
    again under the same key), and the job's next slot returns to it; unlike one, it is
    audited as a reclaim, with its own reason."""
    claim = find_claim(tx.doc, job, run_id)
    if claim is None or claim.get("dispatched") or not isinstance(claim.get("owner"), dict):
        return False
    if tx.conn.execute(_STILL, (run_id,)).fetchone() is None:
        return False  # it beat again, or dispatched, while we waited for the lock
    if claim.get("trigger") == "force":
        return _record_not_started(tx, job, run_id, claim)  # whoever forced it learns nothing ran
    state = tx.doc["jobs"][job]["state"]
    state["claims"].pop(run_id, None)
    if claim.get("trigger") == "schedule":
        _fire_again(state, claim.get("slot"))
    bump_counter(tx.doc, OWNER_UNREACHABLE)
    tx.events.append(Event(AuditEvent.CLAIM_RECLAIMED, {
        "job": job, "run_id": run_id, "slot": claim.get("slot"), "reason": OWNER_UNREACHABLE,
        "status": RunStatus.NOT_STARTED.value, "run_reason": "run_claimed_without_dispatch", "processes_killed": 0,
        "owner_pid": claim["owner"].get("pid"), "owner_host": claim["owner"].get("host"),
        "next_run_at": state.get("next_run_at"),
    }))
    return True


def _record_not_started(tx: DocTransaction, job: str, run_id: str, claim: dict[str, Any]) -> bool:
    """A forced run has no slot to fire again: it is ended `not_started`, recorded, as any reclaim."""
    return reclaim_in(tx, job, run_id, Owner.from_dict(claim["owner"]), OWNER_UNREACHABLE, tx.db_now, 0)


def reclaim_in(tx: DocTransaction, job: str, run_id: str, seen_owner: Owner | None, reason: str,
               judged: Any, processes_killed: int) -> bool:
    """`reclaim_claim` inside `tx`, its rows and record kept for the commit; False when fenced."""
    from cronctl.store.decisions import reclaim_claim

    reclaimed = reclaim_claim(tx.doc, job, run_id, seen_owner, reason, judged, processes_killed)
    if reclaimed is None:
        return False
    done, rows = reclaimed
    tx.events.extend(rows)
    tx.keep_record(done.record)
    return True


def _fire_again(state: dict[str, Any], slot: str | None) -> None:
    """The held slot is due again (it never fired: the high-water mark is only raised at dispatch)."""
    held, next_run = from_iso(slot), from_iso(state.get("next_run_at"))
    if held is not None and (next_run is None or held < next_run):
        state["next_run_at"] = to_iso(held)


def without_held(doc: dict[str, Any]) -> dict[str, Any]:
    """The document minus the skip jobs whose live claim was never dispatched: those are left
    due (see the module doc), not skipped as `overlap` because of a run that has not started."""
    jobs = {name: entry for name, entry in doc["jobs"].items() if not _held_skip_job(entry)}
    return {**doc, "jobs": jobs}


def _held_skip_job(entry: dict[str, Any]) -> bool:
    if (entry.get("overlap") or Overlap.SKIP.value) != Overlap.SKIP.value:
        return False
    claims = (entry.get("state") or {}).get("claims") or {}
    return bool(claims) and all(not claim.get("dispatched") for claim in claims.values())
