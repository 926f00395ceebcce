"""Chain triggers through `LeaseStore` (SPEC §10), against every backend.

The trigger of a dependant is part of its upstream's finish write, and a ready
dependant is claimed in a claim write like a due slot: once per (job, chain), fenced,
whoever asks. Nothing sleeps and nothing forks.
"""

from __future__ import annotations

from cronctl.models import AuditEvent, RunStatus, Trigger
from cronctl.store.claims import NewClaim, Outcome, Owner
from cronctl.store.leases import RunEnd
from tests.contract.conftest import Backend
from tests.contract.test_lease_store import MINUTE, OWNER_A, OWNER_B, at, child, lease, start_one, success

FAILED = Outcome(RunStatus.ERROR, "exit_code", exit_code=3, duration=1.0)


def diamond(backend: Backend, d_requires: str = "success") -> None:
    backend.define("a", every="1m")
    backend.define("b", after=["a"])
    backend.define("c", after=["a"])
    backend.define("d", after=["b", "c"], requires=d_requires)


def end(backend: Backend, new: NewClaim, outcome: Outcome, seconds: float) -> None:
    backend.leases.finish_many(OWNER_A, [RunEnd(new.run_id, outcome, new.job)], at(seconds))


def claim_chain(backend: Backend, seconds: float, owner: Owner = OWNER_A) -> dict[str, NewClaim]:
    batch = backend.leases.claim_due(at(seconds), owner, lease(at(seconds)))
    backend.leases.mark_dispatched(owner, [child(new) for new in batch.claims], at(seconds))
    return {new.job: new for new in batch.claims}


def test_the_finish_write_triggers_the_dependants_and_they_are_claimed_once(lease_store: Backend) -> None:
    diamond(lease_store)
    root = start_one(lease_store, at(MINUTE))
    end(lease_store, root, success(), MINUTE + 1)
    [triggered_b, triggered_c] = lease_store.events(AuditEvent.CHAIN_TRIGGERED)
    assert {triggered_b["job"], triggered_c["job"]} == {"b", "c"}
    assert triggered_b["chain"] == root.run_id and triggered_b["upstream"] == [root.run_id]
    ready = claim_chain(lease_store, MINUTE + 1)
    assert sorted(ready) == ["b", "c"] and {new.trigger for new in ready.values()} == {Trigger.CHAIN.value}
    assert ready["b"].spec.env["CRONCTL_CHAIN_ID"] == root.run_id
    assert claim_chain(lease_store, MINUTE + 2, OWNER_B) == {}, "once per (job, chain), whoever asks"
    end(lease_store, ready["b"], success(), MINUTE + 3)
    end(lease_store, ready["c"], success(), MINUTE + 3)
    last = claim_chain(lease_store, MINUTE + 3)
    assert list(last) == ["d"]
    end(lease_store, last["d"], success(), MINUTE + 4)
    [done] = lease_store.events(AuditEvent.CHAIN_FINISHED)
    assert (done["chain"], done["outcome"]) == (root.run_id, "success")
    assert {r["job"]: r["chain"] for r in lease_store.leases.history(None)} == dict.fromkeys("abcd", root.run_id)


def test_an_unsatisfied_requires_skips_with_upstream_failed(lease_store: Backend) -> None:
    diamond(lease_store)
    end(lease_store, start_one(lease_store, at(MINUTE)), success(), MINUTE + 1)
    ready = claim_chain(lease_store, MINUTE + 1)
    end(lease_store, ready["b"], FAILED, MINUTE + 2)
    end(lease_store, ready["c"], success(), MINUTE + 2)
    assert claim_chain(lease_store, MINUTE + 3) == {}
    [skip] = [row for row in lease_store.events(AuditEvent.RUN_SKIPPED) if row["job"] == "d"]
    assert (skip["reason"], skip["upstream"], skip["upstream_status"]) == ("upstream_failed", "b", "error")


