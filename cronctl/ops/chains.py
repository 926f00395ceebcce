"""Use cases of job chains for the operator (SPEC §10): a chain's runs, the graph of a
job with each node's last status, and chain counts for metrics. Read only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from cronctl.context import Context
from cronctl.errors import JobNotFoundError
from cronctl.jobs.graph import dependants_of, roots_of, tree_lines


def chain_history(ctx: Context, chain_id: str, job: str | None = None) -> list[dict[str, Any]]:
    """The finished runs of one chain, in the order they started."""
    records = [r for r in ctx.leases.history(job) if r.get("chain") == chain_id]
    if not records and chain_id not in (ctx.store.read().get("chains") or {}):
        raise JobNotFoundError(f"no chain '{chain_id}' (a chain's id is its root run's id; see 'cronctl history')")
    return sorted(records, key=lambda r: (r.get("started_at") or r.get("claimed_at") or "", r["run_id"]))


@dataclass(frozen=True)
class ChainGraph:
    """The graphs `show NAME` draws: one text tree per root the job belongs to."""

    trees: list[list[str]]


def chain_graph(ctx: Context, name: str) -> ChainGraph | None:
    """None for a job outside any chain."""
    if ctx.on_postgres or ctx.store.chain_free():
        # No chain at all (PostgreSQL refuses them): spared building every job's view, a
        # tenth of a second at 10,000 jobs. `show` has found the job itself already.
        return None
    # Through the lease store's views: the same on the JSON store and on PostgreSQL.
    views = {view.spec.name: view for view in ctx.leases.jobs()}
    specs = {job: view.spec for job, view in views.items()}
    if name not in specs:
        raise JobNotFoundError(f"no job named '{name}' (see 'cronctl list')")
    if not specs[name].after and not dependants_of(name, specs):
        return None

    def label(job: str) -> str:
        view = views.get(job)
        if view is None:
            return f"{job} (not defined)"
        last = "running" if view.claims else view.state.get("last_status") or "never run"
        return f"{job}  [{last}]  {view.spec.schedule_text}"

    return ChainGraph([tree_lines(root, specs, label) for root in sorted(roots_of(name, specs))])


def chain_counts(doc: dict[str, Any]) -> tuple[dict[str, int], int]:
    """(ended chains by outcome since the store began, chains in progress now)."""
    ended = dict((doc.get("metrics") or {}).get("chains_by_outcome") or {})
    open_now = sum(1 for chain in (doc.get("chains") or {}).values() if chain.get("ended_at") is None)
    return ended, open_now


def chain_metrics(doc: dict[str, Any], counter: Any, gauge: Any) -> Iterator[Any]:
    """The Prometheus families of chains: counted by outcome, and in progress."""
    ended, open_now = chain_counts(doc)
    total = counter("cronctl_chains", "Ended job chains by outcome (success: every job succeeded).",
                    labels=["outcome"])
    for outcome in sorted({"success", "failed", *ended}):
        total.add_metric([outcome], int(ended.get(outcome) or 0))
    yield total
    running = gauge("cronctl_chains_in_progress", "Job chains started and not yet ended.")
    running.add_metric([], open_now)
    yield running


@dataclass(frozen=True)
class ForcedChain:
    chain_id: str
    jobs: list[str]  # the node and every job below it, upstreams first
    loop_running: bool


def force_chain(ctx: Context, name: str) -> ForcedChain:
    """`force-run NODE --chain`: a new chain rooted at NODE, its node recorded ready.

    The loop claims it like any chain node (its own retries, overlap and env apply), and
    its dependants follow as in a scheduled chain; no loop: it starts when one runs.
    """
    from cronctl.jobs.graph import topological
    from cronctl.loop.heartbeat import loop_alive
    from cronctl.models import AuditEvent

    now = ctx.clock.now()
    ctx.leases.job(name)  # JobNotFoundError names it before anything is written
    ctx.audit.append(AuditEvent.FORCE_RUN_REQUESTED, job=name, chain=True)
    chain_id, jobs = ctx.leases.force_chain(name, now)
    specs = {view.spec.name: view.spec for view in ctx.leases.jobs()}
    return ForcedChain(chain_id, topological(jobs, specs), loop_alive(ctx.paths, now) is not None)
