"""Kill and force-run requests: left by a CLI anywhere, served once, by the right loop."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from cronctl.clock import FakeClock
from cronctl.errors import ConflictError, JobNotFoundError
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec
from cronctl.store.claims import Lease, NewClaim, Owner
from cronctl.store.pg import requests
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_entry
from cronctl.store.pg.leases import PgLeaseStore
from tests.pg.pghelp import db_now, one

OWNER = Owner("gen-a", 1001, 111.0, "boot-1")


def claimed_on(conn: Connection, host: str) -> NewClaim:
    """A job due now, claimed by a loop on `host`."""
    now = db_now(conn)
    spec = JobSpec(name="tick", command="true", every=3600.0)
    with conn.transaction():
        put_entry(conn, entry_from(spec, new_state(now, now - timedelta(seconds=1))))
    clock = FakeClock(now)
    leases = PgLeaseStore(conn, host, clock=clock)
    [new] = leases.claim_due(now, OWNER, Lease(1.0, now + timedelta(seconds=60))).claims
    return new


def test_a_kill_is_served_once_by_a_loop_on_the_runs_host(connections: Callable[[], Connection]) -> None:
    cli, loop_a, loop_b = connections(), connections(), connections()
    new = claimed_on(loop_a, "host-a")
    asked = requests.request_kill(cli, "tick", new.run_id, "operator@laptop")
    assert requests.request_kill(cli, "tick", new.run_id, "operator@laptop") == asked  # still open: the same
    assert one(cli, "SELECT kill_requested FROM cronctl_runs WHERE run_id = %s", new.run_id) is True

    assert requests.take(loop_b, "host-b") == []  # its pid means nothing on host-b
    [taken] = requests.take(loop_a, "host-a")
    assert (taken.id, taken.kind, taken.job, taken.run_id) == (asked, requests.KILL, "tick", new.run_id)
    assert requests.take(loop_a, "host-a") == []
    assert requests.outcome_of(cli, asked) == (True, None)
    requests.answer(loop_a, asked, "killed")
    assert requests.outcome_of(cli, asked) == (True, "killed")


def test_a_force_run_is_taken_by_whichever_loop_asks_first(connections: Callable[[], Connection]) -> None:
    cli, loop_a, loop_b = connections(), connections(), connections()
    claimed_on(loop_a, "host-a")
    first = requests.request_force(cli, "tick", "operator")
    second = requests.request_force(cli, "tick", "operator")  # two asks, two runs
    assert [r.id for r in requests.take(loop_b, "host-b", limit=1)] == [first]
    assert [r.id for r in requests.take(loop_a, "host-a")] == [second]
    assert one(cli, "SELECT count(*) FROM cronctl_audit WHERE event = 'force_run.requested'") == 2


def test_requests_name_what_is_wrong(conn: Connection) -> None:
    with pytest.raises(JobNotFoundError, match="no job named 'nope'"):
        requests.request_force(conn, "nope", "operator")
    new = claimed_on(conn, "host-a")
    with pytest.raises(ConflictError, match=f"job 'tick' has no run {new.run_id}-x in flight"):
        requests.request_kill(conn, "tick", new.run_id + "-x", "operator")
