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
