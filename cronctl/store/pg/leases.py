"""`LeaseStore` on PostgreSQL: the run path of store/leases.py over the job rows' locks.

Every `LeaseStore` method is `UnitLeaseStore`'s, over `PgUnits` (store/pg/unit.py: one
short transaction locking the named job rows, judged by the database clock). What is
here belongs to PostgreSQL alone: the connection the cluster code shares (`conn`,
`lock`), the round-trip deadline, the database clock, the takeover of claims held ahead
by a silent loop, and the healer's read of the suspect jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cronctl.clock import Clock, SystemClock
from cronctl.jobs.state import JobView
from cronctl.models import FAILED_STATUSES
from cronctl.paths import Paths
from cronctl.store.leases import UnitLeaseStore
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.document import load_jobs
from cronctl.store.pg.schema import LIVE_STATES
from cronctl.store.pg.stale import may_be_stale
from cronctl.store.pg.takeover import held_by_silent_loops, take_over
from cronctl.store.pg.unit import JudgeBy, PgUnits

__all__ = ["JudgeBy", "PgLeaseStore"]

# A job the health pass may find late: unpaused, with targets, its next instant passed.
_MAY_BE_LATE = "NOT paused AND wake_at IS NOT NULL AND wake_at <= %(late_by)s AND spec ? 'notify'"


class PgLeaseStore(UnitLeaseStore):
    """`LeaseStore` over one PostgreSQL connection (see the module doc)."""

    units: PgUnits

    def __init__(self, conn: Connection, host_id: str, *, judge_by: JudgeBy = "database",
                 clock: Clock | None = None, paths: Paths | None = None,
                 lock: threading.RLock | None = None,
                 connect_again: Callable[[], Connection] | None = None) -> None:
        super().__init__(PgUnits(conn, host_id, judge_by, clock or SystemClock(), paths, lock, connect_again))
        self.lock = self.units.lock
        self.host_id = host_id
        self.judge_by = judge_by
        self.listeners: list[Callable[[dict[str, Any]], None]] = self.units.listeners

    @property
    def conn(self) -> Connection:
        """The store's connection (replaced by a new one when found broken)."""
        return self.units.conn

    def set_deadline(self, seconds: float) -> None:
        """Every round trip of this store's connections gets `seconds` (a loop's: a share of its lease)."""
        self.units.set_deadline(seconds)

    def db_now(self) -> datetime:
        """The database clock now (what this store judges by, unless told to judge at the caller's)."""
        return self.units.db_now()

    def take_over_held(self) -> list[str]:
        """Reclaim the claims held ahead by loops gone silent, their slots due again here (takeover.py)."""
        with self.units.read():
            found = held_by_silent_loops(self.conn)
        taken = []
        for job, run_id in found:
            with self.units.named([job], meta=True) as unit:
                if take_over(unit.tx, job, run_id):
                    taken.append(run_id)
        return taken

    def suspects(self, late_by: datetime | None = None) -> dict[str, Any]:
        """The jobs the healer looks at (a live run, or a failed last run), as a document.

        `late_by` (the health pass, SPEC §12): also the unpaused jobs with notify targets whose
        next instant (`wake_at`, on its index) is at or before it: those that may be late.
        """
        with self.units.read():
            jobs = load_jobs(self.conn, "name IN (SELECT job FROM cronctl_runs WHERE state = ANY(%(live)s))"
                             " OR state ->> 'last_status' = ANY(%(failed)s)",
                             {"live": list(LIVE_STATES), "failed": sorted(str(s.value) for s in FAILED_STATUSES)},
                             lock=None)
            if late_by is not None:
                jobs.update(load_jobs(self.conn, _MAY_BE_LATE, {"late_by": late_by}, lock=None))
        return {"jobs": jobs}

    def may_be_stale(self, now: datetime) -> tuple[list[JobView], bool | None]:
        """The jobs that may be stale at `now`, by name, found by index (store/pg/stale.py), and
        whether the store holds any job: what `status --stale` judges, without every row."""
        with self.units.read():
            entries, any_jobs = may_be_stale(self.conn, now)
        return [JobView.from_entry(entries[name]) for name in sorted(entries)], any_jobs
