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
    from cronctl.store.backends import PgSession
    from cronctl.store.definitions import Definitions
    from cronctl.store.leases import LeaseStore
    from cronctl.store.pg.connect import StoreUrl


@dataclass
class Context:
    paths: Paths
    store: Store
    audit: AuditLog
    clock: Clock = field(default_factory=SystemClock)
    # The backend of `leases`; None: the JSON store over `store`, made on first use.
    lease_store: LeaseStore | None = None
    # --store / $CRONCTL_STORE: a PostgreSQL database (store/backends.py); None: the JSON store.
    store_url: StoreUrl | None = None
    pg: PgSession | None = None  # its connection, opened on first use
    # The backend of `definitions`; None: made on first use, over `store` or `pg`.
    definitions_store: Definitions | None = None

    @property
    def leases(self) -> LeaseStore:
        """The run path's writes and the run read views (store/leases.py).

        Built lazily: the `status --json` fast path opens a Context and never needs it,
        and importing the lease machinery would cost it about 20 ms.
        """
        if self.lease_store is None and self.pg is not None:
            from cronctl.store.backends import open_pg_lease_store

            self.lease_store = open_pg_lease_store(self.pg, self.paths, self.clock)
        if self.lease_store is None:
            from cronctl.store.leases import JsonLeaseStore

            self.lease_store = JsonLeaseStore(self.store, self.audit, self.paths)
        return self.lease_store

    @property
    def definitions(self) -> Definitions:
        """What defines and edits jobs writes through (store/definitions.py), made on first use."""
        if self.definitions_store is None and self.pg is not None:
            from cronctl.store.backends import open_pg_definitions

            self.definitions_store = open_pg_definitions(self.pg, self.audit)
        if self.definitions_store is None:
            from cronctl.store.definitions import JsonDefinitions

            self.definitions_store = JsonDefinitions(self.store, self.audit)
        return self.definitions_store

    @classmethod
    def open(cls, home: Path, clock: Clock | None = None, lock_timeout: float = 30.0,
             store_url: StoreUrl | None = None) -> Context:
        """`store_url` selects PostgreSQL: its rows are the document; the home keeps this host's run logs."""
        paths = open_home(home)
        clock = clock or SystemClock()
        if store_url is not None:
            from cronctl.store.backends import PgAuditLog, PgSession, open_pg_document_store

            pg = PgSession(store_url)
            return cls(paths=paths, store=open_pg_document_store(pg, paths), audit=PgAuditLog(pg, paths.audit, clock),
                       clock=clock, store_url=store_url, pg=pg)
        return cls(
            paths=paths,
            store=Store(paths, lock_timeout=lock_timeout),
            audit=AuditLog(paths.audit, clock=clock),
            clock=clock,
        )

    @property
    def on_postgres(self) -> bool:
        return self.store_url is not None
