"""Who judges a claim's owner alive and its lease expired, on either store.

On the JSON store every owner is a process of this host: its pid and start time say
whether it lives, and its lease is on this boot's monotonic clock. On PostgreSQL a run
may belong to a loop on another host, whose pid means nothing here: such an owner counts
as alive and its lease (an instant on the database clock) judges it, with the margin
SPEC §9 gives another host before its run is taken from it. An owner of this boot is
judged as on the JSON store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from cronctl.context import Context
from cronctl.proc.identity import boot_id
from cronctl.proc.liveness import lease_checker, owner_alive
from cronctl.timefmt import from_iso

OwnerAlive = Callable[[dict[str, Any]], bool]
LeaseExpired = Callable[[dict[str, Any]], bool]

# SPEC §9: another host's run is reclaimed once its lease has expired plus this margin.
OTHER_HOST_MARGIN = timedelta(seconds=5)


def judges(ctx: Context) -> tuple[OwnerAlive, LeaseExpired]:
    """The judges of this invocation's store; on PostgreSQL at the database's instant."""
    if ctx.on_postgres:
        from cronctl.store.pg.docstore import PgDocStore

        assert isinstance(ctx.store, PgDocStore)
        return pg_judges(ctx.store.db_now())
    return owner_alive, lease_checker()


def pg_judges(db_now: datetime) -> tuple[OwnerAlive, LeaseExpired]:
    here = boot_id()
    same_boot_expired = lease_checker()

    def alive(owner: dict[str, Any]) -> bool:
        return owner_alive(owner) if owner.get("boot_id") == here else True

    def expired(claim: dict[str, Any]) -> bool:
        if claim.get("boot_id") == here:
            return same_boot_expired(claim)
        until = from_iso(claim.get("lease_until"))
        return until is None or until + OTHER_HOST_MARGIN < db_now

    return alive, expired
