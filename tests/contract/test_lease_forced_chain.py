"""`force_chain` and `claim_chain` (SPEC §10, `force-run JOB --chain`), on every backend:
the forced chain's root is claimed under the chain's id, by that chain's claim alone."""

from __future__ import annotations

from tests.contract.conftest import Backend
from tests.contract.test_lease_store import OWNER_A, at, lease


def test_a_forced_chain_is_claimed_by_its_own_claim_alone(lease_store: Backend) -> None:
    lease_store.define("a", every="1h")
    lease_store.define("b", after=["a"])

    chain_id, jobs = lease_store.leases.force_chain("a", at(10))
    assert jobs == ["a", "b"]
    assert lease_store.leases.claim_chain("20260301T120010-00000000", at(10), OWNER_A, lease(at(10))).claims == []
    [root] = lease_store.leases.claim_chain(chain_id, at(10), OWNER_A, lease(at(10))).claims
    assert (root.job, root.run_id, root.slot) == ("a", chain_id, at(10))
    assert lease_store.leases.claim_chain(chain_id, at(11), OWNER_A, lease(at(11))).claims == []  # claimed once
    assert [claim.run_id for claim in lease_store.leases.claims_of("a")] == [chain_id]


def test_a_chain_nodes_claim_tells_how_many_nodes_wait_below_it(lease_store: Backend) -> None:
    """NewClaim.warm_hint: the loop keeps that many warm children for the hop (loop/warm_hops.py)."""
    lease_store.define("r", every="1h")
    for name in ("w0", "w1", "w2"):
        lease_store.define(name, after=["r"])
    lease_store.define("x", after=["w0"])
    chain_id, _ = lease_store.leases.force_chain("r", at(10))
    [root] = lease_store.leases.claim_chain(chain_id, at(10), OWNER_A, lease(at(10))).claims
    assert (root.chain, root.warm_hint) == (chain_id, 4), "w0, w1, w2 and x wait"


def test_a_scheduled_roots_claim_tells_how_many_jobs_run_right_after_it(lease_store: Backend) -> None:
    from tests.contract.test_lease_store import MINUTE, start_one

    lease_store.define("a", every="1m")
    lease_store.define("b", after=["a"])
    lease_store.define("c", after=["a"])
    lease_store.define("d", after=["b", "c"])
    assert start_one(lease_store, at(MINUTE)).warm_hint == 2
