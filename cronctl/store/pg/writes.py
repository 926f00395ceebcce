"""What a command's write transaction says when the database fails it, and a lock wait in short round trips.

Every round trip has a deadline (deadline.py), so a write that must wait for another
writer's advisory lock does not wait inside one statement: it asks with
`pg_try_advisory_xact_lock` again and again, each ask a short round trip, for as long as
the writer may wait (`budget_s`).

A failed write is told truthfully: "nothing was changed" only when the failure came
before COMMIT was sent, or when the server refused the COMMIT; a lost connection or a
deadline during COMMIT leaves the outcome unknown, and the message says how to look.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from cronctl.errors import LockTimeoutError, StoreError
from cronctl.store.pg.connect import Connection, StoreUrl
from cronctl.store.pg.deadline import StoreDeadlineError

_FIRST_WAIT_S = 0.01
_MAX_WAIT_S = 0.25


def take_xact_lock(conn: Connection, key: int, budget_s: float, what: str, shared: bool = False) -> None:
    """The transaction-scoped advisory lock `key`, waited for in short asks up to `budget_s`;
    `shared`: held with other shared holders, excluded by an exclusive one."""
    give_up = time.monotonic() + budget_s
    wait = _FIRST_WAIT_S
    ask = "SELECT pg_try_advisory_xact_lock_shared(%s)" if shared else "SELECT pg_try_advisory_xact_lock(%s)"
    while True:
        row = conn.execute(ask, (key,)).fetchone()
        if row is not None and row[0]:
            return
        if time.monotonic() + wait > give_up:
            raise LockTimeoutError(f"{what} waited {budget_s:g} s for another writer of the PostgreSQL store; "
                                   "nothing was changed: try again")
        time.sleep(wait)
        wait = min(_MAX_WAIT_S, wait * 2)


@dataclass
class WriteStage:
    """Where a write transaction is: `committing` once every statement ran and COMMIT is next."""

    committing: bool = False


@contextmanager
def told_failures(url: StoreUrl, doing: str = "cannot write") -> Iterator[WriteStage]:
    """Database failures of the block as one clear StoreError (see the module doc)."""
    stage = WriteStage()
    try:
        yield stage
    except StoreDeadlineError as exc:
        raise StoreError(f"the PostgreSQL store did not answer within {exc.seconds:g} s; "
                         f"{_outcome(stage, unknown=True)} ({url.shown})") from None
    except psycopg.Error as exc:
        unknown = isinstance(exc, psycopg.OperationalError)
        raise StoreError(f"{doing} the PostgreSQL store {url.shown}: {url.redact(str(exc).strip())}; "
                         f"{_outcome(stage, unknown)}") from None


def _outcome(stage: WriteStage, unknown: bool) -> str:
    if stage.committing and unknown:
        return ("the connection was lost while committing, so the change may or may not have been made: "
                "look with 'cronctl list' before trying again")
    return "nothing was changed"
