"""`PgDocStore`: the JSON store's document API over the rows, read-only (store/pg/docstore.py); the
definitions written beside it by `PgDefinitions` (store/pg/definitions.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import SystemClock
from cronctl.errors import StoreError
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec, RunStatus
from cronctl.paths import open_home
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.leases import RunEnd
from cronctl.store.pg.auditlog import PgAuditLog
from cronctl.store.pg.connect import Connection, parse_store_url
from cronctl.store.pg.definitions import PgDefinitions
from cronctl.store.pg.docstore import PgDocStore, add_up
from cronctl.store.pg.leases import PgLeaseStore
from cronctl.store.pg.session import PgSession
from tests.pg.pghelp import one

NOW = datetime(2026, 3, 1, 12, tzinfo=timezone.utc)
REMOTE = Owner("gen-remote", 4242, 1.0, "a-boot-of-another-host")


@pytest.fixture
def docstore(store_url: str, tmp_path: Path) -> PgDocStore:
    return PgDocStore(open_home(tmp_path / "home"), PgSession(parse_store_url(store_url)), "host-a")


def definitions(store: PgDocStore) -> PgDefinitions:
    """The definitions of the same session: what writes the jobs the document shows."""
    assert isinstance(store.session, PgSession)
    return PgDefinitions(store.session, PgAuditLog(store.session, store._paths.audit, SystemClock()))


def add(store: PgDocStore, name: str, **fields: Any) -> None:
    spec = JobSpec(name=name, command="true", **{"every": 3600.0, **fields})
    with definitions(store).editing([name]) as edit:
        edit.add(entry_from(spec, new_state(NOW, NOW + timedelta(hours=1))))


def remove(store: PgDocStore, name: str) -> None:
    with definitions(store).editing([name]) as edit:
        edit.remove(name)


def rows(conn: Connection) -> list[tuple[Any, ...]]:
    with conn.transaction():
        return conn.execute("SELECT name, spec, state, spec_version, updated_at FROM cronctl_jobs"
                            " ORDER BY name").fetchall()


def test_a_document_reads_back_as_written_in_the_json_stores_shape(docstore: PgDocStore) -> None:
    add(docstore, "tick")
    doc = docstore.read()
    assert sorted(doc) == ["chains", "counters", "jobs", "metrics", "rev", "version"]
    assert (doc["version"], doc["chains"], doc["counters"]) == (1, {}, {})
    expected = entry_from(JobSpec(name="tick", command="true", every=3600.0), new_state(NOW, NOW + timedelta(hours=1)))
    assert doc["jobs"] == {"tick": expected}


def test_a_live_run_is_a_claim_of_its_job(docstore: PgDocStore, conn: Connection) -> None:
    add(docstore, "tick")
    leases = PgLeaseStore(conn, "host-b", clock=SystemClock())
    [run] = leases.claim_force("tick", leases.db_now(), REMOTE, Lease(0.0, NOW)).claims
    assert list(docstore.read()["jobs"]["tick"]["state"]["claims"]) == [run.run_id]


def test_a_spec_change_bumps_the_version_a_state_change_does_not(docstore: PgDocStore, conn: Connection) -> None:
    add(docstore, "tick")
    with definitions(docstore).editing(["tick"]) as edit:
        entry = edit.entries["tick"]
        entry["state"]["paused"] = True
        edit.replace("tick", entry)
    with definitions(docstore).editing(["tick"]) as edit:
        edit.replace("tick", {**edit.entries["tick"], "every": "2h"})
    assert one(conn, "SELECT spec_version FROM cronctl_jobs") == 2
    assert one(conn, "SELECT paused FROM cronctl_jobs") is True


def test_removing_a_job_with_a_live_run_ends_the_run(docstore: PgDocStore, conn: Connection) -> None:
    add(docstore, "tick")
    leases = PgLeaseStore(conn, "host-b", clock=SystemClock())
    [run] = leases.claim_force("tick", leases.db_now(), REMOTE, Lease(0.0, NOW)).claims
    remove(docstore, "tick")
    assert one(conn, "SELECT state || ' ' || reason FROM cronctl_runs WHERE run_id = %s", run.run_id) == \
        "killed removed"
    add(docstore, "tick")  # the name again: none of the old runs is its claim
    assert docstore.read()["jobs"]["tick"]["state"]["claims"] == {}


def test_counters_are_every_hosts_added_up(docstore: PgDocStore, conn: Connection) -> None:
    with conn.transaction():
        conn.execute("""INSERT INTO cronctl_meta (key, value) VALUES ('counters@host-b', '{"takeover": 2}'),
                        ('counters@host-a', '{"takeover": 1, "owner_dead": 1}'),
                        ('metrics@host-b', '{"fire_lateness_seconds": {"buckets": {"0.1": 1}, "sum": 0.05,
                         "count": 1}}')""")
    assert docstore.read()["counters"] == {"takeover": 3, "owner_dead": 1}
    assert docstore.read()["metrics"]["fire_lateness_seconds"]["count"] == 1


