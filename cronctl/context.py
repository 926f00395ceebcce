"""What every use case needs: the home's paths, the store's backend and a clock."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cronctl.clock import Clock, SystemClock
from cronctl.paths import Paths, open_home
from cronctl.store.audit import AuditLog
from cronctl.store.backend import Backend, JsonBackend, open_backend
from cronctl.store.jsonstore import Store

if TYPE_CHECKING:
    from cronctl.store.backend import StoreUrl
    from cronctl.store.cluster import Cluster
    from cronctl.store.definitions import Definitions
    from cronctl.store.leases import LeaseStore


class Context:
    """One invocation: its home, its clock and its store's one `backend` (store/backend.py),
    chosen once when opened; the properties below are the backend's parts, by their old names.

    `Context(paths, store, audit, clock)` is the JSON store over `store` and `audit` (tests
    build it so); `Context.open` chooses by `--store`."""

    def __init__(self, paths: Paths, store: Store | None = None, audit: AuditLog | None = None,
                 clock: Clock | None = None, *, backend: Backend | None = None) -> None:
        self.paths = paths
        self.clock: Clock = clock or SystemClock()
        if backend is None:
            assert store is not None and audit is not None, "a JSON context needs its store and audit log"
            backend = JsonBackend(paths, store, audit)
        self.backend = backend

    @classmethod
    def open(cls, home: Path, clock: Clock | None = None, lock_timeout: float = 30.0,
             store_url: StoreUrl | None = None) -> Context:
        """`store_url` selects PostgreSQL: its rows are the jobs; the home keeps this host's run logs."""
        paths = open_home(home)
        clock = clock or SystemClock()
        return cls(paths, clock=clock, backend=open_backend(paths, clock, store_url, lock_timeout))

    def reopen(self) -> Context:
        """Another Context on the same home and store, with caches and a connection of its own
        (the --http endpoint's threads never share the tick thread's)."""
        return Context.open(self.paths.home, clock=self.clock, store_url=self.backend.url)

    @property
    def store(self) -> Store:
        """The store as one document (read-only on PostgreSQL)."""
        return self.backend.document

    @property
    def audit(self) -> AuditLog:
        return self.backend.audit

    @property
    def leases(self) -> LeaseStore:
        """The run path's writes and the run read views (store/leases.py), made on first use."""
        return self.backend.leases

    @property
    def definitions(self) -> Definitions:
        """What defines and edits jobs writes through (store/definitions.py), made on first use."""
        return self.backend.definitions

    @property
    def cluster(self) -> Cluster | None:
        """The loops of every host sharing the store (store/cluster.py); None on the JSON store."""
        return self.backend.cluster
