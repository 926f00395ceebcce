"""A dependant's health while its chain is in progress (SPEC §10): `waiting`, or `wedged`
when it has waited longer than its upstreams could possibly take.

Pure over the chains of the store document (plain data) and the job definitions, like
health.py, so `status` and `status --stale` say the same thing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from cronctl.jobs.health import JobHealth
from cronctl.jobs.state import JobView
from cronctl.models import JobSpec
from cronctl.timefmt import from_iso

WAITING_NODES = ("waiting", "ready", "retrying")
# What a running loop needs to claim a ready node (it wakes at least every second), with room
# for a loop restart: a node ready for longer than its upstreams' time plus this is wedged.
CLAIM_GRACE = 60.0


def chain_health(chains: Mapping[str, Any], view: JobView, specs: Mapping[str, JobSpec],
                 now: datetime) -> JobHealth | None:
    """None unless the job waits in an open chain and nothing of it runs."""
    if view.claims or view.paused:
        return None
    for chain_id, chain in sorted(chains.items()):
        node = chain["nodes"].get(view.spec.name)
        if chain.get("ended_at") is not None or node is None or node["status"] not in WAITING_NODES:
            continue
        started = from_iso(chain.get("started_at"))
        limit = upstream_deadline(view.spec.name, set(chain["nodes"]), specs)
        waited = (now - started).total_seconds() if started is not None else 0.0
        if limit is not None and waited > limit:
            return JobHealth("wedged", f"chain {chain_id} started {chain['started_at']} and this job still waits "
                                       f"({node['status']}), past the {limit:g}s its upstreams may take; "
                                       "is 'cronctl run' running?", "platform")
        return JobHealth("waiting", _waiting_reason(chain_id, view.spec, node, chain["nodes"]), None)
    return skipped_health(chains, view)


def skipped_health(chains: Mapping[str, Any], view: JobView) -> JobHealth | None:
    """A node its last chain skipped is not failing (its upstream is): `ok`, in words that
    name the chain and the upstream, where health.py would say only "last run skipped"."""
    state = view.state
    if state.get("last_status") != "skipped":
        return None
    run_id = state.get("last_run_id")
    for chain_id, chain in chains.items():
        node = chain["nodes"].get(view.spec.name) or {}
        if node.get("run_id") == run_id and node.get("status") == "skipped":
            upstream = node.get("upstream_job")
            why = (f"upstream {upstream} ended {node.get('upstream_status')}" if upstream
                   else str(node.get("reason")))
            return JobHealth("ok", f"skipped in chain {chain_id} ({why})", None)
    return None


def upstream_deadline(name: str, in_chain: set[str], specs: Mapping[str, JobSpec]) -> float | None:
    """The longest its upstreams in the chain may take: each one's timeout and kill grace,
    times its attempts, plus its retry delays, plus CLAIM_GRACE; None when one of them has
    no timeout."""
    total = CLAIM_GRACE
    for upstream in _ancestors(name, specs) & in_chain:
        spec = specs[upstream]
        if spec.timeout <= 0:
            return None
        attempts = spec.retries + 1
        total += (spec.timeout + spec.kill_grace) * attempts + spec.retry_delay * (2 ** spec.retries - 1)
    return total


def _ancestors(name: str, specs: Mapping[str, JobSpec]) -> set[str]:
    found: set[str] = set()
    frontier = list(specs[name].after) if name in specs else []
    while frontier:
        current = frontier.pop()
        if current in found or current not in specs:
            continue
        found.add(current)
        frontier.extend(specs[current].after)
    return found


def _waiting_reason(chain_id: str, spec: JobSpec, node: dict[str, Any], nodes: Mapping[str, Any]) -> str:
    if node["status"] == "ready":
        return f"ready in chain {chain_id}: its upstreams ended; the loop starts it on its next tick"
    if node["status"] == "retrying":
        return f"retry {node.get('attempt')} at {node.get('due_at')} in chain {chain_id}"
    # Only the upstreams in this chain that have not ended (a chain forced at b has no c).
    pending = [up for up in spec.after if (nodes.get(up) or {}).get("status") in ("waiting", "ready", "running",
                                                                                 "retrying")]
    return f"waiting on {', '.join(pending or [up for up in spec.after if up in nodes])} in chain {chain_id}"
