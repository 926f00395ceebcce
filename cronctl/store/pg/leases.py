"""`LeaseStore` on PostgreSQL: the run path of store/leases.py over the job rows' locks.

Every `LeaseStore` method is `UnitLeaseStore`'s, over `PgUnits` (store/pg/unit.py: one
short transaction locking the named job rows, judged by the database clock). What is
here belongs to PostgreSQL alone: the connection the cluster code shares (`conn`,
`lock`), the round-trip deadline, the database clock, the takeover of claims held ahead
by a silent loop, and the health pass's read of the jobs it watches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from cronctl.clock import Clock, SystemClock
from cronctl.jobs.state import JobView
from cronctl.paths import Paths
from cronctl.store.leases import UnitLeaseStore
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.stale import may_be_stale
from cronctl.store.pg.takeover import held_by_silent_loops, take_over
from cronctl.store.pg.unit import JudgeBy, PgUnits

__all__ = ["JudgeBy", "PgLeaseStore"]


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

    def watched(self, late_by: datetime) -> dict[str, Any]:
        """The jobs the loop's health pass looks at (SPEC §12), as a document: the healer's
        (`suspects`) and the unpaused jobs with notify targets whose next instant is at or
        before `late_by` (those that may be late)."""
        return {"jobs": self.units.suspect_entries(None, late_by)}

    def may_be_stale(self, now: datetime) -> tuple[list[JobView], bool | None]:
        """The jobs that may be stale at `now`, by name, found by index (store/pg/stale.py), and
        whether the store holds any job: what `status --stale` judges, without every row."""
        with self.units.read():
            entries, any_jobs = may_be_stale(self.conn, now)
        return [JobView.from_entry(entries[name]) for name in sorted(entries)], any_jobs
