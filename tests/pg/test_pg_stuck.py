"""Sessions whose client is gone mid-protocol (store/pg/stuck.py): PostgreSQL times nothing
between the messages of a pipeline, so a network that stalls there leaves the session holding
its row locks; the loops end it once its transaction outlived a lease plus margin.

The stuck session is made for real: a transaction locks a job row, then psycopg's executemany
(a pipeline) goes out through a proxy that forwards it and stalls (tests/pg/stallproxy.py).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from cronctl.store.pg.connect import Connection, connect, parse_store_url
from cronctl.store.pg.deadline import StoreDeadlineError
from cronctl.store.pg.loops import LoopIdentity
from cronctl.store.pg.stuck import end_stuck_sessions
from tests.helpers.loophelp import stop, wait_until
from tests.pg.clusterhelp import one, rows, seed, start_host_loop
from tests.pg.stallproxy import stall_proxy

pytestmark = pytest.mark.slow

ME = LoopIdentity(uuid.uuid4(), "host-b", "boot-b", os.getpid(), 0.0)


def _add_job(store_url: str, name: str) -> None:
    with psycopg.connect(store_url, autocommit=True) as conn:
        conn.execute("INSERT INTO cronctl_jobs (name, spec, overlap) VALUES (%s, '{}', 'skip')", (name,))


@contextmanager
def _stuck_session(store_url: str, job: str, application_name: str | None = None) -> Iterator[int]:
    """A session that locked `job`'s row and then sent a pipeline that reached the server,
    after which nothing more did: its backend pid. Its client gives up at its deadline (a
    plain psycopg one, without deadlines, when the proxy closes)."""
    worker = None
    with stall_proxy(store_url) as (proxy, via):
        conn: Connection = connect(parse_store_url(via), deadline_s=2.0) if application_name is None else \
            psycopg.connect(via, application_name=application_name)  # type: ignore[assignment]
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        conn.commit()

        def lock_then_pipeline() -> None:
            try:
                conn.execute("SELECT name FROM cronctl_jobs WHERE name = %s FOR UPDATE", (job,))
                proxy.stall_after(b"UPDATE cronctl_jobs")
                with conn.cursor() as cur:
                    cur.executemany("UPDATE cronctl_jobs SET paused = %s WHERE name = %s", [(True, job), (False, job)])
            except (StoreDeadlineError, psycopg.Error):
                pass  # its client gave up (or the proxy closed under it): the session stays on the server

        worker = threading.Thread(target=lock_then_pipeline, daemon=True)
        worker.start()
        wait_until(lambda: proxy.stalls == 1, timeout=10, interval=0.01)
        wait_until(lambda: one(store_url, "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", pid)
                   == "ClientRead", timeout=10, interval=0.05)
        yield pid
    worker.join(timeout=10)
    conn.close()


def _can_lock(store_url: str, job: str) -> bool:
    with psycopg.connect(store_url) as conn:
        conn.execute("SET lock_timeout = '1s'")
        try:
            conn.execute("SELECT 1 FROM cronctl_jobs WHERE name = %s FOR UPDATE", (job,))
            return True
        except psycopg.errors.LockNotAvailable:
            return False


def test_a_session_stuck_mid_pipeline_keeps_its_lock_until_a_loop_ends_it(store_url: str) -> None:
    _add_job(store_url, "j")
    with connect(parse_store_url(store_url)) as healer, _stuck_session(store_url, "j") as pid:
        time.sleep(6.0)  # past the client's deadline and past the 5 s idle timeout a lease transaction has
        assert one(store_url, "SELECT state FROM pg_stat_activity WHERE pid = %s", pid) is not None
        assert not _can_lock(store_url, "j")  # nothing of PostgreSQL's ended it
        assert end_stuck_sessions(healer, ME, after_s=60.0) == []  # younger than the lease plus margin
        ended = end_stuck_sessions(healer, ME, after_s=3.0, quiet_s=1.0)
        assert [session.pid for session in ended] == [pid]
        assert ended[0].application_name.startswith("cronctl pid ")
        assert "UPDATE cronctl_jobs" in ended[0].query
        wait_until(lambda: _can_lock(store_url, "j"), timeout=10)  # rolled back: the row is free
    audit = rows(store_url, "SELECT reason, host_id, details FROM cronctl_audit WHERE event = 'cluster.session_ended'")
    assert len(audit) == 1
    reason, host, details = audit[0]
    assert (reason, host, details["session_pid"], details["after_s"]) == ("client_gone", "host-b", pid, 3.0)
    assert one(store_url, "SELECT paused FROM cronctl_jobs WHERE name = 'j'") is False  # nothing of it committed


def test_only_cronctl_sessions_stuck_in_a_transaction_are_ended(store_url: str) -> None:
    _add_job(store_url, "j")
    _add_job(store_url, "k")
    with psycopg.connect(store_url, application_name="cronctl pid 1") as idle, \
            psycopg.connect(store_url, application_name="cronctl pid 2") as reading, \
            connect(parse_store_url(store_url)) as healer, \
            _stuck_session(store_url, "j", application_name="someone else") as other:
        idle.execute("SELECT 1")
        idle.commit()  # idle, no transaction
        reading.execute("SELECT count(*) FROM cronctl_jobs")  # idle in a transaction without a transaction id
        time.sleep(2.5)
        assert end_stuck_sessions(healer, ME, after_s=1.0, quiet_s=1.0) == []
        assert one(store_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", other) == 1
        with psycopg.connect(store_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (other,))
    assert one(store_url, "SELECT count(*) FROM cronctl_audit WHERE event = 'cluster.session_ended'") == 0


ONE_JOB = """
jobs:
  - name: held
    every: 2s
    kill_grace: 1s
    command: "echo $CRONCTL_RUN_ID >> {ledger}"