def test_nothing_is_written_through_the_document(docstore: PgDocStore, conn: Connection) -> None:
    add(docstore, "tick")
    with pytest.raises(StoreError, match="not written as a document: definitions go through ctx.definitions"), \
            docstore.transaction() as doc:
        doc["jobs"]["tick"]["state"]["paused"] = True
    assert one(conn, "SELECT paused FROM cronctl_jobs") is False
    assert not (docstore._paths.store).exists()


def test_adding_up_nested_numbers() -> None:
    assert add_up({"a": 1, "h": {"b": {"x": 1}, "sum": 0.5}}, {"a": 2, "h": {"b": {"x": 1, "y": 2}, "sum": 1.0}}) \
        == {"a": 3, "h": {"b": {"x": 2, "y": 2}, "sum": 1.5}}


def test_read_if_changed_answers_unchanged_with_one_query_and_sees_every_writer(docstore: PgDocStore,
                                                                                conn: Connection) -> None:
    add(docstore, "tick")
    doc, signature = docstore.read_if_changed(None)
    assert doc is not None and list(doc["jobs"]) == ["tick"]
    statements: list[str] = []
    real_conn = docstore.session.conn()
    real_conn.add_notice_handler(lambda _: None)
    original = real_conn.execute

    def counting(query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return original(query, *args, **kwargs)

    real_conn.execute = counting  # type: ignore[method-assign]
    again, same = docstore.read_if_changed(signature)
    assert again is None and same == signature
    assert len([s for s in statements if not s.startswith("SET TRANSACTION")]) == 1
    real_conn.execute = original  # type: ignore[method-assign]

    leases = PgLeaseStore(conn, "host-b", clock=SystemClock())  # another process: a claim, then its end
    [run] = leases.claim_force("tick", leases.db_now(), REMOTE, Lease(0.0, NOW)).claims
    claimed, signature = docstore.read_if_changed(signature)
    assert claimed is not None and list(claimed["jobs"]["tick"]["state"]["claims"]) == [run.run_id]
    leases.mark_dispatched(REMOTE, [Dispatched("tick", run.run_id, 4242, 1.0, 0.0)], leases.db_now())
    ended_ok = RunEnd(run.run_id, Outcome(RunStatus.SUCCESS, None, exit_code=0), "tick")
    leases.finish_many(REMOTE, [ended_ok], leases.db_now())
    ended, signature = docstore.read_if_changed(signature)
    assert ended is not None and ended["jobs"]["tick"]["state"]["claims"] == {}
    remove(docstore, "tick")
    gone, _ = docstore.read_if_changed(signature)
    assert gone is not None and gone["jobs"] == {}


def test_a_definitions_transaction_and_a_loops_lease_operation_wait_for_each_other_without_deadlock(
        docstore: PgDocStore, connections: Callable[[], Connection]) -> None:
    for name in ("a", "b", "c"):
        add(docstore, name)
    leases = PgLeaseStore(connections(), "host-b", clock=SystemClock())
    claimed: list[str] = []
    inside = threading.Event()

    def loop_claims() -> None:
        inside.wait(10)
        batch = leases.claim_force("c", leases.db_now(), REMOTE, Lease(0.0, NOW))
        claimed.extend(run.run_id for run in batch.claims)

    loop = threading.Thread(target=loop_claims)
    loop.start()
    with definitions(docstore).editing(["a", "c"]) as edit:
        inside.set()
        time.sleep(0.5)  # the loop's claim waits on the row this transaction holds
        assert claimed == []
        entry = edit.entries["a"]
        entry["state"]["paused"] = True
        edit.replace("a", entry)
    loop.join(20)
    assert len(claimed) == 1
    assert docstore.read()["jobs"]["a"]["state"]["paused"] is True


