"""The seam between cronctl and its store: which store an invocation uses, and `Backend`,
the one object it reaches that store through.

`--store URL` (or $CRONCTL_STORE) names a PostgreSQL database; neither means the JSON
store of the home, as always. The URL's password is shown nowhere (`StoreUrl`).
`open_backend` chooses once; `Context.backend` holds what it chose, and nothing above
store/ asks which store it is: it asks the backend for its parts (`leases`, `definitions`,
`audit`, the read-only `document`), for what a read command needs (`has_job`, `job_views`,
`overview`, `find_record`), and for `cluster`, the operations loops on several hosts share,
which only PostgreSQL has (None on the JSON store: the capability is its presence).

- `JsonBackend` (here): the home's `jobs.json` and `audit.jsonl`; its lease store and
  definitions are made on first use (the `status --json` fast path never needs them).
- `PgBackend` (store/pg/backend.py): one connection for all of them, and `PgCluster`.

A third store would be one more implementation under store/ and nothing above it would
change; tests/unit/test_layers.py keeps `store.pg` and `psycopg` out of every module above store/.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from cronctl.clock import Clock
from cronctl.errors import CronctlError
from cronctl.paths import Paths
from cronctl.store.audit import AuditLog
from cronctl.store.jsonstore import Store

if TYPE_CHECKING:
    from datetime import datetime

    from cronctl.jobs.state import JobView
    from cronctl.store.cluster import Cluster
    from cronctl.store.definitions import Definitions
    from cronctl.store.leases import LeaseStore
    from cronctl.store.pg.connect import StoreUrl as StoreUrl

STORE_ENV = "CRONCTL_STORE"


DRIVER_HINT = "install the PostgreSQL driver: pip install 'cronctl[postgres]'"
_warned_about_argv = False


def selected_url(option: str | None, env: Mapping[str, str]) -> StoreUrl | None:
    """`--store` wins over $CRONCTL_STORE; None: the JSON store of the home."""
    if not (option or env.get(STORE_ENV)):
        return None  # the common case imports nothing of PostgreSQL
    try:
        from cronctl.store.pg.connect import store_url_from
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "psycopg":
            raise
        raise CronctlError(f"--store: {DRIVER_HINT}") from None
    url = store_url_from(option, env)
    if option and url is not None and url.password:
        warn_password_in_argv()
    return url


def warn_password_in_argv() -> None:
    """Once per process: a password given with --store is in the command line, which `ps`
    shows every user of the host."""
    global _warned_about_argv
    if _warned_about_argv:
        return
    _warned_about_argv = True
    print(f"cronctl: warning: --store carries a password, which any user of this host sees with 'ps'; "
          f"put the URL in ${STORE_ENV} or the password in ~/.pgpass instead", file=sys.stderr)


class Backend(Protocol):
    """One store, whole (see the module doc)."""

    @property
    def url(self) -> StoreUrl | None:
        """The PostgreSQL store's URL (`shown` redacts its password); None: the JSON store."""

    @property
    def document(self) -> Store:
        """The store as one document (`read`, `read_if_changed`), read-only on PostgreSQL."""

    @property
    def audit(self) -> AuditLog: ...

    @property
    def leases(self) -> LeaseStore:
        """The run path's writes and the run read views (store/leases.py)."""

    @property
    def definitions(self) -> Definitions:
        """What defines and edits jobs writes through (store/definitions.py)."""

    @property
    def cluster(self) -> Cluster | None:
        """The operations of loops on several hosts (store/cluster.py); None on the JSON store."""

    @property
    def records_in_home(self) -> bool:
        """True: run records and audit rows are files of the home, read as they grow;
        False: the database's rows, read whole."""

    def has_job(self, name: str) -> bool: ...

    def job_views(self, prefix: str | None = None) -> list[JobView]:
        """Every job with its state, by name (`list`); only those whose name starts with `prefix`
        when given (on PostgreSQL only those rows are read)."""

    def job_view(self, name: str) -> JobView:
        """One job; JobNotFoundError names it when there is none."""

    def overview(self, stale_at: datetime | None = None) -> tuple[list[JobView], dict[str, int], dict[str, Any],
                                                                  bool | None]:
        """Every job's view, the counters, the chains and (None: judge by the jobs) whether any job is
        kept, in one read where the store allows (`status`). With `stale_at` a store may leave out
        the jobs that cannot be stale then (PostgreSQL reads only those rows)."""

    def find_record(self, job: str, run_id: str) -> dict[str, Any] | None:
        """A run's history record; None while it has none."""

    def ensure_readable(self) -> None:
        """Fail now (StoreError naming the store) when the store cannot be read."""


