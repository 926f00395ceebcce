"""Job chains in the store document (SPEC §10): pure functions over `doc["chains"]`.

A chain starts when a run of a job that has dependants ends (its root; a forced run
starts one only with `force-run --chain`); its id is that root run's id. Each job of
the chain is a node:

    doc["chains"][chain_id] = {
        "root": "a", "slot": <root slot>, "started_at": ..., "ended_at": None, "outcome": None,
        "nodes": {"a": {"status": "success", "run_id": ...},
                  "b": {"status": "ready", "ready_at": ..., "upstream": [run ids]},
                  "c": {"status": "running", "run_id": ..., "attempt": 1},
                  "d": {"status": "waiting"}},
    }

Node statuses: waiting -> ready -> running -> (retrying -> running)* -> a run status
(success, error, ...) or skipped (with a reason). `after_finish` runs inside the same
fenced write as the run's finish (claims.finish), so the trigger of a dependant is
durable exactly when its upstream's end is: a loop killed in between finds the node
`ready` after restart and claims it once. A node is `running` exactly while its claim
exists, for the same reason; one found running without a claim (released without a
start) is ready again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronctl.jobs.chain_broken import BREAKING, MARK
from cronctl.jobs.graph import descendants_of
from cronctl.jobs.state import JobView
from cronctl.models import FAILED_STATUSES, AuditEvent, JobSpec, Requires, RunStatus, Trigger
from cronctl.store import chain_skips, notify_owed
from cronctl.timefmt import from_iso, to_iso

WAITING, READY, RUNNING, RETRYING, SKIPPED = "waiting", "ready", "running", "retrying", "skipped"
OPEN = frozenset({WAITING, READY, RUNNING, RETRYING})
UPSTREAM_FAILED = "upstream_failed"
KEEP_ENDED = 200  # ended chains kept for `history --chain`, `show` and metrics; older ones are dropped

Row = tuple[AuditEvent, dict[str, Any]]


def chains_of(doc: dict[str, Any]) -> dict[str, Any]:
    chains: dict[str, Any] = doc.setdefault("chains", {})
    return chains


def specs_of(doc: dict[str, Any], names: Any = None) -> dict[str, JobSpec]:
    """The definitions of `names` that exist (None: of every job that is `after` another,
    all a chain can reach): a chain's decisions never parse the jobs outside it."""
    jobs = doc["jobs"]
    if names is None:
        names = _dependants(doc)
    return {name: JobView.from_entry(jobs[name]).spec for name in names if name in jobs}


def _dependants(doc: dict[str, Any]) -> list[str]:
    """The jobs that run after another: in a one-job transaction (LazyJobs), found in the
    bytes and parsed alone, not by parsing every job of the store (a chain's hop must not
    grow with the store: 1000 other jobs cost each finish and claim of a chain 6 ms)."""
    jobs = doc["jobs"]
    named = getattr(jobs, "chain_names", None)
    candidates = named() if named is not None else None
    if candidates is None:
        return [name for name, entry in jobs.items() if entry.get("after")]
    return [name for name in candidates if (jobs.get(name) or {}).get("after")]


def has_dependants(doc: dict[str, Any], job: str) -> bool:
    return job in _upstream_names(doc)


def dependant_count(doc: dict[str, Any], job: str) -> int:
    """How many jobs run right after `job` (a scheduled root's first hop)."""
    return sum(1 for name in _dependants(doc) if job in (doc["jobs"][name].get("after") or ()))


def waiting_count(doc: dict[str, Any], chain_id: str) -> int:
    """How many nodes of the chain still wait on an upstream."""
    nodes = chains_of(doc)[chain_id]["nodes"]
    return sum(1 for node in nodes.values() if node.get("status") == WAITING)


# Every finish asks has_dependants; a batch of finishes is one transaction of one revision,
# so the set of upstream names is computed once per (jobs mapping, revision), not per run
# (a scan of 1000 jobs per finish cost 80 ms per batch of 1000 finishes).
_upstreams_cache: tuple[tuple[int, Any], frozenset[str]] | None = None


