"""The short transaction every lease operation runs in, with its limits set inside it.

A loop stopped mid-transaction (SIGSTOP, a partition) must not hold job or run rows for
long: PostgreSQL ends its session after `idle_s` idle inside the transaction, which
frees its row locks (MULTIHOST §4). `lock_s` and `statement_s` bound how long a lease
operation waits or works. The limits are set with `set_config(..., is_local => true)`,
i.e. `SET LOCAL`: they end with the transaction, so nothing stays on a session that a
transaction-mode pooler hands to someone else.

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

_SET_LIMITS = """SELECT set_config('idle_in_transaction_session_timeout', %s, true),
                        set_config('lock_timeout', %s, true),
                        set_config('statement_timeout', %s, true)"""


@contextmanager
def short_transaction(conn: Connection, limits: Limits = LEASE_LIMITS) -> Iterator[None]:
    """`conn.transaction()` with `limits` in force for it alone (one extra round trip)."""
    with conn.transaction():
        conn.execute(_SET_LIMITS, tuple(f"{round(seconds * 1000)}ms" for seconds in
                                        (limits.idle_s, limits.lock_s, limits.statement_s)))
        yield
