"""The short transaction every lease operation runs in, with its limits set inside it.

A loop stopped mid-transaction (SIGSTOP, a partition) must not hold job or run rows for
long: PostgreSQL ends its session after `idle_s` idle inside the transaction, which
frees its row locks (MULTIHOST §4). `lock_s` and `statement_s` bound how long a lease
operation waits or works. The limits are set with `SET LOCAL`: they end with the
transaction, so nothing stays on a session that a transaction-mode pooler hands to someone
else. The three go in one message (the simple query protocol: no parameters, so nothing
to plan; a `SELECT set_config(...)` was planned at every transaction, 7 us of a run's 1 ms
of server time each, issue 21); their values are this module's numbers, never user text.

The idle timer runs only after the server answered a statement up to its Sync: between the
messages of a pipeline (psycopg's `executemany`), inside a half-received message or a COPY,
PostgreSQL times nothing, and a network that stalls there keeps the locks for as long as it
stalls. So a lease transaction sends single statements only (document.py, audit.py: arrays,
not executemany), and a session stuck so anyway is ended by the loops' healer (stuck.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cronctl.store.pg.connect import Connection


@dataclass(frozen=True)
class Limits:
    idle_s: float = 5.0
    lock_s: float = 5.0
    statement_s: float = 5.0


LEASE_LIMITS = Limits()

_SETTINGS = ("idle_in_transaction_session_timeout", "lock_timeout", "statement_timeout")


def set_limits(limits: Limits) -> str:
    """The `SET LOCAL` statements of `limits`, one string (integers of milliseconds)."""
    values = (limits.idle_s, limits.lock_s, limits.statement_s)
    return "; ".join(f"SET LOCAL {name} = {int(round(seconds * 1000))}" for name, seconds in zip(_SETTINGS, values,
                                                                                               strict=True))


@contextmanager
def short_transaction(conn: Connection, limits: Limits = LEASE_LIMITS) -> Iterator[None]:
    """`conn.transaction()` with `limits` in force for it alone (one extra round trip)."""
    with conn.transaction():
        conn.execute(set_limits(limits))
        yield
