"""Which store a cronctl invocation uses: the JSON document of its home, or PostgreSQL.

`--store URL` (or $CRONCTL_STORE) names a PostgreSQL database; neither means the JSON
store of the home, as always. The URL's password is shown nowhere (`StoreUrl`).

With PostgreSQL selected, the run path and the read views go through `PgLeaseStore`.
What still reads or writes the home's JSON document directly (defining and editing
jobs, doctor, the loop) is refused with a message instead of silently using another
store than the one asked for: `RefusingStore` stands in for the document.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from cronctl.clock import Clock
from cronctl.errors import StoreError
from cronctl.paths import Paths
from cronctl.store.jsonstore import Document, Store

if TYPE_CHECKING:
    from cronctl.store.pg.connect import StoreUrl
    from cronctl.store.pg.leases import PgLeaseStore

STORE_ENV = "CRONCTL_STORE"


def selected_url(option: str | None, env: Mapping[str, str]) -> StoreUrl | None:
    """`--store` wins over $CRONCTL_STORE; None: the JSON store of the home."""
    if not (option or env.get(STORE_ENV)):
        return None  # the common case imports nothing of PostgreSQL
    from cronctl.store.pg.connect import store_url_from

    return store_url_from(option, env)


def open_pg_lease_store(url: StoreUrl, paths: Paths, clock: Clock) -> PgLeaseStore:
    """Connect, bring the schema up to date, and judge by the database clock."""
    from cronctl.store.pg.connect import connect
    from cronctl.store.pg.identity import host_id
    from cronctl.store.pg.leases import PgLeaseStore
    from cronctl.store.pg.schema import ensure_schema

    conn = connect(url)
    ensure_schema(conn)
    return PgLeaseStore(conn, host_id(), clock=clock, paths=paths)


class RefusingStore(Store):
    """The home's JSON document, refused: this invocation's store is PostgreSQL."""

    def __init__(self, paths: Paths, url: StoreUrl) -> None:
        super().__init__(paths)
        self.url = url

    def read(self) -> Document:
        self._refuse()

    def read_if_changed(self, since: Any) -> NoReturn:
        self._refuse()

    @contextmanager
    def transaction(self) -> Iterator[Document]:
        self._refuse()
        yield  # pragma: no cover - never reached

    def _refuse(self) -> NoReturn:
        raise StoreError(f"this command does not work on the PostgreSQL store ({self.url.shown}) yet; "
                         "run it without --store and $CRONCTL_STORE to use the JSON store of the home "
                         "(list, show, status and history read PostgreSQL; "
                         "'cronctl store import-json' fills it)")
