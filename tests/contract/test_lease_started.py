"""A run's run.started row is written by the lease store, in the unit of work that marks it
dispatched (as its run.finished row is written by the one that records its end), on every
backend: one row per child whose gate may open, none for a claim this owner lost."""

from __future__ import annotations

from cronctl.models import AuditEvent
from cronctl.timefmt import to_iso
from tests.contract.conftest import Backend
from tests.contract.test_lease_store import MINUTE, OWNER_A, OWNER_B, at, child, claim_one


def test_marking_a_run_dispatched_writes_its_started_row(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = claim_one(lease_store, at(MINUTE))
    assert lease_store.events(AuditEvent.RUN_STARTED) == []

    lease_store.leases.mark_dispatched(OWNER_A, [child(new, pid=4321)], at(MINUTE))

    [row] = lease_store.events(AuditEvent.RUN_STARTED)
    assert {key: row.get(key) for key in ("job", "run_id", "slot", "pid", "attempt")} == {
        "job": "tick", "run_id": new.run_id, "slot": to_iso(at(MINUTE)), "pid": 4321, "attempt": 1}
    assert "held" not in row  # a run claimed ahead says so in its own row, after its instant


def test_a_run_whose_claim_is_not_ours_gets_no_started_row(lease_store: Backend) -> None:
    lease_store.define("tick", every="1m")
    new = claim_one(lease_store, at(MINUTE), OWNER_A)
    assert lease_store.leases.mark_dispatched(OWNER_B, [child(new)], at(MINUTE)) == []
    assert lease_store.events(AuditEvent.RUN_STARTED) == []