"""


@pytest.mark.timeout(240)
def test_a_job_whose_row_a_gone_client_holds_fires_once_a_loop_ended_that_session(
        tmp_path: Path, store_url: str) -> None:
    """The loops claim with SKIP LOCKED: a job row held by a stuck session would never fire on
    any host, silently. The healer ends that session after the lease plus margin (9 + 5 s)."""
    ledger = tmp_path / "ledger"
    seed(store_url, tmp_path, ONE_JOB.format(ledger=ledger))
    with _stuck_session(store_url, "held") as pid:
        held_at = time.monotonic()
        loop = start_host_loop(tmp_path / "b", store_url, "host-b", "--lease", "9s")
        try:
            wait_until(lambda: ledger.exists(), timeout=90)
            fired_after = time.monotonic() - held_at
            audit = rows(store_url, "SELECT host_id, details FROM cronctl_audit WHERE event = 'cluster.session_ended'")
        finally:
            code = stop(loop)
    assert code == 0
    assert [(host, details["session_pid"]) for host, details in audit] == [("host-b", pid)]
    assert audit[0][1]["transaction_s"] >= 9.0 + 5.0  # not before its transaction outlived the lease plus margin
    assert fired_after < 9.0 + 5.0 + 30.0  # the healer's sweep (10 s) after that, on a busy machine
    assert "ended PostgreSQL session" in (tmp_path / "b" / "loop.log").read_text()


def test_the_store_sends_no_pipeline() -> None:
    """psycopg's executemany is a pipeline: PostgreSQL times nothing between its messages (a stall
    there kept job rows locked), and one cut short by a terminated backend left the connection in
    pipeline mode and not broken, so a loop never reconnected (issue 20). Arrays in one statement
    do the same work in one round trip (store/pg/document.py, store/pg/audit.py)."""
    package = Path(__file__).resolve().parents[2] / "cronctl"
    found = [f"{path.relative_to(package)}:{number}" for path in package.rglob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if (".executemany(" in line or ".pipeline(" in line) and not line.lstrip().startswith("#")]
    assert found == []