def _upstream_names(doc: dict[str, Any]) -> frozenset[str]:
    global _upstreams_cache
    if getattr(doc["jobs"], "chain_free", False):
        return frozenset()  # a one-job transaction's LazyJobs knows without parsing every job
    key = (id(doc["jobs"]), doc.get("rev"))
    cached = _upstreams_cache
    if cached is not None and cached[0] == key:
        return cached[1]
    names = frozenset(up for name in _dependants(doc) for up in doc["jobs"][name].get("after") or ())
    _upstreams_cache = (key, names)
    return names


# --- start -----------------------------------------------------------------------------------


def start_chain(doc: dict[str, Any], root: str, chain_id: str, slot: str, now: datetime,
                root_status: str = RUNNING) -> list[Row]:
    """A new chain from `root`: the root (running, or `ready` for a forced chain) and every
    job below it, waiting."""
    below = descendants_of(root, specs_of(doc))
    nodes: dict[str, dict[str, Any]] = {name: {"status": WAITING} for name in below}
    nodes[root] = {"status": root_status}
    if root_status == READY:
        nodes[root].update({"ready_at": to_iso(now), "upstream": []})
    chains_of(doc)[chain_id] = {"root": root, "slot": slot, "started_at": to_iso(now), "ended_at": None,
                                "outcome": None, "nodes": dict(sorted(nodes.items()))}
    return [(AuditEvent.CHAIN_STARTED, {"chain": chain_id, "root": root, "jobs": sorted(nodes)})]


# --- a run ended -------------------------------------------------------------------------------


def after_finish(doc: dict[str, Any], job: str, claim: dict[str, Any], record: dict[str, Any],
                 retrying: bool, now: datetime) -> list[Row]:
    """Called by claims.finish, in its transaction, once a run's end is recorded."""
    rows: list[Row] = []
    chain_id = claim.get("chain")
    if chain_id is None:
        if claim.get("trigger") == Trigger.FORCE or not has_dependants(doc, job):
            return []
        chain_id = claim["run_id"]
        rows += start_chain(doc, job, chain_id, claim["slot"], now)
    chain = chains_of(doc).get(chain_id)
    if chain is None or job not in chain["nodes"]:
        return rows  # the chain was dropped meanwhile (or the job joined it later): nothing to decide
    record["chain"] = chain_id
    node = chain["nodes"][job]
    if retrying:
        # The retry belongs to the chain: it is claimed from here, with the chain's id.
        retry = doc["jobs"][job]["state"].pop("retry")
        node.update({"status": RETRYING, "run_id": claim["run_id"], "attempt": retry["attempt"],
                     "due_at": retry["due_at"]})
        return rows
    for key in ("due_at", "ready_at"):
        node.pop(key, None)
    node.update({"status": record["status"], "run_id": claim["run_id"], "ended_at": record["ended_at"]})
    if record["status"] in BREAKING:
        _failed_its_chain(doc["jobs"][job]["state"], chain_id, record)
    return rows + propagate(doc, chain_id, now)


def _failed_its_chain(state: dict[str, Any], chain_id: str, record: dict[str, Any]) -> None:
    """The node's own end fails its chain: its job reads `failing`, counted by its alert_after,
    whatever ended the run (jobs/chain_broken.py)."""
    if state.get("last_run_id") != record["run_id"]:
        # Nothing ran (not_started): a lone run keeps its job's last real run, but a node's
        # LAST is its outcome in its last chain (SPEC §10).
        state.update({
            "last_run_at": record["claimed_at"], "last_status": record["status"], "last_exit_code": None,
            "last_signal": None, "last_reason": record["reason"], "last_run_id": record["run_id"],
            "last_slot": record["slot"], "last_duration": None, "last_late": False,
        })
    if record["status"] not in FAILED_STATUSES:  # killed, not_started: the run bumped no streak itself
        state["consecutive_failures"] = int(state.get("consecutive_failures") or 0) + 1
    state[MARK] = {"chain": chain_id, "run_id": record["run_id"], "status": record["status"]}


