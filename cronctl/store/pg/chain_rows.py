"""Job chains on PostgreSQL (SPEC §10): one `cronctl_chains` row per chain, locked by the writes that decide it.

The chain decisions are the JSON store's (store/chain_doc.py, store/chains.py) on the
unit's document: `doc["chains"]` holds the chain rows a unit locked, `doc["jobs"]` the
job rows it locked (every job below a job it names: what `has_dependants` and
`start_chain` read, found by the GIN index on `spec->'after'`, never by reading every
chained job) and, in a claim write, the dependants of its jobs read without a lock (a
claimed root is told its chain: `chains.mark_roots`); those are never written.

What a unit locks, always chain rows first and then job rows (so two loops never
deadlock), is planned inside its transaction before any job row is locked:

- a named unit (a finish, a reclaim...): the chains of the named jobs' live chain claims,
  and the nodes of those chains; a named job that has dependants (its end starts a
  chain) also locks every job below it, which that end may trigger or skip;
- the claim write (`due`): the open chains with a node to claim (SKIP LOCKED: another
  loop deciding one keeps it), and their nodes;
- a chain's hop (`chain`): that chain and its nodes.

A node skipped by its chain is a run: its `cronctl_runs` row (state `skipped`, its
history record) is written with the audit row that says so, in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from psycopg.types.json import Jsonb

from cronctl.store import chain_doc, chain_skips
from cronctl.store.claims import Event
from cronctl.store.pg import functions
from cronctl.store.pg.audit import dumps
from cronctl.store.pg.connect import Connection
from cronctl.timefmt import from_iso


@dataclass
class ChainPlan:
    """What one unit locks for chains (see the module doc)."""

    chains: dict[str, dict[str, Any]] = field(default_factory=dict)  # the chain rows locked, by id
    jobs: list[str] = field(default_factory=list)  # job rows to lock (waiting) before the unit's own
    covers: bool = False  # `jobs` holds every row the unit names (no second statement)
    # Read (not locked) the dependants of the jobs locked: what `mark_roots` asks of a claimed
    # root (has it dependants?) in the claim writes.
    read_dependants: bool = False

    @property
    def meta(self) -> bool:
        """Whether the unit may end a chain (its metrics count chains by outcome)."""
        return bool(self.chains) or bool(self.jobs and not self.read_dependants)


# The chains of the named jobs' live runs, and every job downstream of the named ones (by
# the GIN index on `after`): what their ends may trigger or skip.
_NAMED = """
WITH RECURSIVE below(name) AS (
    SELECT name FROM cronctl_jobs WHERE spec ? 'after' AND spec->'after' ?| %(names)s
    UNION
    SELECT j.name FROM cronctl_jobs AS j JOIN below AS b ON j.spec ? 'after' AND j.spec->'after' ? b.name)
SELECT (SELECT coalesce(array_agg(DISTINCT claim->>'chain'), '{}') FROM cronctl_runs
         WHERE job = ANY(%(names)s) AND live AND claim->>'chain' IS NOT NULL),
       (SELECT coalesce(array_agg(name), '{}') FROM below)"""


def lock_chains(conn: Connection, chain_ids: list[str], skip_locked: bool = False) -> dict[str, dict[str, Any]]:
    if not chain_ids:
        return {}
    rows = conn.execute("SELECT chain_id, chain FROM cronctl_chains WHERE chain_id = ANY(%s) ORDER BY chain_id"
                        f" FOR UPDATE{' SKIP LOCKED' if skip_locked else ''}", (sorted(set(chain_ids)),)).fetchall()
    return {str(chain_id): chain for chain_id, chain in rows}


def _nodes(chains: dict[str, dict[str, Any]]) -> set[str]:
    return {name for chain in chains.values() for name in chain["nodes"]}


def plan_named(conn: Connection, names: list[str]) -> ChainPlan | None:
    """A named unit: the chains its jobs' live runs belong to, and the jobs below its own."""
    params = {"names": names}
    # First one level down (functions._NAMED_FIRST): most jobs have no dependant, and that plans
    # in a third of the time of the recursive query; only a job with dependants asks for all.
    first = functions.named_first(conn, names)
    row = conn.execute(_NAMED, params).fetchone() if first[1] else (first[0], [])
    assert row is not None
    ids, below = [str(cid) for cid in row[0]], [str(name) for name in row[1]]
    if not ids and not below:
        return None
    chains = lock_chains(conn, ids)
    return ChainPlan(chains, sorted(set(names) | _nodes(chains) | set(below)), covers=True)


