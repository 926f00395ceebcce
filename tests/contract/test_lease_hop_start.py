"""`claim_chain(..., start=)` on every backend (SPEC §10 hops, §5.2 dispatch): the children a
hop already has (warm ones) are adopted inside its claim write, and the runs given one are
marked dispatched by that same write, with their run.started rows; the others stay claimed,
for the usual spawn and mark. A write that fails leaves no claim; a crash after it leaves
dispatched runs that the healer reclaims as any dispatched run of a dead owner (`lost`)."""

from __future__ import annotations

import pytest

from cronctl.store.claims import ClaimBatch, Dispatched, NewClaim
from tests.contract.conftest import Backend
from tests.contract.test_lease_store import OWNER_A, OWNER_B, at, lease, success


def fan_out(backend: Backend) -> str:
    """r -> w0, w1, w2 forced and r run: the hop's three nodes ready. The chain's id."""
    backend.define("r", every="1h")
    for name in ("w0", "w1", "w2"):
        backend.define(name, after=["r"])
    chain_id, _ = backend.leases.force_chain("r", at(10))
    [root] = backend.leases.claim_chain(chain_id, at(10), OWNER_A, lease(at(10))).claims
    backend.leases.mark_dispatched(OWNER_A, [Dispatched("r", root.run_id, 39_000, 9.0, 1.0)], at(10))
    backend.leases.finish_many(OWNER_A, [run_end(root)], at(11))
    return chain_id


def run_end(new: NewClaim) -> object:
    from cronctl.store.leases import RunEnd

    return RunEnd(new.run_id, success(), new.job, None)


class Warm:
    """Two children there before the claim: the first two claims get one each. `committed`
    notes what the write kept, and the run.started rows written by then (none yet: the
    gates open at the commit, before the write's rows)."""

    def __init__(self, count: int = 2, backend: Backend | None = None) -> None:
        self.count = count
        self.backend = backend
        self.given: list[NewClaim] = []
        self.kept: list[str] | None = None
        self.started_then: list[str] | None = None

    def __call__(self, claims: list[NewClaim]) -> list[Dispatched]:
        self.given = list(claims)
        return [Dispatched(new.job, new.run_id, 41_000 + index, 50.0 + index, 5.0)
                for index, new in enumerate(claims[:self.count])]

    def committed(self, batch: ClaimBatch) -> None:
        self.kept = [run.job for run in batch.dispatched]
        if self.backend is not None:
            self.started_then = [row["job"] for row in self.backend.events("run.started") if row["job"] != "r"]


def test_the_runs_given_a_child_in_the_claim_write_are_dispatched_by_it(lease_store: Backend) -> None:
    chain_id = fan_out(lease_store)
    warm = Warm(backend=lease_store)
    batch = lease_store.leases.claim_chain(chain_id, at(12), OWNER_A, lease(at(12)), start=warm)
    assert [new.job for new in batch.claims] == ["w0", "w1", "w2"] and warm.given == batch.claims
    assert warm.kept == ["w0", "w1"], "told once the write committed, with the runs it kept dispatched"
    if lease_store.name == "json":
        assert warm.started_then == [], "before the write's rows: on JSON they are appended after it"
    assert [(run.job, run.pid) for run in batch.dispatched] == [("w0", 41_000), ("w1", 41_001)]
    for job, pid in (("w0", 41_000), ("w1", 41_001)):
        [run] = lease_store.leases.claims_of(job)
        assert run.dispatched and run.child is not None and run.child["pid"] == pid
    [undispatched] = lease_store.leases.claims_of("w2")
    assert not undispatched.dispatched and undispatched.child is None, "left for the usual spawn and mark"
    started = [row for row in lease_store.events("run.started") if row["job"] != "r"]
    assert [(row["job"], row["pid"], row["attempt"]) for row in started] == [("w0", 41_000, 1), ("w1", 41_001, 1)]
    # The rest: marked by the usual write; every run then finishes fenced as any other.
    w2 = batch.claims[2]
    assert lease_store.leases.mark_dispatched(OWNER_A, [Dispatched("w2", w2.run_id, 41_002, 52.0, 6.0)], at(12))
    done = lease_store.leases.finish_many(OWNER_A, [run_end(new) for new in batch.claims], at(13))
    assert [d.fenced for d in done] == [False, False, False]
    assert [row["outcome"] for row in lease_store.events("chain.finished")] == ["success"]


