"""Commands meeting the loops of a PostgreSQL store (SPEC §9): the loops `status` lists, and
force-run and kill left as request rows for a loop to serve.

A command on one host cannot start a run on another host nor signal a process there: it
writes a request (`Cluster.request_force`, `request_kill`: store/cluster.py) and waits for a
loop's answer, which any live loop gives within a tick for a force-run, and the loop on the
run's host for a kill. With no live loop, force-run runs in the calling process as on the JSON store.
"""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING

from cronctl.context import Context
from cronctl.errors import ConflictError, CronctlError, StoreError

if TYPE_CHECKING:
    from cronctl.loop.heartbeat import LoopStatus
    from cronctl.store.cluster import Cluster, HostForgotten, LoopRow

# How long a command waits for a loop to take its request: a loop serves within a tick of
# its beat; a loop that answers nothing in this time is reported, never waited on for ever.
ANSWER_TIMEOUT_S = 15.0


def _cluster(ctx: Context) -> Cluster:
    cluster = ctx.cluster
    assert cluster is not None, "only a store shared by hosts has loops to meet"
    return cluster


def cluster_loops(ctx: Context) -> list[LoopRow]:
    """Every loop the store remembers (`status`), newest first."""
    return _cluster(ctx).loops()


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
    if ctx.cluster is None:
        raise StoreError("store forget-host: hosts share only a PostgreSQL store; name it with --store URL "
                         "or $CRONCTL_STORE")
    return ctx.cluster.forget_host(host, requested_by())


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
    request_id = _cluster(ctx).request_force(job, requested_by())
    outcome = _wait_answer(ctx, request_id)
    if outcome.startswith("started "):
        return outcome.split(" ", 1)[1]
    if outcome.startswith("skipped: "):
        raise ConflictError(outcome.split(": ", 1)[1])
    raise CronctlError(f"the loop refused the force-run of '{job}': {outcome.removeprefix('refused: ')}")


def kill_through_cluster(ctx: Context, job: str, run_id: str) -> bool:
    """Ask the loop on the run's host to end it; True when it did."""
    request_id = _cluster(ctx).request_kill(job, run_id, requested_by())
    return _wait_answer(ctx, request_id).startswith("killed ")


def how_to_kill(ctx: Context, run_id: str) -> str:
    """`request` (a live loop on the run's host ends it), `here` (the run is on this host and
    no loop there is live: this process ends it) or `unreachable` (another host, no live loop)."""
    cluster = _cluster(ctx)
    host = cluster.host_of_run(run_id)
    if any(loop.host == host for loop in live_loops(ctx)):
        return "request"
    return "here" if host == cluster.host_id else "unreachable"


def _wait_answer(ctx: Context, request_id: int, may_withdraw: bool = True) -> str:
    cluster = _cluster(ctx)
    deadline = ctx.clock.monotonic() + ANSWER_TIMEOUT_S
    while ctx.clock.monotonic() < deadline:
        served, outcome = cluster.outcome_of(request_id)
        if served and outcome is not None:
            return str(outcome)
        ctx.clock.sleep(0.1)
    if may_withdraw:
        if not cluster.withdraw(request_id):  # taken just now: its answer is on its way
            return _wait_answer(ctx, request_id, may_withdraw=False)
        raise CronctlError(f"no loop answered request {request_id} within {ANSWER_TIMEOUT_S:.0f}s, so it was "
                           "withdrawn (nothing will run for it); see 'cronctl status'")
    raise CronctlError(f"a loop took request {request_id} but did not answer; see 'cronctl status' and "
                       "'cronctl audit'")
