"""Claiming the chain nodes that are due, in the claim write of a tick (SPEC §10).

The node's claim is an ordinary claim of its job (same overlap rules, fencing and
lease), marked with its chain: `claim["chain"]`, `claim["upstream"]`. Its slot is the
chain root's slot, so a job's runs read as one fire of the chain; its `due_at` is unset
(a chain run is not late against a schedule). Nothing here touches a process or a clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronctl.jobs.state import JobView
from cronctl.models import Trigger
from cronctl.store import chain_doc
from cronctl.store.claims import ClaimBatch, Event, Lease, Owner, _fire_or_skip
from cronctl.timefmt import from_iso


def claim_ready(doc: dict[str, Any], now: datetime, owner: Owner, lease: Lease, batch: ClaimBatch,
                capacity: int | None = None, only: str | None = None) -> None:
    """Claim every due chain node into `batch` (after the scheduled claims of the same write);
    `only`: the nodes of that chain alone (`force-run --chain` with no loop runs just its chain)."""
    if not doc.get("chains"):
        return
    for chain_id, job, node in chain_doc.due_nodes(doc, now):
        if only is not None and chain_id != only:
            continue
        if node["status"] not in (chain_doc.READY, chain_doc.RETRYING):
            continue  # decided by a skip earlier in this loop
        entry = doc["jobs"].get(job)
        if entry is None:
            _rows(batch, chain_doc.skip_node(doc, chain_id, job, "job_removed", now))
            continue
        view = JobView.from_entry(entry)
        chain = chain_doc.chains_of(doc)[chain_id]
        forced_root = bool(chain.get("forced")) and job == chain["root"]
        if view.paused and not forced_root:
            # A paused job does not run; the chain goes on without it rather than wait. (The node
            # an operator forced runs, paused or not, as a plain force-run does.)
            _rows(batch, chain_doc.skip_node(doc, chain_id, job, "paused", now))
            continue
        if capacity is not None and len(batch.claims) >= capacity:
            batch.deferred += 1
            continue
        _claim_node(doc, chain_id, job, node, view, entry["state"], now, owner, lease, batch)


def _claim_node(doc: dict[str, Any], chain_id: str, job: str, node: dict[str, Any], view: JobView,
                state: dict[str, Any], now: datetime, owner: Owner, lease: Lease, batch: ClaimBatch) -> None:
    chain = chain_doc.chains_of(doc)[chain_id]
    retrying = node["status"] == chain_doc.RETRYING
    attempt = int(node.get("attempt") or 1) if retrying else 1
    slot = from_iso(chain["slot"]) or now
    before = len(batch.claims)
    # A forced chain's id was drawn for its root's first run (SPEC §10: the chain id is the
    # root run's id); a later claim of the root (a retry, or after a release) gets its own.
    reserved = chain_id if job == chain["root"] and chain.get("forced") and node.get("run_id") is None else None
    _fire_or_skip(view, state, slot, Trigger.RETRY if retrying else Trigger.CHAIN, attempt, False,
                  now, owner, lease, batch, run_id=reserved)
    if len(batch.claims) == before:  # overlap skip: this chain goes on without it
        _rows(batch, chain_doc.skip_node(doc, chain_id, job, "overlap", now, into=batch.events[-1].details))
        return
    new = batch.claims[-1]
    new.chain = chain_id
    claim = state["claims"][new.run_id]
    claim.update({"chain": chain_id, "upstream": list(node.get("upstream") or []), "due_at": None})
    new.spec = new.spec.with_changes(env={**new.spec.env, **chain_doc.run_env(chain_id, node)})
    batch.events[-1].details["chain"] = chain_id
    chain_doc.mark_running(doc, chain_id, job, new.run_id, attempt)
    new.warm_hint = chain_doc.waiting_count(doc, chain_id)


def start_forced(doc: dict[str, Any], job: str, chain_id: str, now: datetime) -> list[Event]:
    """`force-run JOB --chain`: a new chain rooted at JOB, JOB ready to be claimed."""
    from cronctl.jobs.state import get_entry
    from cronctl.timefmt import to_iso

    get_entry(doc, job)  # JobNotFoundError names it
    rows = chain_doc.start_chain(doc, job, chain_id, to_iso(now) or "", now, root_status=chain_doc.READY)
    chain_doc.chains_of(doc)[chain_id]["forced"] = True
    return [Event(name, details) for name, details in rows]


def mark_roots(doc: dict[str, Any], batch: ClaimBatch) -> None:
    """A scheduled run of a job that has dependants starts a chain whose id is its run id
    (chain_doc.after_finish): tell the run so now, as every run of the chain is told."""
    for new in batch.claims:
        claim = doc["jobs"][new.job]["state"]["claims"].get(new.run_id) or {}
        if claim.get("chain") is None and new.trigger == Trigger.SCHEDULE and chain_doc.has_dependants(doc, new.job):
            new.extra_env = {"CRONCTL_CHAIN_ID": new.run_id, "CRONCTL_UPSTREAM": ""}
            new.warm_hint = chain_doc.dependant_count(doc, new.job)


def _rows(batch: ClaimBatch, rows: list[chain_doc.Row]) -> None:
    batch.events.extend(Event(name, details) for name, details in rows)
