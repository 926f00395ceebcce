"""The run path's server-side functions (store/pg/functions.py) keep the client statements' semantics.

- a unit that waited for a job's row lock reads the live runs the holder committed meanwhile
  (each statement of a VOLATILE function takes its own snapshot, as separate statements did);
- the due rows are locked SKIP LOCKED, so a row another loop is deciding on is left to it;
- an error raised inside a function is the client statement's error: same class, one line;
- the due scan's generic plan (V9) ranges over the wake index, whatever its bound;
- a unit opens in one call (V10) unless it has chains to plan, and finds what the steps find.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from cronctl.models import JobSpec
from cronctl.store.pg import functions
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.jobs import put_job
from cronctl.store.pg.transaction import Limits, short_transaction
from tests.pg.pghelp import (
    db_now,
    insert_live_run,
    one,
    open_named_rows,
    put_due_job,
    waited_for_row,
)


@pytest.mark.parametrize("lock_named", [functions.lock_named, open_named_rows], ids=["steps", "in-one"])
def test_a_unit_that_waited_for_the_lock_reads_the_run_its_holder_committed(
        connections: Callable[[], Connection], lock_named: Callable[[Connection, list[str]], Any]) -> None:
    put_due_job(connections(), "j")
    rows, _ = waited_for_row(connections, "j", lambda waiter: lock_named(waiter, ["j"]),
                             lambda holder: insert_live_run(holder, "j", "r1"))  # committed while the waiter waits
    assert [row[0] for row in rows] == ["j", "j"]
    assert rows[1][3] == "r1" and rows[1][4]["owner"] == {"pid": 1} and rows[1][5] == "host-a"


def test_the_due_rows_skip_a_row_another_loop_holds(connections: Callable[[], Connection]) -> None:
    holder, claimer = connections(), connections()
    put_due_job(holder, "held")
    put_due_job(holder, "free")
    with holder.transaction():  # what the lease store claims by (put_job writes only next_run_at)
        holder.execute("UPDATE cronctl_jobs SET wake_at = next_run_at")
    with holder.transaction():
        holder.execute("SELECT 1 FROM cronctl_jobs WHERE name = 'held' FOR UPDATE")
        with claimer.transaction():
            names = [row[0] for row in functions.lock_due(claimer, None) if row[3] is None]
    assert names == ["free"]


def test_a_lock_timeout_inside_a_function_is_the_same_error_in_one_line(connections: Callable[[], Connection]) -> None:
    holder, waiter = connections(), connections()
    put_due_job(holder, "j")
    with holder.transaction():
        holder.execute("SELECT 1 FROM cronctl_jobs WHERE name = 'j' FOR UPDATE")
        with pytest.raises(psycopg.errors.LockNotAvailable) as caught, \
                short_transaction(waiter, Limits(lock_s=0.1)):
            functions.lock_named(waiter, ["j"])
    assert str(caught.value) == "canceling statement due to lock timeout"


def test_the_due_scan_is_planned_with_its_instant_the_others_once(conn: Connection) -> None:
    with conn.transaction():
        modes = dict(conn.execute("SELECT proname, proconfig FROM pg_proc WHERE proname LIKE 'cronctl_%'").fetchall())
    # V9: the due names by a range of the wake index, planned once; no whole-table read (V8: planned each call)
    for due in ("cronctl_lock_due", "cronctl_open_due"):
        assert modes.pop(due) == ["plan_cache_mode=force_generic_plan", "enable_seqscan=off", "enable_bitmapscan=off"]
    # the readers of live runs: a plain index scan, never a bitmap scan (tests/pg/test_pg_hot.py)
    for reader in ("cronctl_live_claims", "cronctl_named_first", "cronctl_lock_named"):
        assert modes.pop(reader) == ["plan_cache_mode=force_generic_plan", "enable_bitmapscan=off"]
    # V10's one-call opening: nor the table read whole
    assert modes.pop("cronctl_open_named") == ["plan_cache_mode=force_generic_plan", "enable_bitmapscan=off",
                                               "enable_seqscan=off"]
    assert modes and set(map(tuple, modes.values())) == {("plan_cache_mode=force_generic_plan",)}


def test_the_unit_end_raises_a_mark_only_forward_with_or_without_its_row(conn: Connection) -> None:
    put_due_job(conn, "j")
    now = db_now(conn)
    earlier, later = now - timedelta(minutes=1), now + timedelta(minutes=1)

    def end(fired: datetime, with_row: bool) -> Any:
        row = [(Jsonb({"n": 1}), None, None, False, "j")] if with_row else []
        with conn.transaction():
            functions.end_unit(conn, row, [("j", fired)], {}, "host-a", [])
            return conn.execute("SELECT last_slot FROM cronctl_jobs WHERE name = 'j'").fetchone()

    assert end(now, with_row=False)[0] == now  # a mark of a row not otherwise written
    assert end(earlier, with_row=True)[0] == now  # never backwards, the row written once
    assert end(later, with_row=True)[0] == later
    assert one(conn, "SELECT state FROM cronctl_jobs WHERE name = 'j'") == {"n": 1}


def test_the_unit_end_writes_one_row_as_it_writes_many(conn: Connection) -> None:
    """V9's path of one row (a run's claim, dispatch or finish) writes what the general path
    writes: the job row with its mark, the meta row, the audit row."""
    for name in ("one", "many-a", "many-b"):
        put_due_job(conn, name)
    now = db_now(conn)
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_meta (key) VALUES ('counters@h'), ('metrics@h') ON CONFLICT DO NOTHING")

    def end(names: list[str], meta: dict[str, Any], events: int) -> None:
        rows = [(Jsonb({"of": name}), now, now + timedelta(minutes=1), False, name) for name in names]
        audit = [[f"e{n}" for n in range(events)], names[:1] * events, [None] * events, [now] * events,
                 [None] * events, [None] * events, [Jsonb({"n": n}) for n in range(events)]]
        with conn.transaction():
            functions.end_unit(conn, rows, [(names[0], now), ("elsewhere", now)], meta, "h", audit)

    end(["one"], {"counters@h": Jsonb({"c": 1})}, 1)
    end(["many-a", "many-b"], {"counters@h": Jsonb({"c": 2}), "metrics@h": Jsonb({"m": 2})}, 2)
    with conn.transaction():
        jobs = conn.execute("SELECT name, state, next_run_at, wake_at, paused, last_slot FROM cronctl_jobs"
                            " ORDER BY name").fetchall()
        meta = conn.execute("SELECT key, value FROM cronctl_meta WHERE key LIKE '%@h' ORDER BY key").fetchall()
        audit = conn.execute("SELECT event, job, details FROM cronctl_audit ORDER BY id").fetchall()
    later = now + timedelta(minutes=1)
    assert jobs == [("many-a", {"of": "many-a"}, now, later, False, now),
                    ("many-b", {"of": "many-b"}, now, later, False, None),
                    ("one", {"of": "one"}, now, later, False, now)]
    assert meta == [("counters@h", {"c": 2}), ("metrics@h", {"m": 2})]
    assert audit[-3:] == [("e0", "one", {"n": 0}), ("e0", "many-a", {"n": 0}), ("e1", "many-a", {"n": 1})]


def test_the_fired_keys_are_found_one_or_many(conn: Connection) -> None:
    """V9's path of one key finds what the join of many finds: the keys with a run, the marks."""
    put_due_job(conn, "a")
    put_due_job(conn, "b")
    slot = db_now(conn)
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_runs (run_id, job, slot, trigger, exclusive, state)"
                     " VALUES ('r1', 'a', %s, 'schedule', true, 'success')", (slot,))
        conn.execute("UPDATE cronctl_jobs SET last_slot = %s WHERE name = 'b'", (slot,))
    with conn.transaction():
        one_key = functions.fired(conn, [("a", slot, 1)])
        other_attempt = functions.fired(conn, [("a", slot, 2)])
        many = functions.fired(conn, [("a", slot, 1), ("b", slot, 1), ("a", None, 1)])
    assert one_key == ({("a", slot, 1)}, {})
    assert other_attempt == (set(), {})
    assert many == ({("a", slot, 1)}, {"b": slot})


