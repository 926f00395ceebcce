"""A skipped chain node is a run (SPEC §10): a run id, a history record, the job's LAST.

When a chain decides not to run a node (its upstream did not satisfy `requires`, or the
node was paused or refused by its overlap), the decision is written in the chain's own
transaction: the node gets a run id, and the job's state says `skipped` as its last
status (so `status` and `show` tell the node's outcome in its last chain) and counts it
in `runs_by_status` (so `metrics` does). The audit row `run.skipped` carries what the
history record needs; the record is appended after the commit by whoever writes the
row (leases._write), and by outbox delivery when the writer died in between.

A skip is not a failure: it leaves `consecutive_failures` and the retry alone (its
upstream is the one that failed), and health reads it as a run that did not fail.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from cronctl.models import AuditEvent, RunStatus, Trigger
from cronctl.paths import Paths
from cronctl.store import history
from cronctl.timefmt import to_iso

# Skips that are no run of the job: it left the chain (edited onto a schedule) or is gone.
NOT_A_RUN = frozenset({"definition_changed", "job_removed"})


def skip_run_id(now: datetime) -> str:
    """The same shape as a claim's run id (claims.new_run_id): sortable by time, unique."""
    return f"{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def record_skip(doc: dict[str, Any], chain_id: str, job: str, details: dict[str, Any],
                now: datetime, run_id: str | None = None) -> str | None:
    """Inside the chain's transaction: make the skip of `job` a run. Adds `run_id`, `slot`
    and `ended_at` to the audit row's `details`; returns the run id (None: no run)."""
    entry = doc["jobs"].get(job)
    if entry is None or details.get("reason") in NOT_A_RUN:
        return None
    run_id = run_id or skip_run_id(now)
    chain = (doc.get("chains") or {}).get(chain_id) or {}
    ended = to_iso(now)
    details.update({"run_id": run_id, "slot": chain.get("slot"), "ended_at": ended})
    state = entry["state"]
    totals = state.setdefault("runs_by_status", {})
    totals[RunStatus.SKIPPED.value] = int(totals.get(RunStatus.SKIPPED.value) or 0) + 1
    state.update({
        "last_run_at": ended, "last_status": RunStatus.SKIPPED.value, "last_exit_code": None,
        "last_signal": None, "last_reason": details.get("reason"), "last_run_id": run_id,
        "last_slot": chain.get("slot"), "last_duration": None, "last_late": False,
    })
    return run_id


def is_skip_run(name: str, details: dict[str, Any]) -> bool:
    """Whether an audit row is a chain node's skip that is recorded as a run."""
    return str(name) == AuditEvent.RUN_SKIPPED.value and bool(details.get("chain")) and bool(details.get("run_id")) \
        and bool(details.get("ended_at"))


def skip_record(details: dict[str, Any]) -> dict[str, Any]:
    """The history record of a skipped node, in the shape of a run's record (claims._history_record)."""
    return {
        "job": details["job"], "run_id": details["run_id"], "slot": details.get("slot"),
        "trigger": Trigger.CHAIN.value, "attempt": 1, "claimed_at": None, "started_at": None,
        "ended_at": details["ended_at"], "duration": None, "status": RunStatus.SKIPPED.value,
        "exit_code": None, "signal": None, "reason": details.get("reason"), "fault": None,
        "late": False, "late_reason": None, "output_tail": "", "chain": details["chain"],
        "upstream": details.get("upstream"), "upstream_status": details.get("upstream_status"),
        "log": None,
    }


def write_records(paths: Paths, rows: list[tuple[str, dict[str, Any]]], dedupe: bool = False) -> None:
    """After the commit: the history records of the skips among `rows` (event, details).
    `dedupe`: a delivery of a dead writer's rows, some of which may have reached the history."""
    for name, details in rows:
        if not is_skip_run(name, details):
            continue
        if dedupe and history.find_record(paths, details["job"], details["run_id"]) is not None:
            continue
        history.append_record(paths, skip_record(details))
