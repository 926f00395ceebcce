"""A reclaim by lease is fenced on the lease it judged expired, not only on the owner.

A healer on another host judges a run broken from rows it read before taking the job's
row lock; the owner may renew, or open the run's gate, in between. The JSON store's
`reclaim_claim` fences on the owner alone (on one host, a dead pid stays dead); on
PostgreSQL an owner whose lease ran out may still be alive (a stopped loop, a slow
network), so under the lock the lease is judged again (MULTIHOST §4):

- the gate restarts the lease, for as long as the claim granted it: an owner passing its
  gate is alive, and a reclaim waiting behind that commit finds the lease fresh;
- a reclaim for `lease_expired` of a claim whose lease now ends after the judging
  instant does nothing: the owner renewed first, its run goes on.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronctl.store.claims import Dispatched
from cronctl.store.schema import find_claim
from cronctl.timefmt import from_iso, to_iso

LEASE_EXPIRED = "lease_expired"  # the healer's reason (jobs.health.claim_problem) judged by the lease


def restart_leases(doc: dict[str, Any], runs: list[Dispatched], at: datetime) -> None:
    """The gated runs' leases run again from `at`, each as long as its claim granted it (never shortened)."""
    for run in runs:
        claim = find_claim(doc, run.job, run.run_id)
        claimed, until = from_iso((claim or {}).get("claimed_at")), from_iso((claim or {}).get("lease_until"))
        if claim is None or claimed is None or until is None:
            continue
        claim["lease_until"] = to_iso(max(until, at + (until - claimed)))


def renewed_since_judged(doc: dict[str, Any], job: str, run_id: str, reason: str, now: datetime) -> bool:
    """Whether a reclaim for `reason` at `now` must leave the run: judged by its lease, now fresh again."""
    if reason != LEASE_EXPIRED:
        return False  # a dead owner (same host) or an operator's release is not a lease's judgment
    until = from_iso((find_claim(doc, job, run_id) or {}).get("lease_until"))
    return until is not None and until > now
