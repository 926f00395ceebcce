"""`Cluster` on PostgreSQL (store/cluster.py): the loops' rows, the requests, forgetting, import.

Every operation runs on the invocation's one connection, the lease store's, holding its lock
for the whole transaction as every other user of that connection does; the SQL itself is in
loops.py, requests.py, forget.py, stuck.py and importer.py, beside the tables it reads.
`store import-json` alone opens a connection of its own, as it always did: one long
transaction that must not hold the invocation's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from cronctl.models import AuditEvent
from cronctl.store.pg import forget, loops, requests
from cronctl.store.pg.connect import Connection, StoreUrl, connect
from cronctl.store.pg.deadline import deadline_for
from cronctl.store.pg.loops import Beat, LoopIdentity, LoopRow
from cronctl.store.pg.stuck import EndedSession, end_stuck_sessions

if TYPE_CHECKING:
    from cronctl.store.pg.docstore import PgDocStore, PgHealth
    from cronctl.store.pg.importer import Imported
    from cronctl.store.pg.leases import PgLeaseStore


class PgCluster:
    """The cluster operations over the lease store `leases()` gives, made when first needed:
    holding a `PgCluster` connects to nothing (`ctx.cluster is not None` is a cheap question)."""

    def __init__(self, leases: Callable[[], PgLeaseStore], host_id: str, url: StoreUrl | None = None,
                 document: PgDocStore | None = None) -> None:
        self._leases = leases
        self.host_id = host_id
        self.url = url
        self.document = document  # the read-only document view: health and the database clock

    @classmethod
    def of(cls, leases: PgLeaseStore) -> PgCluster:
        """Over one lease store (a loop's tests build their member so)."""
        return cls(lambda: leases, leases.host_id)

    @property
    def shown(self) -> str:
        return self.url.shown if self.url is not None else "the PostgreSQL store"

    def _run(self, query: Callable[[Connection], Any]) -> Any:
        """`query` on the connection, holding its lock."""
        leases = self._leases()
        with leases.lock:
            return query(leases.conn)

    # --- what commands ask -------------------------------------------------------------------

    def loops(self) -> list[LoopRow]:
        """Every loop the store remembers, newest first."""
        found: list[LoopRow] = self._run(loops.loops)
        return found

    def db_now(self) -> datetime:
        if self.document is not None:
            return self.document.db_now()
        return self._leases().db_now()

    def health(self) -> PgHealth:
        assert self.document is not None, "health is read through the document view"
        return self.document.health()

    def host_of_run(self, run_id: str) -> str | None:
        """The host whose loop claimed the run; None when no row has it."""
        def query(conn: Connection) -> str | None:
            with conn.transaction():
                row = conn.execute("SELECT host_id FROM cronctl_runs WHERE run_id = %s", (run_id,)).fetchone()
            return row[0] if row else None

        host: str | None = self._run(query)
        return host

    def request_force(self, job: str, requested_by: str) -> int:
        request_id: int = self._run(lambda conn: requests.request_force(conn, job, requested_by))
        return request_id

    def request_kill(self, job: str, run_id: str, requested_by: str) -> int:
        request_id: int = self._run(lambda conn: requests.request_kill(conn, job, run_id, requested_by))
        return request_id

    def outcome_of(self, request_id: int) -> tuple[bool, str | None]:
        outcome: tuple[bool, str | None] = self._run(lambda conn: requests.outcome_of(conn, request_id))
        return outcome

    def withdraw(self, request_id: int) -> bool:
        return bool(self._run(lambda conn: requests.withdraw(conn, request_id)))

    def forget_host(self, host: str, requested_by: str) -> forget.HostForgotten:
        gone: forget.HostForgotten = self._run(lambda conn: forget.forget_host(conn, host, requested_by))
        return gone

    def import_document(self, doc: dict[str, Any], records: Sequence[dict[str, Any]], replace: bool) -> Imported:
        """`store import-json`: in one transaction on a connection of its own; a lost connection or a
        silent database is told as `apply` tells it, never as an internal error."""
        from cronctl.store.pg.importer import import_document
        from cronctl.store.pg.schema import ensure_schema
        from cronctl.store.pg.writes import told_failures

        assert self.url is not None, "an import names the store it writes to"
        with told_failures(self.url) as stage, connect(self.url) as conn:
            ensure_schema(conn)
            return import_document(conn, doc, records, self.host_id, replace, stage)

    # --- what a loop does ---------------------------------------------------------------------

    def deadline_for(self, lease_s: float) -> float:
        """SPEC §9: a round trip's deadline, 5 s and at most a quarter of the lease."""
        return deadline_for(lease_s)

    def set_deadline(self, seconds: float) -> None:
        self._leases().set_deadline(seconds)

    def register(self, me: LoopIdentity, home: str) -> None:
        self._run(lambda conn: loops.register(conn, me, home))

    def mark_stopped(self, me: LoopIdentity) -> None:
        self._run(lambda conn: loops.mark_stopped(conn, me))

    def beat(self, me: LoopIdentity, skew_s: float, margin_s: float, home: str) -> Beat:
        """One tick's query; a loop whose row is gone (a restored database) registers again."""
        def query(conn: Connection) -> Beat:
            beat = loops.beat(conn, me, skew_s, margin_s)
            if not beat.registered:
                loops.register(conn, me, home)
            return beat

        beat: Beat = self._run(query)
        return beat

    def next_instants(self) -> tuple[datetime | None, datetime | None, int]:
        instants: tuple[datetime | None, datetime | None, int] = self._run(loops.next_instants)
        return instants

    def job_count(self) -> int:
        count: int = self._run(loops.job_count)
        return count

    def audit(self, me: LoopIdentity, event: AuditEvent, **details: Any) -> None:
        self._run(lambda conn: loops.audit(conn, me, event, **details))

    def end_stuck_sessions(self, me: LoopIdentity, after_s: float) -> list[EndedSession]:
        ended: list[EndedSession] = self._run(lambda conn: end_stuck_sessions(conn, me, after_s))
        return ended

    def take_requests(self, host_id: str, loop_id: UUID) -> list[requests.Request]:
        taken: list[requests.Request] = self._run(lambda conn: requests.take(conn, host_id, loop_id))
        return taken

    def answer(self, request_id: int, outcome: str) -> None:
        self._run(lambda conn: requests.answer(conn, request_id, outcome))

    def forget_dead_here(self, me: LoopIdentity, alive: Callable[[int, float], bool]) -> list[forget.Forgotten]:
        gone: list[forget.Forgotten] = self._run(lambda conn: forget.forget_dead_here(conn, me, alive))
        return gone

    def forget_silent(self, after_s: float, me: LoopIdentity) -> list[forget.Forgotten]:
        gone: list[forget.Forgotten] = self._run(
            lambda conn: forget.forget_silent(conn, after_s, me.loop_id, me.host_id))
        return gone

    # --- the healer -----------------------------------------------------------------------------

    def take_over_held(self) -> list[str]:
        return self._leases().take_over_held()
