"""What every use case needs: the home's paths, the store, the audit log and a clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cronctl.clock import Clock, SystemClock
from cronctl.paths import Paths, open_home
from cronctl.store.audit import AuditLog
from cronctl.store.jsonstore import Store
from cronctl.store.leases import JsonLeaseStore, LeaseStore


@dataclass
class Context:
    paths: Paths
    store: Store
    audit: AuditLog
    clock: Clock = field(default_factory=SystemClock)
    # The run path's writes go through this interface; None: the JSON store over `store`.
    leases: LeaseStore = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.leases is None:
            self.leases = JsonLeaseStore(self.store, self.audit, self.paths)

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
