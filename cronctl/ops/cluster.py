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
from datetime import datetime
from typing import TYPE_CHECKING

from cronctl.context import Context
from cronctl.errors import ConflictError, CronctlError

if TYPE_CHECKING:
    from cronctl.loop.heal import Liveness
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


def db_now(ctx: Context) -> datetime:
    return _leases(ctx).db_now()


def cli_liveness(ctx: Context) -> Liveness:
    """Owners and leases as a loop judges them across hosts, for commands that reclaim
    (force-run's release of dead claims, resume): another host's pid is never judged here."""
    from cronctl.loop.cluster import cluster_liveness
    from cronctl.proc.identity import boot_id
    from cronctl.store.pg.identity import host_id

    skew = db_now(ctx) - ctx.clock.now()
    return cluster_liveness(host_id(), boot_id(), lambda: ctx.clock.now() + skew, ctx.clock.monotonic)

