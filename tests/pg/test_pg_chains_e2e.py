"""Job chains run by two leaderless loops on one PostgreSQL store, each playing a host (SPEC §9,
§10): a diamond and a failing branch; every node of every chain runs once, whichever loop
claims it, and the node below the failure is skipped once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.loophelp import stop, wait_until
from tests.pg.clusterhelp import one, rows, run_cli, seed, start_host_loop

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


FORCED = """
jobs:
  - {{name: x, every: 24h, command: 'echo "$CRONCTL_CHAIN_ID x" >> {oracle}'}}
  - {{name: y, after: x, command: 'echo "$CRONCTL_CHAIN_ID y" >> {oracle}'}}
"""


def test_a_chain_forced_from_another_host_is_run_by_the_loops(tmp_path: Path, store_url: str) -> None:
    """No job is due: the loops find the forced chain's ready root by the chain rows alone."""
    oracle = tmp_path / "oracle.txt"
    seed(store_url, tmp_path, FORCED.format(oracle=oracle))
    loops = [start_host_loop(tmp_path / host, store_url, host) for host in ("host-a", "host-b")]
    try:
        wait_until(lambda: one(store_url, "SELECT count(*) FROM cronctl_loops WHERE stopped_at IS NULL") == 2,
                   timeout=60)
        done = run_cli(tmp_path / "host-c", store_url, "host-c", "force-run", "x", "--wait", timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        chain = done.stdout.splitlines()[-1].split()[1].rstrip(":")
        node = run_cli(tmp_path / "host-c", store_url, "host-c", "force-run", "y", "--chain", "--wait", timeout=60)
        assert node.returncode == 0, node.stdout + node.stderr
    finally:
        codes = [stop(proc) for proc in loops]
    assert codes == [0, 0]
    ran = oracle.read_text().splitlines()
    # The forced chain ran x and y; the node forced with --chain ran y alone, in a chain of its
    # own. Chain ids end in random hex, so neither their sorted order nor (were x's --wait over
    # before its y) the file's order says which is which.
    others = [line for line in ran if not line.startswith(f"{chain} ")]
    assert len(ran) == 3 and {f"{chain} x", f"{chain} y"} <= set(ran), ran
    assert len(others) == 1 and others[0].endswith(" y"), ran
    hosts = {str(row[0]) for row in rows(store_url, "SELECT host_id FROM cronctl_runs WHERE record IS NOT NULL")}
    assert hosts <= {"host-a", "host-b"}, "run by the loops, not by the calling host"