def _put_meta(conn: Connection) -> list[str]:
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_meta (key, value) VALUES ('counters@h', '{\"c\": 1}'),"
                     " ('metrics@h', '{}') ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value")
    return ["counters@h", "metrics@h"]


def test_a_named_unit_opens_in_one_call_unless_its_jobs_have_chains_to_plan(conn: Connection) -> None:
    put_due_job(conn, "a")
    put_due_job(conn, "b")
    put_due_job(conn, "c")
    put_job(conn, JobSpec(name="after-b", command="true", after=("b",)), None)
    insert_live_run(conn, "a", "ra")
    keys = _put_meta(conn)
    before = db_now(conn)
    with conn.transaction():
        opened = functions.open_named(conn, ["a", "c"], keys)
        chained = functions.open_named(conn, ["b"], keys)  # a job runs after b: its end may start it
    assert opened is not None and chained is None
    assert [(row[0], row[3]) for row in opened.rows] == [("a", None), ("c", None), ("a", "ra")]
    assert opened.rows[0][1]["name"] == "a" and opened.rows[2][4]["owner"] == {"pid": 1}
    assert opened.meta == [("counters@h", {"c": 1}), ("metrics@h", {})] and opened.after == []
    assert opened.at >= before
    with conn.transaction():  # a's live run is a chain's node: its end decides the chain
        conn.execute("UPDATE cronctl_runs SET claim = claim || '{\"chain\": \"ch\"}' WHERE run_id = 'ra'")
    with conn.transaction():
        assert functions.open_named(conn, ["a"], keys) is None
        assert functions.open_named(conn, ["c"], []) is not None


def test_the_claim_write_opens_in_one_call_unless_a_chain_is_open(conn: Connection) -> None:
    put_due_job(conn, "x")
    put_due_job(conn, "y", ago_s=-3600)  # not due
    put_job(conn, JobSpec(name="after-x", command="true", after=("x",)), None)
    with conn.transaction():  # what the lease store claims by (put_job writes only next_run_at)
        conn.execute("UPDATE cronctl_jobs SET wake_at = next_run_at")
    with conn.transaction():
        opened = functions.open_due(conn, None)
    assert opened is not None
    assert [row[0] for row in opened.rows] == ["x"] and opened.after == ["after-x"] and opened.meta == []
    with conn.transaction():
        conn.execute("INSERT INTO cronctl_chains (chain_id, root, jobs, chain, started_at)"
                     " VALUES ('ch', 'x', '{x}', '{}', clock_timestamp())")
    with conn.transaction():
        assert functions.open_due(conn, None) is None