def propagate(doc: dict[str, Any], chain_id: str, now: datetime) -> list[Row]:
    """Decide every waiting node whose upstreams have all ended: ready, or skipped."""
    chain = chains_of(doc)[chain_id]
    nodes: dict[str, dict[str, Any]] = chain["nodes"]
    specs = specs_of(doc, nodes)
    rows: list[Row] = []
    changed = True
    while changed:  # a skip can decide the nodes below it
        changed = False
        for name in sorted(nodes):
            node = nodes[name]
            spec = specs.get(name)
            if node["status"] != WAITING:
                continue
            if spec is None or not spec.after:
                # Removed, or edited onto a schedule of its own, while the chain ran.
                reason = "job_removed" if spec is None else "definition_changed"
                rows += _skip(doc, chain_id, name, reason, None, None, now)
                changed = True
                continue
            upstreams = [up for up in spec.after if up in nodes]
            if any(nodes[up]["status"] in OPEN for up in upstreams):
                continue
            blocker = _unsatisfied(spec, upstreams, nodes)
            if blocker is None:
                node.update({"status": READY, "ready_at": to_iso(now),
                             "upstream": [nodes[up]["run_id"] for up in upstreams if nodes[up].get("run_id")]})
                rows.append((AuditEvent.CHAIN_TRIGGERED, {"chain": chain_id, "job": name, "after": upstreams,
                                                          "upstream": node["upstream"]}))
            else:
                rows += _skip(doc, chain_id, name, UPSTREAM_FAILED, blocker, nodes[blocker]["status"], now)
            changed = True
    return rows + _end_if_done(doc, chain_id, now)


def _unsatisfied(spec: JobSpec, upstreams: list[str], nodes: dict[str, dict[str, Any]]) -> str | None:
    """The first upstream that does not satisfy `requires`; a skipped upstream never does."""
    for up in upstreams:
        status = nodes[up]["status"]
        if status == SKIPPED:
            return up
        if spec.requires is Requires.SUCCESS and status != RunStatus.SUCCESS:
            return up
    return None


def _skip(doc: dict[str, Any], chain_id: str, name: str, reason: str, upstream: str | None,
          upstream_status: str | None, now: datetime, into: dict[str, Any] | None = None) -> list[Row]:
    """The node is skipped; unless it left the chain, the skip is a run of its job (chain_skips).
    `into`: the details of a row the caller wrote already (completed here, not written again)."""
    node = chains_of(doc)[chain_id]["nodes"][name]
    details: dict[str, Any] = into if into is not None else {"job": name}
    details.update({"chain": chain_id, "reason": reason, "upstream": upstream, "upstream_status": upstream_status})
    skip_id = chain_skips.record_skip(doc, chain_id, name, details, now)
    node.clear()
    node.update({"status": SKIPPED, "reason": reason, "ended_at": to_iso(now)})
    if skip_id is not None:
        node["run_id"] = skip_id
    if upstream is not None:
        node.update({"upstream_job": upstream, "upstream_status": upstream_status})
    return [(AuditEvent.RUN_SKIPPED, details)] if into is None else []


def skip_node(doc: dict[str, Any], chain_id: str, name: str, reason: str, now: datetime,
              into: dict[str, Any] | None = None) -> list[Row]:
    """A node that is not claimed (paused, removed, refused by overlap): skipped; its
    dependants follow. `into`: the details of the node's own row, when the caller wrote it."""
    rows = _skip(doc, chain_id, name, reason, None, None, now, into)
    return rows + propagate(doc, chain_id, now)


