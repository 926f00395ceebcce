"""Who judges a claim's owner alive and its lease expired, on either store.

On the JSON store every owner is a process of this host: its pid and start time say
whether it lives, and its lease is on this boot's monotonic clock. On PostgreSQL a run
may belong to a loop on another host, whose pid means nothing here: such an owner counts
as alive and its lease (an instant on the database clock) judges it, with the margin
SPEC §9 gives another host before its run is taken from it; an owner of this host is
judged by its pid in this boot, and is dead if it is of an earlier one. The loops judge
so too: one rule, `loop.cluster.cluster_liveness`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from cronctl.context import Context
from cronctl.proc.identity import boot_id
from cronctl.proc.liveness import lease_checker, owner_alive

OwnerAlive = Callable[[dict[str, Any]], bool]
LeaseExpired = Callable[[dict[str, Any]], bool]

def judges(ctx: Context) -> tuple[OwnerAlive, LeaseExpired]:
    """The judges of this invocation's store; on PostgreSQL at the database's instant."""
    if ctx.cluster is not None:
        return pg_judges(ctx.cluster.db_now(), ctx.cluster.host_id)
    return owner_alive, lease_checker()


def pg_judges(db_now: datetime, host: str) -> tuple[OwnerAlive, LeaseExpired]:
    """The loops' own judgement across hosts (loop/cluster.py), at the database's instant `db_now`,
    from `host` (this one, as the store's rows name it)."""
    from cronctl.loop.cluster import cluster_liveness

    skew = db_now - datetime.now(timezone.utc)
    live = cluster_liveness(host, boot_id(), lambda: datetime.now(timezone.utc) + skew, time.monotonic)
    return live.owner_alive, live.lease_expired