class JsonBackend:
    """The JSON store of a home: `jobs.json` under its flock, `audit.jsonl`, the history files."""

    url: StoreUrl | None = None
    cluster: Cluster | None = None  # one host: no cluster
    records_in_home = True

    def __init__(self, paths: Paths, document: Store, audit: AuditLog) -> None:
        self.paths = paths
        self.document = document
        self.audit = audit
        self._leases: LeaseStore | None = None
        self._definitions: Definitions | None = None

    @property
    def leases(self) -> LeaseStore:
        """Made on first use: importing the lease machinery costs the `status --json` fast
        path about 20 ms it never needs."""
        if self._leases is None:
            from cronctl.store.leases import JsonLeaseStore

            self._leases = JsonLeaseStore(self.document, self.audit, self.paths)
        return self._leases

    @property
    def definitions(self) -> Definitions:
        if self._definitions is None:
            from cronctl.store.definitions import JsonDefinitions

            self._definitions = JsonDefinitions(self.document, self.audit)
        return self._definitions

    def has_job(self, name: str) -> bool:
        return name in self.document.read()["jobs"]

    def job_views(self, prefix: str | None = None) -> list[JobView]:
        """One document read, the views the JSON lease store builds, without importing it
        (about 12 ms of a 100 ms `list`); the lease store's once it is open."""
        if self._leases is not None:
            return self._leases.jobs(prefix)
        from cronctl.jobs.state import JobView

        jobs = self.document.read()["jobs"]
        return [JobView.from_entry(jobs[name]) for name in sorted(jobs) if name.startswith(prefix or "")]

    def job_view(self, name: str) -> JobView:
        if self._leases is not None:
            return self._leases.job(name)
        from cronctl.jobs.state import JobView, get_entry

        return JobView.from_entry(get_entry(self.document.read(), name))

    def overview(self, stale_at: datetime | None = None) -> tuple[list[JobView], dict[str, int], dict[str, Any],
                                                                  bool | None]:
        """The document itself, not the lease store: one read gives jobs, counters and chains
        (every job, whatever `stale_at`)."""
        from cronctl.jobs.state import JobView

        doc = self.document.read()
        views = [JobView.from_entry(doc["jobs"][name]) for name in sorted(doc["jobs"])]
        return views, dict(doc.get("counters") or {}), doc.get("chains") or {}, None

    def find_record(self, job: str, run_id: str) -> dict[str, Any] | None:
        from cronctl.store import history

        return history.find_record(self.paths, job, run_id)

    def ensure_readable(self) -> None:
        """A corrupt store fails (naming the file) even for a command that would not read it."""
        self.document.read()


def open_backend(paths: Paths, clock: Clock, url: StoreUrl | None = None, lock_timeout: float = 30.0) -> Backend:
    """`url`: the PostgreSQL store (its rows are the jobs; the home keeps this host's run logs);
    None: the JSON store of the home."""
    if url is not None:
        from cronctl.store.pg.backend import PgBackend

        return PgBackend(paths, clock, url)
    return JsonBackend(paths, Store(paths, lock_timeout=lock_timeout), AuditLog(paths.audit, clock=clock))
