"""Commands meeting the loops of a PostgreSQL store (SPEC §9): the loops `status` lists, and
force-run and kill left as request rows for a loop to serve.

A command on one host cannot start a run on another host nor signal a process there: it
writes a request (store/pg/requests.py) and waits for a loop's answer, which any live
loop gives within a tick for a force-run, and the loop on the run's host for a kill.
With no live loop, force-run runs in the calling process as on the JSON store.
"""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING

from cronctl.context import Context
from cronctl.errors import ConflictError, CronctlError

if TYPE_CHECKING:
    from cronctl.loop.heartbeat import LoopStatus
    from cronctl.store.pg.forget import HostForgotten
    from cronctl.store.pg.leases import PgLeaseStore
    from cronctl.store.pg.loops import LoopRow

# How long a command waits for a loop to take its request: a loop serves within a tick of
# its beat; a loop that answers nothing in this time is reported, never waited on for ever.
ANSWER_TIMEOUT_S = 15.0


def _leases(ctx: Context) -> PgLeaseStore:
    from cronctl.store.pg.leases import PgLeaseStore

    leases = ctx.leases
    assert isinstance(leases, PgLeaseStore)
    return leases


def cluster_loops(ctx: Context) -> list[LoopRow]:
    """Every loop the store remembers (`status`), newest first."""
    from cronctl.store.pg import loops

    leases = _leases(ctx)
    with leases.lock:
        return loops.loops(leases.conn)


def cluster_summary(rows: list[LoopRow]) -> LoopStatus:
    """The loops of the store in `status`'s one loop line: `ok` while one is live and none has
    stopped answering, `unreachable` when one has, `stopped` when none runs (SPEC §9: both stale)."""
    from cronctl.loop.heartbeat import LoopStatus

    live = [row for row in rows if row.state == "ok"]
    silent = [row for row in rows if row.state == "unreachable"]
    if silent:
        named = ", ".join(f"host {row.host} pid {row.pid} ({row.heartbeat_age_s:.0f}s ago)" for row in silent)
        return LoopStatus("unreachable", f"{len(silent)} loop(s) stopped answering: {named}; their runs are "
                          "reclaimed by the others once their leases run out", pid=silent[0].pid,
                          heartbeat_age=silent[0].heartbeat_age_s)
    if live:
        hosts = ", ".join(sorted({row.host for row in live}))
        youngest = min(live, key=lambda row: row.heartbeat_age_s)
        return LoopStatus("ok", f"{len(live)} loop(s) running on {hosts}", pid=youngest.pid,
                          heartbeat_age=youngest.heartbeat_age_s)
    return LoopStatus("stopped", "no loop runs on this store; start 'cronctl run' with this --store on a host")


def forget_host(ctx: Context, host: str) -> HostForgotten:
    """`cronctl store forget-host HOST`: every loop of a decommissioned host, forgotten at once."""
    from cronctl.errors import StoreError
    from cronctl.store.pg.forget import forget_host as forget

    if not ctx.on_postgres:
        raise StoreError("store forget-host: hosts share only a PostgreSQL store; name it with --store URL "
                         "or $CRONCTL_STORE")
    leases = _leases(ctx)
    with leases.lock:
        return forget(leases.conn, host, requested_by())


def live_loops(ctx: Context) -> list[LoopRow]:
    return [row for row in cluster_loops(ctx) if row.state == "ok"]


def requested_by() -> str:
    """Who asked, as the request row keeps it: user@host pid."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()} pid {os.getpid()}"


def force_through_cluster(ctx: Context, job: str) -> str:
    """Leave a force-run request for any live loop; the run id it started."""
    from cronctl.store.pg import requests

    leases = _leases(ctx)
    with leases.lock:
        request_id = requests.request_force(leases.conn, job, requested_by())
    outcome = _wait_answer(ctx, request_id)
    if outcome.startswith("started "):
        return outcome.split(" ", 1)[1]
    if outcome.startswith("skipped: "):
        raise ConflictError(outcome.split(": ", 1)[1])
    raise CronctlError(f"the loop refused the force-run of '{job}': {outcome.removeprefix('refused: ')}")


def kill_through_cluster(ctx: Context, job: str, run_id: str) -> bool:
    """Ask the loop on the run's host to end it; True when it did."""
    from cronctl.store.pg import requests

    leases = _leases(ctx)
    with leases.lock:
        request_id = requests.request_kill(leases.conn, job, run_id, requested_by())
    return _wait_answer(ctx, request_id).startswith("killed ")


def how_to_kill(ctx: Context, run_id: str) -> str:
    """`request` (a live loop on the run's host ends it), `here` (the run is on this host and
    no loop there is live: this process ends it) or `unreachable` (another host, no live loop)."""
    from cronctl.store.pg.identity import host_id

    leases = _leases(ctx)
    with leases.lock, leases.conn.transaction():
        row = leases.conn.execute("SELECT host_id FROM cronctl_runs WHERE run_id = %s", (run_id,)).fetchone()
    host = row[0] if row else None
    if any(loop.host == host for loop in live_loops(ctx)):
        return "request"
    return "here" if host == host_id() else "unreachable"


def _wait_answer(ctx: Context, request_id: int, may_withdraw: bool = True) -> str:
    from cronctl.store.pg import requests

    leases = _leases(ctx)
    deadline = ctx.clock.monotonic() + ANSWER_TIMEOUT_S
    while ctx.clock.monotonic() < deadline:
        with leases.lock:
            served, outcome = requests.outcome_of(leases.conn, request_id)
        if served and outcome is not None:
            return str(outcome)
        ctx.clock.sleep(0.1)
    if may_withdraw:
        with leases.lock:
            withdrawn = requests.withdraw(leases.conn, request_id)
        if not withdrawn:  # taken just now: its answer is on its way
            return _wait_answer(ctx, request_id, may_withdraw=False)
        raise CronctlError(f"no loop answered request {request_id} within {ANSWER_TIMEOUT_S:.0f}s, so it was "
                           "withdrawn (nothing will run for it); see 'cronctl status'")
    raise CronctlError(f"a loop took request {request_id} but did not answer; see 'cronctl status' and "
                       "'cronctl audit'")
