"""Job chains run by two leaderless loops on one PostgreSQL store, each playing a host (SPEC §9,
§10): a diamond and a failing branch; every node of every chain runs once, whichever loop
claims it, and the node below the failure is skipped once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.loophelp import stop, wait_until
from tests.pg.clusterhelp import one, rows, seed, start_host_loop

pytestmark = pytest.mark.slow

CHAINS = """
jobs:
  - {{name: a, every: 2s, command: 'echo "$CRONCTL_CHAIN_ID a" >> {oracle}'}}
  - {{name: b, after: a, command: 'sleep 0.2; echo "$CRONCTL_CHAIN_ID b" >> {oracle}'}}
  - {{name: c, after: a, command: 'echo "$CRONCTL_CHAIN_ID c" >> {oracle}'}}
  - {{name: d, after: [b, c], command: 'echo "$CRONCTL_CHAIN_ID d" >> {oracle}'}}
  - {{name: f, after: a, command: 'echo "$CRONCTL_CHAIN_ID f" >> {oracle}; exit 3'}}
  - {{name: g, after: f, command: 'echo "$CRONCTL_CHAIN_ID g" >> {oracle}'}}
"""


def _finished(store_url: str) -> list[str]:
    return [str(row[0]) for row in rows(store_url, "SELECT details->>'chain' FROM cronctl_audit"
                                                   " WHERE event = 'chain.finished' ORDER BY id")]


def test_two_hosts_run_each_node_of_each_chain_once(tmp_path: Path, store_url: str) -> None:
    oracle = tmp_path / "oracle.txt"
    seed(store_url, tmp_path, CHAINS.format(oracle=oracle))
    loops = [start_host_loop(tmp_path / host, store_url, host) for host in ("host-a", "host-b")]
    try:
        wait_until(lambda: len(_finished(store_url)) >= 3, timeout=90)
    finally:
        codes = [stop(proc) for proc in loops]
    assert codes == [0, 0], [(tmp_path / host / "loop.log").read_text() for host in ("host-a", "host-b")]
    ran = Counter(tuple(line.split()) for line in oracle.read_text().splitlines())
    assert ran and max(ran.values()) == 1, ran  # no node ran twice in a chain
    for chain in _finished(store_url):
        assert {job for (cid, job) in ran if cid == chain} == {"a", "b", "c", "d", "f"}, (chain, ran)
        statuses = dict(rows(store_url, "SELECT job, state FROM cronctl_runs WHERE record->>'chain' = %s", chain))
        assert statuses == {"a": "success", "b": "success", "c": "success", "d": "success", "f": "error",
                            "g": "skipped"}, statuses
        outcome = one(store_url, "SELECT chain->>'outcome' FROM cronctl_chains WHERE chain_id = %s", chain)
        assert outcome == "failed"
    dup = one(store_url, "SELECT count(*) FROM (SELECT job, slot, attempt FROM cronctl_runs"
                         " GROUP BY 1, 2, 3 HAVING count(*) > 1) AS d")
    assert dup == 0
