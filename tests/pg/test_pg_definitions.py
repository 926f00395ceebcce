"""`PgDefinitions` (store/pg/definitions.py): a definitions write locks only the rows it names,
and its audit rows commit in its transaction."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.context import Context
from cronctl.errors import ConfigError, ConflictError
from cronctl.ops import definitions as ops
from cronctl.store.pg import definitions as pg_definitions
from cronctl.store.pg.audit import dumps, json_text
from cronctl.store.pg.backend import PgBackend
from cronctl.store.pg.connect import Connection, parse_store_url
from tests.pg.pghelp import one

JOBS = 40


@pytest.fixture
def ctx(store_url: str, tmp_path: Path) -> Context:
    context = Context.open(tmp_path / "home", store_url=parse_store_url(store_url))
    for index in range(JOBS):
        ops.add_job(context, ops.spec_from_options(f"job{index:02d}", {"every": "1h", "command": "true"}))
    return context


def held_locks(conn: Connection, pid: int) -> list[tuple[Any, ...]]:
    with conn.transaction():
        return conn.execute(
            """SELECT l.locktype, coalesce(c.relname, ''), l.mode, l.granted FROM pg_locks AS l
                 LEFT JOIN pg_class AS c ON c.oid = l.relation
                WHERE l.pid = %s AND l.locktype IN ('relation', 'tuple', 'advisory')
                ORDER BY 1, 2, 3""", (pid,)).fetchall()


def unlocked_rows(conn: Connection) -> list[str]:
    with conn.transaction():
        return [row[0] for row in conn.execute("SELECT name FROM cronctl_jobs ORDER BY name FOR UPDATE SKIP LOCKED")]


@pytest.mark.parametrize("change", ["edit", "pause", "remove"])
def test_changing_one_job_locks_its_row_alone(ctx: Context, conn: Connection, change: str) -> None:
    assert isinstance(ctx.backend, PgBackend)
    pid = ctx.backend.session.conn().info.backend_pid
    seen: dict[str, Any] = {}
    bodies: dict[str, Callable[[], Any]] = {
        "edit": lambda: ops.edit_job(ctx, "job07", {"every": "2h"}, []),
        "pause": lambda: ops.pause_job(ctx, "job07"),
        "remove": lambda: ops.remove_job(ctx, "job07"),
    }
    original = pg_definitions.PgEdit.write

    def write_and_look(edit: Any, shown: str) -> None:
        seen["unlocked"] = unlocked_rows(conn)  # another session, while this transaction holds its locks
        seen["locks"] = held_locks(conn, pid)
        original(edit, shown)

    pg_definitions.PgEdit.write = write_and_look  # type: ignore[method-assign]
    try:
        bodies[change]()
    finally:
        pg_definitions.PgEdit.write = original  # type: ignore[method-assign]
    names = [f"job{index:02d}" for index in range(JOBS)]
    assert seen["unlocked"] == [name for name in names if name != "job07"]
    # No table lock beyond what a row lock takes (RowShare for FOR UPDATE), the definitions
    # lock shared (an import takes it exclusive), no row of another job.
    relation_modes = {mode for kind, _, mode, _ in seen["locks"] if kind == "relation"}
    assert relation_modes <= {"AccessShareLock", "RowShareLock"}, seen["locks"]
    assert [(kind, mode) for kind, _, mode, _ in seen["locks"] if kind == "advisory"] == [("advisory", "ShareLock")]


def test_a_writer_waiting_for_the_row_shows_in_pg_locks_and_others_pass(ctx: Context, conn: Connection,
                                                                         connections: Callable[[], Connection]) -> None:
    other = connections()
    with ctx.definitions.editing(["job03"]) as edit:
        entry = dict(edit.entries["job03"])
        edit.replace("job03", entry)
        assert isinstance(ctx.backend, PgBackend)
        holder = ctx.backend.session.conn().info.backend_pid
        with conn.transaction():  # another job's row: no wait
            conn.execute("SELECT 1 FROM cronctl_jobs WHERE name = 'job04' FOR UPDATE NOWAIT")
        waiter = threading.Thread(target=lambda: _lock_row(other, "job03"))
        waiter.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with conn.transaction():
                blocked = conn.execute("SELECT pg_blocking_pids(%s)", (other.info.backend_pid,)).fetchone()
            if blocked and blocked[0]:
                break
            time.sleep(0.02)
        assert blocked is not None and blocked[0] == [holder]
    waiter.join(30)
    assert not waiter.is_alive()


def _lock_row(conn: Connection, name: str) -> None:
    with conn.transaction():
        conn.execute("SELECT 1 FROM cronctl_jobs WHERE name = %s FOR UPDATE", (name,))


def test_the_audit_row_is_written_in_the_transaction_of_the_change(ctx: Context, conn: Connection) -> None:
    ops.edit_job(ctx, "job05", {"every": "3h"}, [])
    with conn.transaction():
        job_xmin = one(conn, "SELECT xmin::text FROM cronctl_jobs WHERE name = 'job05'")
        audit_xmin = one(conn, "SELECT xmin::text FROM cronctl_audit WHERE job = 'job05' AND event = 'job.updated'")
    assert job_xmin == audit_xmin


def test_a_refused_change_leaves_no_row_and_no_audit_row(ctx: Context, conn: Connection) -> None:
    with pytest.raises(ConfigError, match="unknown upstream job"):
        ops.add_job(ctx, ops.spec_from_options("chained", {"after": ["nope"], "command": "true"}))
    with conn.transaction():
        assert one(conn, "SELECT count(*) FROM cronctl_jobs WHERE name = 'chained'") == 0
        assert one(conn, "SELECT count(*) FROM cronctl_audit WHERE job = 'chained'") == 0


def test_a_job_after_another_is_stored_and_its_chain_rules_hold(ctx: Context, conn: Connection) -> None:
    ops.add_job(ctx, ops.spec_from_options("chained", {"after": ["job01"], "command": "true"}))
    with conn.transaction():
        assert one(conn, "SELECT spec->'after' FROM cronctl_jobs WHERE name = 'chained'") == ["job01"]
    with pytest.raises(ConfigError, match="cycle"):
        ops.edit_job(ctx, "job01", {"after": ["chained"]}, [])


def test_apply_prunes_the_jobs_its_file_defined_found_by_source(ctx: Context, tmp_path: Path) -> None:
    first = tmp_path / "jobs.yaml"
    first.write_text("jobs:\n  - {name: f1, every: 1h, command: 'true'}\n  - {name: f2, every: 1h, command: 'true'}\n")
    assert ops.apply_file(ctx, str(first)).create == ["f1", "f2"]
    first.write_text("jobs:\n  - {name: f1, every: 2h, command: 'true'}\n")
    plan = ops.apply_file(ctx, str(first), prune=True)
    assert (plan.update, plan.prune) == ({"f1": ["every"]}, ["f2"])
    assert "f2" not in ctx.definitions.names() and len(ctx.definitions.names()) == JOBS + 1


@pytest.mark.parametrize("value", [
    {"job": "a", "fields": ["every", "at"], "n": 3, "x": 0.1, "ok": True, "none": None, "env": {"K": "v é"}},
    {"next_run_at": datetime(2026, 3, 1, 12, tzinfo=timezone.utc), "job": "a"},  # an instant: as dumps writes it
    {"nested": [{"when": datetime(2026, 3, 1, tzinfo=timezone.utc)}]},
    {"tail": "a\x00b", "tuple": ("x", 1)},  # NUL becomes U+FFFD; a tuple is a list
])
def test_json_text_is_the_value_dumps_writes(value: dict[str, Any]) -> None:
    assert json.loads(json_text(value)) == json.loads(dumps(value))


def test_a_new_job_reads_back_exactly_whatever_its_text_holds(ctx: Context) -> None:
    command = "printf 'a\\tb\\n' | tr -d '\\\\' # é\t\\N\r\n"
    env = {"TAB": "x\ty", "SLASH": "\\", "NEWLINE": "1\n2", "NULL_WORD": "\\N"}
    view = ops.add_job(ctx, ops.spec_from_options("odd", {"every": "1h", "command": command, "env": env}))
    got = ctx.definitions.get("odd")
    assert got is not None and got["command"] == command and got["env"] == env
    assert got["state"] == {**view.state, "claims": {}}


def test_a_remove_waits_for_an_add_after_it_and_then_refuses_to_orphan_it(ctx: Context, store_url: str,
                                                                           tmp_path: Path) -> None:
    """Two writers of different rows: the chain rule still sees the other's dependant."""
    other = Context.open(tmp_path / "other", store_url=parse_store_url(store_url))
    added = threading.Event()
    release = threading.Event()
    original = pg_definitions.PgEdit.write

    def held_write(edit: pg_definitions.PgEdit, shown: str) -> None:
        original(edit, shown)
        if "chained" in edit.added:
            added.set()
            assert release.wait(30)

    outcome: dict[str, Any] = {}

    def remove_upstream() -> None:
        try:
            ops.remove_job(other, "job01")
            outcome["removed"] = True
        except ConflictError as exc:
            outcome["refused"] = str(exc)

    pg_definitions.PgEdit.write = held_write  # type: ignore[method-assign]
    try:
        adder = threading.Thread(target=lambda: ops.add_job(
            ctx, ops.spec_from_options("chained", {"after": ["job01"], "command": "true"})))
        adder.start()
        assert added.wait(30)
        remover = threading.Thread(target=remove_upstream)
        remover.start()
        time.sleep(0.5)  # the remove is waiting on job01's row (FOR SHARE of the add)
        assert outcome == {}
        release.set()
        adder.join(30)
        remover.join(30)
    finally:
        pg_definitions.PgEdit.write = original  # type: ignore[method-assign]
    assert "orphan" in outcome.get("refused", ""), outcome