def test_a_hop_with_no_child_for_its_claims_leaves_them_claimed(lease_store: Backend) -> None:
    chain_id = fan_out(lease_store)
    batch = lease_store.leases.claim_chain(chain_id, at(12), OWNER_A, lease(at(12)), start=Warm(0))
    assert len(batch.claims) == 3 and batch.dispatched == []
    assert not any(run.dispatched for job in ("w0", "w1", "w2") for run in lease_store.leases.claims_of(job))
    assert [row for row in lease_store.events("run.started") if row["job"] != "r"] == []


def test_an_end_written_with_its_flush_deferred_is_delivered_by_the_next_write_or_flush(lease_store: Backend) -> None:
    """finish_many(defer_flush=True): the end is written; its rows and record (and, on JSON,
    the directory fsync) follow the next write's commit, or flush_deferred, once."""
    chain_id = fan_out(lease_store)
    batch = lease_store.leases.claim_chain(chain_id, at(12), OWNER_A, lease(at(12)), start=Warm(3))
    w0, w1, w2 = batch.claims
    lease_store.leases.finish_many(OWNER_A, [run_end(w0)], at(13), defer_flush=True)
    assert [run.job for run in lease_store.leases.claims_of("w0")] == [], "the end is written"
    lease_store.leases.finish_many(OWNER_A, [run_end(w1)], at(14))  # a write made after it
    assert [row["job"] for row in lease_store.events("run.finished") if row["job"] != "r"] == ["w0", "w1"]
    lease_store.leases.finish_many(OWNER_A, [run_end(w2)], at(15), defer_flush=True)
    lease_store.leases.flush_deferred()
    lease_store.leases.flush_deferred()  # nothing owed twice
    assert [row["job"] for row in lease_store.events("run.finished") if row["job"] != "r"] == ["w0", "w1", "w2"]
    assert [record["job"] for record in lease_store.leases.history("w2")] == ["w2"]
    assert [row["outcome"] for row in lease_store.events("chain.finished")] == ["success"]


def test_a_claim_write_that_fails_while_adopting_leaves_no_claim(lease_store: Backend) -> None:
    chain_id = fan_out(lease_store)

    def broken(claims: list[NewClaim]) -> list[Dispatched]:
        raise OSError("the adoption failed")

    with pytest.raises(OSError):
        lease_store.leases.claim_chain(chain_id, at(12), OWNER_A, lease(at(12)), start=broken)
    assert all(lease_store.leases.claims_of(job) == [] for job in ("w0", "w1", "w2"))
    again = lease_store.leases.claim_chain(chain_id, at(13), OWNER_B, lease(at(13)))
    assert [new.job for new in again.claims] == ["w0", "w1", "w2"], "the nodes are still ready, once"


def test_a_run_dispatched_in_the_claim_write_whose_owner_died_is_reclaimed_lost(lease_store: Backend) -> None:
    chain_id = fan_out(lease_store)
    batch = lease_store.leases.claim_chain(chain_id, at(12), OWNER_A, lease(at(12)), start=Warm(1))
    w0, w1 = batch.claims[0], batch.claims[1]
    assert lease_store.leases.reclaim("w0", w0.run_id, OWNER_A, "owner_dead", at(20), 0)
    assert lease_store.leases.reclaim("w1", w1.run_id, OWNER_A, "owner_dead", at(20), 0)
    reasons = {row["job"]: row["run_reason"] for row in lease_store.events("claim.reclaimed")}
    assert reasons == {"w0": "executor_lost_mid_run", "w1": "run_claimed_without_dispatch"}, \
        "today's rules: its identity was persisted before its gate could open"
