"""`Backend` on PostgreSQL (store/backend.py): every part over the invocation's one connection.

The run path and the read views go through `PgLeaseStore`, defining and editing jobs through
`PgDefinitions` (definitions.py), what still reads one document (status, doctor, metrics)
through the read-only `PgDocStore` (docstore.py), the audit log is the database's
(`PgAuditLog`, auditlog.py), and the loops of every host meet through `PgCluster`
(cluster.py), all over one `PgSession`. The home keeps this host's files only (run logs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cronctl.clock import Clock
from cronctl.paths import Paths
from cronctl.store.pg.auditlog import PgAuditLog
from cronctl.store.pg.connect import StoreUrl
from cronctl.store.pg.docstore import PgDocStore
from cronctl.store.pg.identity import host_id
from cronctl.store.pg.session import PgSession

if TYPE_CHECKING:
    from datetime import datetime

    from cronctl.jobs.state import JobView
    from cronctl.store.pg.cluster import PgCluster
    from cronctl.store.pg.definitions import PgDefinitions
    from cronctl.store.pg.leases import PgLeaseStore


class PgBackend:
    """The PostgreSQL store of `url` (see the module doc). Connects on first use."""

    records_in_home = False  # records and audit rows are the database's, read whole

    def __init__(self, paths: Paths, clock: Clock, url: StoreUrl) -> None:
        self.url: StoreUrl | None = url
        self.paths, self.clock = paths, clock
        self.session = PgSession(url)
        self.host_id = host_id()
        self.document = PgDocStore(paths, self.session, self.host_id)
        self.audit = PgAuditLog(self.session, paths.audit, clock)
        self._leases: PgLeaseStore | None = None
        self._definitions: PgDefinitions | None = None
        self._cluster: PgCluster | None = None

    @property
    def leases(self) -> PgLeaseStore:
        """The lease store of this invocation, judging by the database clock."""
        if self._leases is None:
            from cronctl.store.pg.leases import PgLeaseStore

            self._leases = PgLeaseStore(self.session.conn(), self.host_id, clock=self.clock, paths=self.paths,
                                        lock=self.session.lock, connect_again=self.session.conn)
        return self._leases

    @property
    def definitions(self) -> PgDefinitions:
        """The definitions of the job rows; their audit rows go with each write."""
        if self._definitions is None:
            from cronctl.store.pg.definitions import PgDefinitions

            self._definitions = PgDefinitions(self.session, self.audit)
        return self._definitions

    @property
    def cluster(self) -> PgCluster:
        if self._cluster is None:
            from cronctl.store.pg.cluster import PgCluster

            self._cluster = PgCluster(lambda: self.leases, self.host_id, url=self.session.url,
                                      document=self.document)
        return self._cluster

    def has_job(self, name: str) -> bool:
        return self.leases.has_job(name)

    def job_views(self, prefix: str | None = None) -> list[JobView]:
        return self.leases.jobs(prefix)

    def job_view(self, name: str) -> JobView:
        return self.leases.job(name)

    def overview(self, stale_at: datetime | None = None) -> tuple[list[JobView], dict[str, int], dict[str, Any],
                                                                  bool | None]:
        """The jobs' views and the counters from the lease store, the chains from their rows; with
        `stale_at`, only the jobs that may be stale then (and whether any job is kept)."""
        leases = self.leases
        views, any_jobs = leases.may_be_stale(stale_at) if stale_at is not None else (leases.jobs(), None)
        return views, leases.counters(), self.document.chains(), any_jobs

    def find_record(self, job: str, run_id: str) -> dict[str, Any] | None:
        """A run's record among the job's newest runs rows."""
        return next((record for record in reversed(self.leases.history(job, 20))
                     if record.get("run_id") == run_id), None)

    def ensure_readable(self) -> None:
        """Connects and checks the schema: an unreachable database fails here."""
        _ = self.leases