def plan_due(conn: Connection) -> ChainPlan:
    """The claim write: open chains with a node to claim (ready, a retry, or running with its
    claim gone), those another loop holds left to it."""
    open_chains = functions.open_chains(conn)
    running = [node.get("run_id") for _, chain in open_chains for node in chain["nodes"].values()
               if node["status"] == chain_doc.RUNNING and node.get("run_id")]
    live = {str(row[0]) for row in conn.execute(
        "SELECT run_id FROM cronctl_runs WHERE run_id = ANY(%s) AND live", (running,)).fetchall()} \
        if running else set()
    wanted = [str(chain_id) for chain_id, chain in open_chains if any(
        node["status"] in (chain_doc.READY, chain_doc.RETRYING)
        or (node["status"] == chain_doc.RUNNING and node.get("run_id") not in live)
        for node in chain["nodes"].values())]
    chains = lock_chains(conn, wanted, skip_locked=True)
    return ChainPlan(chains, sorted(_nodes(chains)), read_dependants=True)


def plan_chain(conn: Connection, chain_id: str) -> ChainPlan:
    """A chain's hop: that chain (if it is still open) and its nodes."""
    chains = {cid: chain for cid, chain in lock_chains(conn, [chain_id]).items() if chain.get("ended_at") is None}
    return ChainPlan(chains, sorted(_nodes(chains)), covers=True)


def plan_reads(conn: Connection) -> ChainPlan:
    """A unit that starts no chain and decides none (claim ahead): the dependants of its jobs, read."""
    return ChainPlan(read_dependants=True)


def dependants_of(conn: Connection, names: list[str]) -> list[str]:
    """The jobs that run after any of `names` (the GIN index on `after`)."""
    if not names:
        return []
    return functions.dependants(conn, names)  # by the GIN index, planned once per backend (functions.py)


# --- writing back ---------------------------------------------------------------------------


def save_chains(conn: Connection, before: dict[str, bytes], chains: dict[str, Any], dump: Any) -> None:
    """The chains this unit changed, started or dropped; then the ended ones beyond the last
    KEEP_ENDED (chain_doc._drop_old, over the whole table: a unit holds only its own)."""
    ended_one = False
    for chain_id, chain in chains.items():
        if dump(chain) == before.get(chain_id):
            continue
        ended_one = ended_one or chain.get("ended_at") is not None
        conn.execute(  # an id is its root run's: a chain of that id is this one (an import of it again)
            "INSERT INTO cronctl_chains (chain_id, root, jobs, chain, started_at, ended_at)"
            " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (chain_id) DO UPDATE SET jobs = EXCLUDED.jobs,"
            " chain = EXCLUDED.chain, ended_at = EXCLUDED.ended_at",
            (chain_id, chain["root"], sorted(chain["nodes"]), Jsonb(chain, dumps=dumps),
             from_iso(chain.get("started_at")), from_iso(chain.get("ended_at"))))
    dropped = [chain_id for chain_id in before if chain_id not in chains]
    if dropped:
        conn.execute("DELETE FROM cronctl_chains WHERE chain_id = ANY(%s)", (dropped,))
    if ended_one:
        conn.execute("DELETE FROM cronctl_chains WHERE chain_id IN (SELECT chain_id FROM cronctl_chains"
                     " WHERE ended_at IS NOT NULL ORDER BY ended_at DESC, chain_id DESC OFFSET %s)",
                     (chain_doc.KEEP_ENDED,))


def insert_skip_runs(conn: Connection, host_id: str, events: list[Event]) -> None:
    """Each node skipped as a run (chain_skips.is_skip_run): its row, ended, with its record."""
    for event in events:
        if not chain_skips.is_skip_run(str(event.name), event.details):
            continue
        record = chain_skips.skip_record(event.details)
        conn.execute(
            "INSERT INTO cronctl_runs (run_id, job, slot, trigger, attempt, exclusive, state, reason, host_id,"
            " claimed_at, ended_at, record) VALUES (%s, %s, %s, 'chain', 1, false, 'skipped', %s, %s,"
            " %s, %s, %s)",
            (record["run_id"], record["job"], from_iso(record.get("slot")), record.get("reason"), host_id,
             from_iso(record["ended_at"]), from_iso(record["ended_at"]), Jsonb(record, dumps=dumps)))


def read_chains(conn: Connection) -> dict[str, Any]:
    """Every chain kept (the open ones and the last ended), for the document reads."""
    rows = conn.execute("SELECT chain_id, chain FROM cronctl_chains ORDER BY chain_id").fetchall()
    return {str(chain_id): chain for chain_id, chain in rows}