def test_an_upstream_reclaimed_lost_resolves_its_dependants_per_requires(lease_store: Backend) -> None:
    lease_store.define("a", every="1m")
    lease_store.define("strict", after=["a"])
    lease_store.define("lenient", after=["a"], requires="done")
    root = start_one(lease_store, at(MINUTE))
    assert lease_store.leases.reclaim("a", root.run_id, OWNER_A, "owner_dead", at(MINUTE + 30), 0)
    assert list(claim_chain(lease_store, MINUTE + 31)) == ["lenient"]
    assert [row["job"] for row in lease_store.events(AuditEvent.RUN_SKIPPED)] == ["strict"]


def test_a_fenced_finish_triggers_nothing(lease_store: Backend) -> None:
    diamond(lease_store)
    root = start_one(lease_store, at(MINUTE))
    [fenced] = lease_store.leases.finish_many(OWNER_B, [RunEnd(root.run_id, success(), "a")], at(MINUTE + 1))
    assert fenced.fenced
    assert lease_store.events(AuditEvent.CHAIN_TRIGGERED) == []
    assert claim_chain(lease_store, MINUTE + 2) == {}


def test_force_chain_records_a_chain_the_next_claim_write_starts(lease_store: Backend) -> None:
    diamond(lease_store)
    chain_id, jobs = lease_store.leases.force_chain("b", at(MINUTE))
    assert sorted(jobs) == ["b", "d"]
    started = claim_chain(lease_store, MINUTE)  # a's own slot is due too: it is claimed beside
    assert "d" not in started and started["b"].spec.env["CRONCTL_CHAIN_ID"] == chain_id
    end(lease_store, started["b"], success(), MINUTE + 1)
    assert list(claim_chain(lease_store, MINUTE + 1)) == ["d"], "d's only upstream in this chain is b"


def test_upstream_failed_cascades_and_requires_done_runs_after_a_failure(lease_store: Backend) -> None:
    lease_store.define("a", every="1m")
    lease_store.define("b", after=["a"])
    lease_store.define("c", after=["b"])
    lease_store.define("lenient", after=["a"], requires="done")
    root = start_one(lease_store, at(MINUTE))
    end(lease_store, root, FAILED, MINUTE + 1)
    skips = {row["job"]: row for row in lease_store.events(AuditEvent.RUN_SKIPPED)}
    assert (skips["b"]["reason"], skips["b"]["upstream"], skips["b"]["upstream_status"]) == \
        ("upstream_failed", "a", "error")
    assert (skips["c"]["reason"], skips["c"]["upstream"], skips["c"]["upstream_status"]) == \
        ("upstream_failed", "b", "skipped"), "the skip cascades down the chain"
    assert lease_store.events(AuditEvent.CHAIN_FINISHED) == [], "lenient is still to run"
    ready = claim_chain(lease_store, MINUTE + 2)
    assert list(ready) == ["lenient"]
    end(lease_store, ready["lenient"], success(), MINUTE + 3)
    [done] = lease_store.events(AuditEvent.CHAIN_FINISHED)
    assert (done["chain"], done["outcome"]) == (root.run_id, "failed")
    records = {r["job"]: r for r in lease_store.leases.history(None)}
    assert {job: (r["status"], r["chain"]) for job, r in records.items()} == {
        "a": ("error", root.run_id), "b": ("skipped", root.run_id), "c": ("skipped", root.run_id),
        "lenient": ("success", root.run_id)}
    assert lease_store.leases.job("c").state["last_status"] == "skipped"


def test_the_trigger_is_durable_with_the_finish_even_if_its_writer_dies_right_after(lease_store: Backend) -> None:
    diamond(lease_store)
    root = start_one(lease_store, at(MINUTE))
    with lease_store.crash_after_commit():
        end(lease_store, root, success(), MINUTE + 1)
    ready = claim_chain(lease_store, MINUTE + 2, OWNER_B)  # another loop, after the writer died
    assert sorted(ready) == ["b", "c"] and {new.spec.env["CRONCTL_CHAIN_ID"] for new in ready.values()} == {root.run_id}
    assert claim_chain(lease_store, MINUTE + 3) == {}
