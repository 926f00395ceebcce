"""The cluster operations of a store that loops on many hosts share (SPEC §9): `Cluster`.

A backend offers them as `Backend.cluster` (store/backend.py); only PostgreSQL has them
(`PgCluster`, store/pg/cluster.py), the JSON store's is None. Above store/, the loop's
membership (loop/cluster.py), its start and stop (loop/cluster_life.py), the forgetting of
silent loops (loop/forgetting.py) and the commands that meet the loops (ops/cluster.py,
`status`, `doctor`, `store import-json`, `store forget-host`) reach the database through
this protocol alone: no SQL, no connection, no driver above store/.

The rows these operations speak in are re-exported here, under the names the callers use,
with the failures that mean "the database is out of reach" (`OUTAGE_ERRORS`): importing
this module imports the PostgreSQL side, so only a loop or a command on that store does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import psycopg

from cronctl.models import AuditEvent
from cronctl.store.pg.connect import StoreUnreachableError as StoreUnreachableError
from cronctl.store.pg.dbclock import SKEW_AUDIT_THRESHOLD_S as SKEW_AUDIT_THRESHOLD_S
from cronctl.store.pg.deadline import StoreDeadlineError as StoreDeadlineError
from cronctl.store.pg.docstore import PgHealth as Health
from cronctl.store.pg.forget import Forgotten as Forgotten
from cronctl.store.pg.forget import HostForgotten as HostForgotten
from cronctl.store.pg.importer import Imported as Imported
from cronctl.store.pg.loops import Beat as Beat
from cronctl.store.pg.loops import LoopIdentity as LoopIdentity
from cronctl.store.pg.loops import LoopRow as LoopRow
from cronctl.store.pg.requests import FORCE_RUN as FORCE_RUN
from cronctl.store.pg.requests import Request as Request
from cronctl.store.pg.stuck import EndedSession as EndedSession

__all__ = ["Beat", "CONNECTION_LOST", "Cluster", "EndedSession", "FORCE_RUN", "Forgotten", "Health",
           "HostForgotten", "Imported", "LoopIdentity", "LoopRow", "OUTAGE_ERRORS", "Request",
           "SKEW_AUDIT_THRESHOLD_S", "StoreDeadlineError", "StoreUnreachableError"]

# A round trip past its deadline (store/pg/deadline.py) is an outage like a refused connection.
OUTAGE_ERRORS: tuple[type[Exception], ...] = (psycopg.Error, StoreUnreachableError, StoreDeadlineError)
# What a connection lost mid-query raises (AdminShutdown, a closed socket, an aborted pipeline):
# an outage, not a bug. Schema and permission errors are not among them.
CONNECTION_LOST: tuple[type[Exception], ...] = (psycopg.OperationalError, StoreDeadlineError)


class Cluster(Protocol):
    """What loops and commands on several hosts do through their shared store."""

    host_id: str  # this host, as the store's rows name it

    @property
    def shown(self) -> str:
        """The store's URL, password redacted."""

    # --- what commands ask (ops/) ---------------------------------------------------------------

    def loops(self) -> list[LoopRow]: ...

    def db_now(self) -> datetime: ...

    def health(self) -> Health: ...

    def host_of_run(self, run_id: str) -> str | None: ...

    def request_force(self, job: str, requested_by: str) -> int: ...

    def request_kill(self, job: str, run_id: str, requested_by: str) -> int: ...

    def outcome_of(self, request_id: int) -> tuple[bool, str | None]: ...

    def withdraw(self, request_id: int) -> bool: ...

    def forget_host(self, host: str, requested_by: str) -> HostForgotten: ...

    def import_document(self, doc: dict[str, Any], records: Sequence[dict[str, Any]], replace: bool) -> Imported: ...

    # --- what a loop does (loop/) ---------------------------------------------------------------

    def deadline_for(self, lease_s: float) -> float: ...

    def set_deadline(self, seconds: float) -> None: ...

    def register(self, me: LoopIdentity, home: str) -> None: ...

    def mark_stopped(self, me: LoopIdentity) -> None: ...

    def beat(self, me: LoopIdentity, skew_s: float, margin_s: float, home: str) -> Beat: ...

    def next_instants(self) -> tuple[datetime | None, datetime | None, int]: ...

    def job_count(self) -> int: ...

    def audit(self, me: LoopIdentity, event: AuditEvent, **details: Any) -> None: ...

    def end_stuck_sessions(self, me: LoopIdentity, after_s: float) -> list[EndedSession]: ...

    def take_requests(self, host_id: str, loop_id: UUID) -> list[Request]: ...

    def answer(self, request_id: int, outcome: str) -> None: ...

    def forget_dead_here(self, me: LoopIdentity, alive: Callable[[int, float], bool]) -> list[Forgotten]: ...

    def forget_silent(self, after_s: float, me: LoopIdentity) -> list[Forgotten]: ...

    def take_over_held(self) -> list[str]:
        """The healer: claims held ahead by loops gone silent, their slots due again here; their run ids."""
