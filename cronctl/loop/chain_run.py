"""`force-run --chain` with no loop (SPEC §10): this process runs one chain to its end with
the loop's own steps, as `run_one` runs one job: claim the chain's due nodes (and only
those: no scheduled job fires here), dispatch them, record their ends (which trigger or
skip the nodes below), renew leases, and sleep until a result or a retry falls due."""

from __future__ import annotations

from typing import Any

from cronctl.loop.engine import Engine
from cronctl.store import chain_doc

IDLE_WAKE = 1.0  # seconds between looks when nothing of the chain runs here


def drive_chain(engine: Engine, chain_id: str) -> dict[str, Any] | None:
    """Until the chain has ended (or was dropped): its last state, None if it is gone."""
    ctx = engine.ctx
    while True:
        engine.record_results()
        batch = ctx.leases.claim_chain(chain_id, ctx.clock.now(), engine.owner, engine.lease())
        engine.dispatch(batch)
        engine.warm_hops.tend(engine.busy)
        doc = ctx.store.read()
        chain = (doc.get("chains") or {}).get(chain_id)
        if chain is None or chain.get("ended_at") is not None:
            return chain
        engine.wake.wait(_sleep(doc, engine))
        engine.wake.clear()
        engine.renew_if_due()


def _sleep(doc: dict[str, Any], engine: Engine) -> float:
    """A result wakes us at once; otherwise until the next retry (or ready node) is due."""
    due = chain_doc.earliest_chain_fire(doc)
    if due is None:
        return IDLE_WAKE
    return max(0.0, min(IDLE_WAKE, (due - engine.ctx.clock.now()).total_seconds()))
