"""The loops sharing a PostgreSQL store: their rows, and the one query a loop makes per tick.

Every loop registers a row at start (a fresh `loop_id`, its host, boot, pid and home) and
marks it stopped when it ends. While it runs, `beat` is its whole idle cost: one statement
that stamps its heartbeat on the database clock and answers everything the loop must
know before deciding to do more (MULTIHOST §6, SPEC §9):

- the database's instant, which due times and leases are judged by;
- the next instant something is due (`wake_at`) and the next slot that may be claimed
  ahead (within `AHEAD_HORIZON`), with how many fire within a second of it;
- whether a request (force-run; kill of a run on this host) waits for a loop;
- whether a live run needs the healer: its lease ran out on the database clock (plus
  the margin), or it belongs to this host but not to this process (a dead owner here is
  reclaimed within a tick), or it was claimed ahead by a loop gone silent (takeover.py).

`status` reads the rows: a loop is `ok` while its heartbeat is fresh, `stopped` once it
said so, `unreachable` when its heartbeat is older than `UNREACHABLE_AFTER_S` (3 ticks).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from cronctl.models import AuditEvent
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.deadline import BEAT_DEADLINE_S, deadline
from cronctl.store.pg.takeover import HELD_BY_SILENT
from cronctl.store.pg.transaction import short_transaction

UNREACHABLE_AFTER_S = 3.0  # three ticks of one second
# A row stays in `status` this long after its loop stopped or went silent, then is forgotten.
FORGET_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class LoopIdentity:
    """One loop: fresh `loop_id` at each start, on a host, in a boot, as a process."""

    loop_id: UUID
    host_id: str
    boot_id: str
    pid: int
    pid_start: float


@dataclass(frozen=True)
class Beat:
    """What one tick's query told a loop."""

    db_now: datetime
    next_due: datetime | None
    next_ahead: datetime | None
    ahead_count: int
    requests_waiting: bool
    needs_healing: bool
    registered: bool  # False: our row is gone (a restored database): register again


# The instants of the jobs, after a CTE `t` holding the database's `now`: the earliest
# `wake_at` of an unpaused job; the earliest one that may be claimed ahead (no pending
# retry, no live run); how many fire within a second of that one. Each walks the index on
# `wake_at` from its low end and stops at the first row that answers (ORDER BY ... LIMIT 1:
# `min()` over the anti-join read every future row, 0.5 s at a million jobs), so an idle
# beat costs the same at any number of jobs.
# The walk stops AHEAD_HORIZON past now: an `apply -f` of 100,000 new jobs puts their index
# entries in the walk's way while its transaction is open, and each entry of a row not yet
# committed is a visit to the table to find it invisible. Unbounded, the walk went through all of
# them while the one near job had a live run: the next instants took 17 ms on average and 360 ms at
# worst during that apply, the loops' p99 lateness 3.6x (issue 21). A slot further than the horizon is found
# once it is within it, beats before its lead (engine.fire_ahead: the lead is seconds; a burst
# whose lead would be longer is claimed ahead the horizon before its slot instead).
AHEAD_HORIZON = timedelta(minutes=10)
_AHEAD = f"""ahead AS (
    SELECT j.wake_at AS first FROM cronctl_jobs AS j
     WHERE NOT j.paused AND j.wake_at > (SELECT now FROM t)
       AND j.wake_at <= (SELECT now FROM t) + interval '{int(AHEAD_HORIZON.total_seconds())} seconds'
       AND coalesce(j.state -> 'retry', 'null'::jsonb) = 'null'::jsonb
       AND NOT EXISTS (SELECT 1 FROM cronctl_runs AS r
                        WHERE r.job = j.name AND r.live)
     ORDER BY j.wake_at LIMIT 1)"""
# A chain's node to claim (chain_doc.earliest_chain_fire): ready, a retry (when it falls due),
# or running with its claim gone; a forced chain's root is ready before any job is due.
_CHAIN_FIRE = """(SELECT min(CASE WHEN n.value->>'status' = 'retrying' THEN n.value->>'due_at'
                             ELSE coalesce(n.value->>'ready_at', n.value->>'due_at', c.chain->>'started_at')
                        END::timestamptz)
          FROM cronctl_chains AS c, jsonb_each(c.chain->'nodes') AS n
         WHERE c.ended_at IS NULL
           AND (n.value->>'status' IN ('ready', 'retrying')
                OR (n.value->>'status' = 'running'
                    AND NOT EXISTS (SELECT 1 FROM cronctl_runs AS r WHERE r.run_id = n.value->>'run_id'
                                      AND r.live))))"""
_INSTANTS = f"""least((SELECT min(wake_at) FROM cronctl_jobs WHERE NOT paused AND wake_at IS NOT NULL),
             {_CHAIN_FIRE}),
       (SELECT first FROM ahead),
       (SELECT count(*) FROM cronctl_jobs
         WHERE NOT paused AND wake_at > (SELECT now FROM t)
           AND wake_at <= (SELECT first FROM ahead) + interval '1 second')"""

