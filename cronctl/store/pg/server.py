"""What the store requires of the PostgreSQL server before a loop trusts it (MULTIHOST §5).

With `synchronous_commit=off` a COMMIT can be acknowledged and then lost in a crash: a
claim the loop acted on (its child started) would vanish, and the slot could fire again
on another host. The loop refuses such a server instead of weakening "at most once".
"""

from __future__ import annotations

from cronctl.errors import StoreError
from cronctl.store.pg.connect import Connection


class UnsafeServerError(StoreError):
    pass


def check_durability(conn: Connection) -> None:
    """Raise UnsafeServerError when commits this connection makes may be lost after being acknowledged."""
    with conn.transaction():
        row = conn.execute("SELECT current_setting('synchronous_commit')").fetchone()
    setting = str(row[0]) if row else "?"
    if setting == "off":
        raise UnsafeServerError(
            "the PostgreSQL store runs with synchronous_commit=off, so an acknowledged claim can be lost in a crash "
            "and its slot fire twice: set synchronous_commit to on (or local) for cronctl's role")
