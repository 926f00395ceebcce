"""Use cases of job chains for the operator (SPEC §10): a chain's runs, the graph of a
job with each node's last status, and chain counts for metrics. Read only."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Iterator

from cronctl.context import Context
from cronctl.errors import JobNotFoundError, no_job_named
from cronctl.jobs.graph import dependants_of, roots_of, tree_lines


def chain_history(ctx: Context, chain_id: str, job: str | None = None) -> list[dict[str, Any]]:
    """The runs of one chain, skipped nodes included, upstreams before their dependants."""
    return chain_report(ctx, chain_id, job).runs


@dataclass(frozen=True)
class ChainNode:
    """A node of a chain as it stands: its status there and its run, when it has one."""

    job: str
    status: str
    run_id: str | None
    reason: str | None = None
    upstream: str | None = None  # the upstream that made it skip

    def to_dict(self) -> dict[str, Any]:
        return {"job": self.job, "status": self.status, "run_id": self.run_id, "reason": self.reason,
                "upstream": self.upstream}


@dataclass(frozen=True)
class ChainReport:
    """`history --chain ID`: every node in order, its runs, and the chain's outcome."""

    chain_id: str
    root: str | None
    outcome: str | None  # success, failed; None while the chain runs (or once it was dropped)
    ended_at: str | None
    nodes: list[ChainNode]
    runs: list[dict[str, Any]]
    known: bool = True  # False: the chain was dropped from the store (only its runs remain)

    def to_dict(self) -> dict[str, Any]:
        return {"chain": self.chain_id, "root": self.root, "outcome": self.outcome, "ended_at": self.ended_at,
                "nodes": [node.to_dict() for node in self.nodes], "runs": self.runs}


def chain_report(ctx: Context, chain_id: str, job: str | None = None) -> ChainReport:
    """One chain: its nodes in graph order (upstreams first), each node's runs in that order."""
    from cronctl.jobs.graph import topological

    records = [r for r in ctx.leases.history(job) if r.get("chain") == chain_id]
    doc = ctx.store.read()
    chain = (doc.get("chains") or {}).get(chain_id)
    if not records and chain is None:
        raise JobNotFoundError(f"no chain '{chain_id}' (a chain's id is its root run's id; see 'cronctl history')")
    specs = {view.spec.name: view.spec for view in ctx.leases.jobs()}
    names = list((chain or {}).get("nodes") or {}) or [str(r["job"]) for r in records]
    known = {name for name in names if name in specs}
    order = topological(known, specs) + sorted(set(names) - known)
    if job is not None:
        order = [name for name in order if name == job]
    rank = {name: index for index, name in enumerate(order)}
    records.sort(key=lambda r: (rank.get(str(r["job"]), len(rank)), _when(r), r["run_id"]))
    nodes = [_node(name, (chain or {}).get("nodes", {}).get(name), records) for name in order]
    return ChainReport(chain_id, (chain or {}).get("root"), (chain or {}).get("outcome"),
                       (chain or {}).get("ended_at"), nodes, records, chain is not None)


def _when(record: dict[str, Any]) -> str:
    return str(record.get("started_at") or record.get("claimed_at") or record.get("ended_at") or "")


def _node(name: str, node: dict[str, Any] | None, records: list[dict[str, Any]]) -> ChainNode:
    mine = [r for r in records if r["job"] == name]
    if node is None:  # the chain was dropped: its last record says how the node ended
        last = mine[-1] if mine else {}
        return ChainNode(name, str(last.get("status") or "unknown"), last.get("run_id"), last.get("reason"),
                         last.get("upstream"))
    return ChainNode(name, str(node["status"]), node.get("run_id"), node.get("reason"), node.get("upstream_job"))


@dataclass(frozen=True)
class ChainGraph:
    """The graphs `show NAME` draws: one text tree per root the job belongs to."""

    trees: list[list[str]]
    # For `show --json`: per root, its last chain and each node's outcome there.
    last: list[dict[str, Any]] = field(default_factory=list)


def chain_graph(ctx: Context, name: str) -> ChainGraph | None:
    """None for a job outside any chain."""
    if ctx.store.chain_free():
        # No chain at all: spared building every job's view, a tenth of a second at 10,000
        # jobs. `show` has found the job itself already.
        return None
    # Through the lease store's views: the same on the JSON store and on PostgreSQL.
    views = {view.spec.name: view for view in ctx.leases.jobs()}
    specs = {job: view.spec for job, view in views.items()}
    if name not in specs:
        raise no_job_named(name)
    if not specs[name].after and not dependants_of(name, specs):
        return None

    chains = ctx.store.read().get("chains") or {}
    trees, lasts = [], []
    for root in sorted(roots_of(name, specs)):
        last_id, last = last_chain(chains, root)
        head = [f"last chain {last_id}: {last.get('outcome') or 'in progress'}"] if last_id else ["no chain yet"]
        trees.append(head + tree_lines(root, specs, partial(_label, views=views, chain=last)))
        lasts.append({"root": root, "chain": last_id, "outcome": last.get("outcome"),
                      "nodes": {job: _node(job, node, []).to_dict()
                                for job, node in (last.get("nodes") or {}).items()}})
    return ChainGraph(trees, lasts)


def last_chain(chains: dict[str, Any], root: str) -> tuple[str | None, dict[str, Any]]:
    """The chain of `root` started last (ids sort by time), or (None, {})."""
    mine = [(chain.get("started_at") or "", chain_id) for chain_id, chain in chains.items()
            if chain.get("root") == root]
    if not mine:
        return None, {}
    chain_id = max(mine)[1]
    return chain_id, chains[chain_id]


def _label(job: str, views: dict[str, Any], chain: dict[str, Any]) -> str:
    """A node with its outcome in the root's last chain (SPEC §10); outside it, its last run."""
    view = views.get(job)
    if view is None:
        return f"{job} (not defined)"
    node = (chain.get("nodes") or {}).get(job)
    if node is not None:
        last = str(node["status"])
        if node.get("upstream_job"):
            last += f": upstream {node['upstream_job']} {node.get('upstream_status')}"
        elif node.get("reason"):
            last += f": {node['reason']}"
    else:
        last = "running" if view.claims else view.state.get("last_status") or "never run"
    return f"{job}  [{last}]  {view.spec.schedule_text}"


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
    if ctx.cluster is not None:  # any live loop of the cluster claims it on its next tick
        from cronctl.ops.cluster import live_loops

        return ForcedChain(chain_id, topological(jobs, specs), bool(live_loops(ctx)))
    live = loop_alive(ctx.paths, now)
    if live is not None and live.pid:
        _wake(live.pid)
    return ForcedChain(chain_id, topological(jobs, specs), live is not None)


def _wake(pid: int) -> None:
    """The loop claims the new chain's first node on the tick this wakes, not within its sleep
    (the signal a control request wakes it with; with no request waiting it only ticks)."""
    import os
    import signal

    try:
        os.kill(pid, signal.SIGUSR1)
    except OSError:
        pass  # it looks at the store within its sleep (at most a second) anyway