_BEAT = f"""
WITH t AS (SELECT clock_timestamp() AS now),
beat AS (
    UPDATE cronctl_loops SET heartbeat_at = (SELECT now FROM t), skew_s = %(skew)s
     WHERE loop_id = %(loop)s RETURNING 1),
{_AHEAD}
SELECT (SELECT now FROM t),
       {_INSTANTS},
       EXISTS (SELECT 1 FROM cronctl_requests AS q LEFT JOIN cronctl_runs AS r ON r.run_id = q.run_id
                WHERE q.served_at IS NULL AND (q.kind = 'force_run' OR r.host_id = %(host)s)),
       EXISTS (SELECT 1 FROM cronctl_runs
                WHERE live
                  AND (lease_expires_at < (SELECT now FROM t) - %(margin)s * interval '1 second'
                       OR (host_id = %(host)s AND (claim -> 'owner' ->> 'pid') IS DISTINCT FROM %(pid)s)))
         OR {HELD_BY_SILENT},
       EXISTS (SELECT 1 FROM beat)
"""


def beat(conn: Connection, me: LoopIdentity, skew_s: float, margin_s: float) -> Beat:
    """The heartbeat and what the loop must know, in one statement (see the module doc).

    A plain transaction, without `short_transaction`'s limits: they would double the
    statements of an idle loop, and this one locks nothing but the loop's own row. Its round
    trips have the beat's own deadline, shorter than the others' (deadline.py)."""
    with deadline(conn, BEAT_DEADLINE_S), conn.transaction():
        row = conn.execute(_BEAT, {"loop": me.loop_id, "skew": skew_s, "host": me.host_id,
                                   "pid": str(me.pid), "margin": margin_s}).fetchone()
    assert row is not None
    db_now, next_due, next_ahead, ahead_count, requests, healing, registered = row
    return Beat(db_now, next_due, next_ahead, int(ahead_count or 0), bool(requests), bool(healing),
                bool(registered))


_NEXT = f"""
WITH t AS (SELECT clock_timestamp() AS now),
{_AHEAD}
SELECT {_INSTANTS}
"""


def next_instants(conn: Connection) -> tuple[datetime | None, datetime | None, int]:
    """(next due, next claimable ahead, how many fire with it): after the loop's own write."""
    with short_transaction(conn):
        row = conn.execute(_NEXT).fetchone()
    assert row is not None
    return row[0], row[1], int(row[2] or 0)


def job_count(conn: Connection) -> int:
    """How many jobs (the service manager's status line). A read of every row (24 ms at 100,000
    jobs, the uncommitted rows of an open `apply -f` included): asked only when that line is
    told, never with the instants after each write (issue 21)."""
    with short_transaction(conn):
        row = conn.execute("SELECT count(*) FROM cronctl_jobs").fetchone()
    return int(row[0]) if row else 0


def register(conn: Connection, me: LoopIdentity, home: str) -> None:
    """Our row, with `scheduler.started` in the same transaction; rows long gone are forgotten."""
    with short_transaction(conn):
        conn.execute("DELETE FROM cronctl_loops WHERE heartbeat_at < clock_timestamp() - %s", (FORGET_AFTER,))
        conn.execute("INSERT INTO cronctl_loops (loop_id, host_id, boot_id, pid, pid_start, home)"
                     " VALUES (%s, %s, %s, %s, %s, %s)",
                     (me.loop_id, me.host_id, me.boot_id, me.pid, me.pid_start, home))


def mark_stopped(conn: Connection, me: LoopIdentity) -> None:
    with short_transaction(conn):
        conn.execute("UPDATE cronctl_loops SET stopped_at = clock_timestamp(), heartbeat_at = clock_timestamp()"
                     " WHERE loop_id = %s", (me.loop_id,))


def audit(conn: Connection, me: LoopIdentity, event: AuditEvent, **details: Any) -> None:
    """One row of what happened to this loop (its clock's skew, an outage), in its own transaction."""
    with short_transaction(conn):
        write_audit(conn, [AuditRow(event, details={"pid": me.pid, **details})], me.loop_id, me.host_id)


@dataclass(frozen=True)
class LoopRow:
    """One loop as `status` shows it."""

    loop_id: str
    host: str
    pid: int
    home: str | None
    started_at: datetime
    heartbeat_age_s: float
    skew_s: float | None
    stopped: bool

    @property
    def state(self) -> str:
        if self.stopped:
            return "stopped"
        return "ok" if self.heartbeat_age_s <= UNREACHABLE_AFTER_S else "unreachable"

    def to_dict(self) -> dict[str, Any]:
        return {"loop_id": self.loop_id, "host": self.host, "pid": self.pid, "home": self.home,
                "started_at": self.started_at.isoformat(timespec="seconds"),
                "heartbeat_age_s": round(self.heartbeat_age_s, 1),
                "skew_s": None if self.skew_s is None else round(self.skew_s, 3), "state": self.state}


def loops(conn: Connection) -> list[LoopRow]:
    """Every loop still remembered, newest first, judged on the database clock."""
    with conn.transaction():
        rows = conn.execute(
            "SELECT loop_id::text, host_id, pid, home, started_at,"
            " extract(epoch FROM clock_timestamp() - heartbeat_at), skew_s, stopped_at IS NOT NULL"
            " FROM cronctl_loops WHERE heartbeat_at >= clock_timestamp() - %s ORDER BY started_at DESC",
            (FORGET_AFTER,)).fetchall()
    return [LoopRow(loop_id, host, int(pid), home, started, float(age), skew, bool(stopped))
            for loop_id, host, pid, home, started, age, skew, stopped in rows]
