"""`LeaseStore.suspects`, on every backend: the jobs the healer looks at (a run in flight, or
a failed last run), their claims typed as the healer judges them; every other job left out."""

from __future__ import annotations

from cronctl.models import RunStatus
from cronctl.store.claims import Outcome
from cronctl.store.leases import RunEnd
from cronctl.store.suspects import Suspect
from tests.contract.conftest import Backend
from tests.contract.test_lease_store import MINUTE, OWNER_A, at, child, claim_one, lease, start_one, success


def by_job(found: list[Suspect]) -> dict[str, Suspect]:
    return {suspect.job: suspect for suspect in found}


def test_a_job_with_nothing_in_flight_and_no_failure_is_no_suspect(lease_store: Backend) -> None:
    lease_store.define("quiet", every="1m")
    assert lease_store.leases.suspects() == []


def test_a_running_job_is_a_suspect_with_its_claim_typed(lease_store: Backend) -> None:
    lease_store.define("quiet", every="1h")
    lease_store.define("busy", every="1m", timeout="30s", kill_grace="7s")
    new = start_one(lease_store, at(MINUTE))

    [suspect] = lease_store.leases.suspects()
    assert suspect.job == "busy" and suspect.view.spec.timeout == 30.0
    [claim] = suspect.claims
    assert (claim.job, claim.run_id, claim.owner, claim.dispatched) == ("busy", new.run_id, OWNER_A, True)
    assert claim.child is not None and claim.child["pid"] == child(new).pid
    assert (claim.timeout, claim.kill_grace, claim.started_mono) == (30.0, 7.0, child(new).started_mono)
    assert claim.boot_id == OWNER_A.boot_id and claim.lease_until_mono == lease(at(MINUTE)).until_mono
    assert claim.owner_dict["pid"] == OWNER_A.pid and claim.lease_fields["boot_id"] == OWNER_A.boot_id


def test_a_claim_not_yet_dispatched_is_a_suspect_too(lease_store: Backend) -> None:
    lease_store.define("busy", every="1m")
    new = claim_one(lease_store, at(MINUTE))
    [claim] = by_job(lease_store.leases.suspects())["busy"].claims
    assert (claim.run_id, claim.dispatched, claim.child, claim.started_mono) == (new.run_id, False, None, None)


def test_a_failed_last_run_stays_a_suspect_and_a_success_clears_it(lease_store: Backend) -> None:
    lease_store.define("flaky", every="1m")
    failed = start_one(lease_store, at(MINUTE))
    error = Outcome(RunStatus.ERROR, "exit_code", exit_code=3, duration=1.0)
    lease_store.leases.finish_many(OWNER_A, [RunEnd(failed.run_id, error, "flaky")], at(MINUTE + 2))

    [suspect] = lease_store.leases.suspects()
    assert (suspect.job, suspect.claims, suspect.view.state["last_status"]) == ("flaky", (), "error")

    passed = start_one(lease_store, at(2 * MINUTE))
    lease_store.leases.finish_many(OWNER_A, [RunEnd(passed.run_id, success(), "flaky")], at(2 * MINUTE + 2))
    assert lease_store.leases.suspects() == []
