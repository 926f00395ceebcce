"""A unit opened in one call (schema V10, store/pg/document.py `OpenInOne`) has the document the
step-by-step opening makes of the same rows: its jobs and their claims, the dependants read
without a lock, the meta rows, the chains; and a unit with chains to plan opens step by step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cronctl.models import JobSpec
from cronctl.store.pg import chain_rows, functions
from cronctl.store.pg.chain_rows import ChainPlan
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.document import OpenInOne, doc_transaction, rows_due, rows_named
from cronctl.store.pg.jobs import put_job
from tests.pg.pghelp import insert_live_run, put_due_job, waited_for_row


def _opened(conn: Connection, in_one: OpenInOne | None, unit: str, meta: bool) -> dict[str, Any]:
    """What a unit's transaction holds once open (nothing is changed, so nothing is written)."""
    if unit == "due":
        lock, plan = rows_due(None), chain_rows.plan_due
    else:
        lock, plan = rows_named(["y", "z"]), (lambda c: chain_rows.plan_named(c, ["y", "z"]))
    with doc_transaction(conn, "h", lock, meta=meta, chains=plan, in_one=in_one) as tx:
        return {"doc": {key: value for key, value in tx.doc.items() if key != "rev"}, "read_only": tx.read_only,
                "before": dict(tx._before), "chains_before": tx.chains_before}


def _in_one(unit: str, calls: list[str]) -> OpenInOne:
    def call(conn: Connection, keys: list[str]) -> functions.Opened | None:
        calls.append(unit)
        return functions.open_due(conn, None) if unit == "due" else functions.open_named(conn, ["y", "z"], keys)
    return OpenInOne(call, ChainPlan(read_dependants=True) if unit == "due" else None)


@pytest.mark.parametrize("meta", [False, True], ids=["no-meta", "meta"])
@pytest.mark.parametrize("unit", ["due", "named"])
def test_a_unit_opened_in_one_call_holds_what_the_steps_hold(conn: Connection, unit: str, meta: bool) -> None:
    for name in ("x", "y", "z"):
        put_due_job(conn, name)
    put_job(conn, JobSpec(name="after-x", command="true", after=("x",)), None)  # read, not locked, by the claim
    with conn.transaction():
        conn.execute("UPDATE cronctl_jobs SET wake_at = next_run_at")
        conn.execute("INSERT INTO cronctl_meta (key, value) VALUES ('counters@h', '{\"runs\": 3}')"
                     " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")  # metrics@h: not yet there
    insert_live_run(conn, "y", "ry")
    calls: list[str] = []
    in_one = _opened(conn, _in_one(unit, calls), unit, meta)
    steps = _opened(conn, None, unit, meta)
    assert calls == [unit] and in_one == steps
    assert in_one["doc"]["jobs"]["y"]["state"]["claims"]["ry"]["owner"] == {"pid": 1, "host": "host-a"}
    assert ("counters" in in_one["doc"]) == meta
    if unit == "due":
        assert in_one["read_only"] == {"after-x"} and in_one["doc"]["chains"] == {}


def test_a_named_unit_with_chains_to_plan_opens_step_by_step(conn: Connection) -> None:
    put_due_job(conn, "y")
    put_due_job(conn, "z")
    put_job(conn, JobSpec(name="after-z", command="true", after=("z",)), None)
    calls: list[str] = []
    opened = _opened(conn, _in_one("named", calls), "named", meta=False)
    assert calls == ["named"]
    assert sorted(opened["doc"]["jobs"]) == ["after-z", "y", "z"]  # the job below z locked too (plan_named)
    assert opened == _opened(conn, None, "named", meta=False)


def test_an_opened_unit_judges_after_its_locks(connections: Callable[[], Connection]) -> None:
    """The clock a unit judges by is read once its locks are held (as `begin` reads it), not
    when the call arrived: a unit that waited for a row judges after the holder let it go."""
    put_due_job(connections(), "y")
    opened, released = waited_for_row(connections, "y", lambda waiter: functions.open_named(waiter, ["y"], []),
                                      lambda holder: holder.execute("SELECT clock_timestamp()").fetchone())
    assert released is not None and opened.at > released[0]
