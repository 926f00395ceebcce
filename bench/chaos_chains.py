"""A diamond chain in bench/pg_chaos.py (`--chains`): its jobs, and what is checked of it.

The root `ka` runs every 3 s; `kb` and `kc` run after it, `kd` after both (SPEC §10). Every
run of the chain appends `start JOB CHAIN_ID RUN_ID` to its own ledger ($CRONCTL_CHAIN_ID:
the root run's id, on every run of the chain), so the main ledger's checks are untouched.
Its processes carry the main LEDGER in their env too, so the leftover-process scans
(bench/chaos_procs.py) see them. Checked once the last loop has stopped:

- chain_duplicates: a (job, chain id) started by more than one run (each node runs at most
  once per chain, whichever loop claims it, through every fault);
- chains_without_outcome: a `chain.finished` row, or an ended `cronctl_chains` row, with no
  outcome `success`/`failed`; chains_finished_twice: a chain with two `chain.finished` rows;
- chain_nodes_live_left: a node of an open chain still `running`, or a chain run still
  `claimed`/`running` in `cronctl_runs`, after the last loop stopped;
- for the picture: chains started and finished, their outcomes, the node statuses of the
  failed ones, and the chains left open (started, not finished: their next node `ready`
  or `waiting` when the loops stopped is no fault).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

ROOT_EVERY = "3s"
NODES = (("ka", None, 0.2), ("kb", "ka", 0.3), ("kc", "ka", 0.1), ("kd", "[kb, kc]", 0.1))
SCRIPT = ('echo "start $CRONCTL_JOB $CRONCTL_CHAIN_ID $CRONCTL_RUN_ID" >> "$CHAIN_LEDGER"; sleep $NAP; '
          'echo "end $CRONCTL_JOB $CRONCTL_CHAIN_ID $CRONCTL_RUN_ID" >> "$CHAIN_LEDGER"')


def jobs_yaml(ledger: Path, chain_ledger: Path, kill_grace_s: float) -> str:
    """The diamond's jobs, to append to the bench's jobs.yaml (same kill_grace: the lease allows no less)."""
    lines = []
    for name, after, nap in NODES:
        lines += [f"  - name: {name}", f"    every: {ROOT_EVERY}" if after is None else f"    after: {after}",
                  f"    command: {json.dumps(SCRIPT)}",
                  f"    env: {{LEDGER: {json.dumps(str(ledger))}, CHAIN_LEDGER: {json.dumps(str(chain_ledger))},"
                  f" NAP: '{nap}'}}",
                  f"    kill_grace: {kill_grace_s:g}s", "    timeout: 10s"]
    return "\n".join(lines) + "\n"


def _starts(chain_ledger: Path) -> dict[tuple[str, str], set[str]]:
    starts: dict[tuple[str, str], set[str]] = {}
    for line in chain_ledger.read_text().splitlines() if chain_ledger.exists() else []:
        parts = line.split()
        if len(parts) == 4 and parts[0] == "start":
            starts.setdefault((parts[1], parts[2]), set()).add(parts[3])
    return starts


def analyse(url: str, chain_ledger: Path) -> dict[str, Any]:
    starts = _starts(chain_ledger)
    names = [name for name, _after, _nap in NODES]
    with psycopg.connect(url, autocommit=True) as conn:
        started = {str(row[0]) for row in conn.execute(
            "SELECT details->>'chain' FROM cronctl_audit WHERE event = 'chain.started'").fetchall()}
        finished = conn.execute("SELECT details->>'chain', details->>'outcome', details->'statuses'"
                                " FROM cronctl_audit WHERE event = 'chain.finished'").fetchall()
        ended_no_outcome = conn.execute("SELECT count(*) FROM cronctl_chains WHERE ended_at IS NOT NULL"
                                        " AND coalesce(chain->>'outcome', '') NOT IN ('success', 'failed')").fetchone()
        open_running = conn.execute("SELECT count(*) FROM cronctl_chains AS c, jsonb_each(c.chain->'nodes') AS n"
                                    " WHERE c.ended_at IS NULL AND n.value->>'status' = 'running'").fetchone()
        live_runs = conn.execute("SELECT count(*) FROM cronctl_runs WHERE job = ANY(%s)"
                                 " AND state IN ('claimed', 'running')", (names,)).fetchone()
    finished_ids = Counter(str(chain) for chain, _outcome, _statuses in finished)
    failed_nodes = Counter(f"{job} {status}" for _chain, outcome, statuses in finished if outcome == "failed"
                           for job, status in (statuses or {}).items() if status != "success")
    return {
        "chain_node_starts": sum(len(runs) for runs in starts.values()),
        "chain_duplicates": sum(1 for runs in starts.values() if len(runs) > 1),
        "chain_duplicates_first": [f"{job} {chain}" for (job, chain), runs in starts.items() if len(runs) > 1][:5],
        "chains_started": len(started),
        "chains_finished": len(finished_ids),
        "chains_finished_twice": sum(1 for count in finished_ids.values() if count > 1),
        "chain_outcomes": dict(Counter(str(outcome) for _chain, outcome, _statuses in finished).most_common()),
        "chains_without_outcome": sum(1 for _c, outcome, _s in finished if outcome not in ("success", "failed"))
        + int(ended_no_outcome[0] if ended_no_outcome else 0),
        "chain_failed_nodes": dict(failed_nodes.most_common()),
        "chains_open_left": len(started - set(finished_ids)),
        "chain_nodes_live_left": int(open_running[0] if open_running else 0) + int(live_runs[0] if live_runs else 0),
    }