def _end_if_done(doc: dict[str, Any], chain_id: str, now: datetime) -> list[Row]:
    chain = chains_of(doc)[chain_id]
    if chain["ended_at"] is not None or any(n["status"] in OPEN for n in chain["nodes"].values()):
        return []
    ended = [n["status"] for n in chain["nodes"].values()]
    chain["outcome"] = "success" if all(s == RunStatus.SUCCESS for s in ended) else "failed"
    chain["ended_at"] = to_iso(now)
    # A counter that outlives the dropped chains, for `cronctl metrics` (like the lateness histogram).
    totals = doc.setdefault("metrics", {}).setdefault("chains_by_outcome", {})
    totals[chain["outcome"]] = int(totals.get(chain["outcome"]) or 0) + 1
    _drop_old(doc)
    statuses = dict(sorted((name, node["status"]) for name, node in chain["nodes"].items()))
    details = {"chain": chain_id, "root": chain["root"], "outcome": chain["outcome"], "statuses": statuses}
    # Owed here, in whichever write ends the chain (a finish, or a claim write's skips).
    notify_owed.chain_failed(doc, details, now)
    return [(AuditEvent.CHAIN_FINISHED, details)]


def _drop_old(doc: dict[str, Any]) -> None:
    chains = chains_of(doc)
    ended = sorted((c["ended_at"], cid) for cid, c in chains.items() if c["ended_at"] is not None)
    for _, cid in ended[:-KEEP_ENDED] if len(ended) > KEEP_ENDED else []:
        del chains[cid]


# --- what is due --------------------------------------------------------------------------------


def due_nodes(doc: dict[str, Any], now: datetime) -> list[tuple[str, str, dict[str, Any]]]:
    """(chain id, job, node) to claim now: ready nodes, retries that fell due, and
    running nodes whose claim is gone without an end (a spawn failure released it)."""
    due: list[tuple[str, str, dict[str, Any]]] = []
    for chain_id, chain in sorted((doc.get("chains") or {}).items()):
        if chain["ended_at"] is not None:
            continue
        for name, node in sorted(chain["nodes"].items()):
            if node["status"] == RUNNING and not _claim_exists(doc, name, node.get("run_id")):
                node["status"] = READY if int(node.get("attempt") or 1) == 1 else RETRYING
                node.setdefault("due_at", node.get("ready_at"))
            if node["status"] == READY or (node["status"] == RETRYING and _stamp_due(node.get("due_at"), now)):
                due.append((chain_id, name, node))
    return due


def earliest_chain_fire(doc: dict[str, Any]) -> datetime | None:
    """When the loop next has a chain node to claim (for its sleep), else None."""
    instants: list[datetime] = []
    for chain in (doc.get("chains") or {}).values():
        if chain.get("ended_at") is not None:
            continue
        for name, node in chain["nodes"].items():
            if node["status"] == READY or (node["status"] == RUNNING
                                           and not _claim_exists(doc, name, node.get("run_id"))):
                stamp = node.get("ready_at") or node.get("due_at") or chain["started_at"]
            elif node["status"] == RETRYING:
                stamp = node.get("due_at")
            else:
                continue
            when = from_iso(stamp)
            if when is not None:
                instants.append(when)
    return min(instants) if instants else None


def _claim_exists(doc: dict[str, Any], job: str, run_id: str | None) -> bool:
    entry = doc["jobs"].get(job)
    return entry is not None and run_id in (entry["state"].get("claims") or {})


def _stamp_due(stamp: str | None, now: datetime) -> bool:
    when = from_iso(stamp)
    return when is not None and when <= now


def mark_running(doc: dict[str, Any], chain_id: str, job: str, run_id: str, attempt: int) -> None:
    node = chains_of(doc)[chain_id]["nodes"][job]
    node.update({"status": RUNNING, "run_id": run_id, "attempt": attempt})


def run_env(chain_id: str, node: dict[str, Any]) -> dict[str, str]:
    """What a chain's child is told: its chain, and the runs it came after."""
    return {"CRONCTL_CHAIN_ID": chain_id, "CRONCTL_UPSTREAM": ",".join(node.get("upstream") or [])}
