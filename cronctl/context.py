"""What every use case needs: the home's paths, the store, the audit log and a clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from cronctl.clock import Clock, SystemClock
from cronctl.paths import Paths, open_home
from cronctl.store.audit import AuditLog
from cronctl.store.jsonstore import Store

if TYPE_CHECKING:
    from cronctl.store.leases import LeaseStore


@dataclass
class Context:
    paths: Paths
    store: Store
    audit: AuditLog
    clock: Clock = field(default_factory=SystemClock)
    # The backend of `leases`; None: the JSON store over `store`, made on first use.
    lease_store: LeaseStore | None = None

    @property
    def leases(self) -> LeaseStore:
        """The run path's writes and the run read views (store/leases.py).

        Built lazily: the `status --json` fast path opens a Context and never needs it,
        and importing the lease machinery would cost it about 20 ms.
        """
        if self.lease_store is None:
            from cronctl.store.leases import JsonLeaseStore

            self.lease_store = JsonLeaseStore(self.store, self.audit, self.paths)
        return self.lease_store

    @classmethod
    def open(cls, home: Path, clock: Clock | None = None, lock_timeout: float = 30.0) -> Context:
        paths = open_home(home)
        clock = clock or SystemClock()
        return cls(
            paths=paths,
            store=Store(paths, lock_timeout=lock_timeout),
            audit=AuditLog(paths.audit, clock=clock),
            clock=clock,
        )
