"""The JSON store's document API (`Store`: read, read_if_changed) on PostgreSQL, read-only.

What still reads the store as one document (status, metrics, doctor, the healer, the
loop's due index over `read_if_changed`) gets it assembled from the rows, in the JSON
store's shape (`store/schema.py`):

- `jobs`: {name: {**spec, "state": state}}, each job's live claims from its runs rows
  (`document.load_jobs`, as the lease store reads them);
- `counters` and `metrics`: every host's rows of `cronctl_meta` added up;
- `version` (the document's shape, 1 as the JSON store's), `rev` 0 (the database keeps no
  revision of a whole document: `read_if_changed` has a signature instead) and `chains`:
  the rows of `cronctl_chains` (the open chains and the last ended ones, chain_rows.py).

Nothing writes through this document: definitions go through `PgDefinitions`
(store/pg/definitions.py), which locks only the rows it names; the run path through
`PgLeaseStore`. `transaction()` refuses, so a caller that still wants the JSON store's
write path fails in words instead of writing a `jobs.json` nobody reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NoReturn

import psycopg

from cronctl.errors import StoreError
from cronctl.paths import Paths
from cronctl.store.codec import CURRENT_VERSION, Document
from cronctl.store.jsonstore import Store
from cronctl.store.pg.chain_rows import read_chains
from cronctl.store.pg.connect import Connection, StoreUrl
from cronctl.store.pg.definitions import Session
from cronctl.store.pg.document import META_KEYS, load_jobs

# One statement, whatever the job count: the jobs' count and the sum of their change
# instants (every write sets updated_at anew, so any change moves the sum; a max would
# miss two writers committing out of order), the newest fence (every claim) and the
# counters' rows (a handful), and the open chains (a forced chain is a row of its own).
_SIGNATURE = """SELECT j.n, j.stamp, (SELECT max(fence) FROM cronctl_runs),
                       (SELECT md5(coalesce(string_agg(key || value::text, ',' ORDER BY key), ''))
                          FROM cronctl_meta)
                       || (SELECT md5(coalesce(string_agg(chain_id || chain::text, ',' ORDER BY chain_id), ''))
                             FROM cronctl_chains WHERE ended_at IS NULL)
                  FROM (SELECT count(*) AS n, coalesce(sum(extract(epoch FROM updated_at)), 0) AS stamp
                          FROM cronctl_jobs) AS j"""


@dataclass(frozen=True)
class PgSignature:
    """What `read_if_changed` compares: equal signatures, the same document."""

    jobs: int
    stamp: Decimal
    fence: int | None
    meta: str


@dataclass(frozen=True)
class LoopRow:
    """One loop of the database as doctor shows it."""

    host: str
    pid: int
    heartbeat_age_s: float  # on the database clock
    stopped: bool

    @property
    def state(self) -> str:
        """As `status` judges it (store/pg/loops.py): doctor and status --stale agree."""
        from cronctl.store.pg.loops import UNREACHABLE_AFTER_S

        if self.stopped:
            return "stopped"
        return "ok" if self.heartbeat_age_s <= UNREACHABLE_AFTER_S else "unreachable"


@dataclass(frozen=True)
class PgHealth:
    """What doctor reads of the database besides the document."""

    schema_version: int
    db_now: datetime
    loops: list[LoopRow]
    audit_bytes: int


class PgDocStore(Store):
    """`Store` over the PostgreSQL store's rows (see the module doc)."""

    def __init__(self, paths: Paths, session: Session, host_id: str) -> None:
        super().__init__(paths)
        self.session = session
        self.host_id = host_id

    @property
    def url(self) -> StoreUrl:
        return self.session.url

    @property
    def last_written_rev(self) -> int | None:
        return None  # no document revision here (see the module doc)

    # --- reading ----------------------------------------------------------------------------

    def read(self) -> Document:
        with self._snapshot() as conn:
            return self._assemble(load_jobs(conn, "true", {}, None), summed_meta(conn), read_chains(conn))

    # The signature is opaque to every caller (DueIndex keeps it as Any and hands it back),
    # so the JSON store's StoreSignature type does not bind this one.
    def read_if_changed(self, since: Any) -> tuple[Document | None, PgSignature]:  # type: ignore[override]
        """(None, signature) when nothing changed since `since`: one small query then."""
        with self._snapshot() as conn:
            row = conn.execute(_SIGNATURE).fetchone()
            assert row is not None
            signature = PgSignature(int(row[0]), Decimal(row[1]), row[2], str(row[3]))
            if signature == since:
                return None, signature
            return self._assemble(load_jobs(conn, "true", {}, None), summed_meta(conn), read_chains(conn)), signature

    def chain_free(self) -> bool:
        """Whether no job runs after another (the index on `after`: no job read)."""
        with self._snapshot() as conn:
            return conn.execute("SELECT 1 FROM cronctl_jobs WHERE spec ? 'after' LIMIT 1").fetchone() is None

    def chains(self) -> dict[str, Any]:
        """The chains kept (the document's `chains`), without reading the jobs."""
        with self._snapshot() as conn:
            return read_chains(conn)

    def health(self) -> PgHealth:
        """The schema version, the loops (the last heartbeat of each host's latest ones) and the audit's size."""
        from cronctl.store.pg.schema import schema_version

        with self._snapshot() as conn:
            version = schema_version(conn)
            row = conn.execute("SELECT clock_timestamp(), pg_total_relation_size('cronctl_audit')").fetchone()
            assert row is not None
            loops = conn.execute(
                "SELECT host_id, pid, extract(epoch FROM clock_timestamp() - heartbeat_at), stopped_at IS NOT NULL"
                " FROM cronctl_loops WHERE heartbeat_at >= clock_timestamp() - interval '1 day'"  # as status
                " ORDER BY host_id, started_at").fetchall()
        return PgHealth(version, row[0], [LoopRow(host, int(pid), float(age), bool(stopped))
                                          for host, pid, age, stopped in loops], int(row[1]))

    def db_now(self) -> datetime:
        """The database clock now: what leases on PostgreSQL are judged by."""
        with self._snapshot() as conn:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        when: datetime = row[0]
        return when

    @contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """A read-only transaction that sees one instant of every table (jobs, runs, meta)."""
        try:
            conn = self.session.conn()
            with self.session.lock:
                # Inside a transaction of this session (a read in a `transaction()` body) it sees that one.
                fresh = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                with conn.transaction():
                    if fresh:
                        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                    yield conn
        except psycopg.Error as exc:
            self._fail("cannot read", exc)

    @staticmethod
    def _assemble(jobs: dict[str, Any], meta: dict[str, Any], chains: dict[str, Any]) -> Document:
        return {"version": CURRENT_VERSION, "rev": 0, "jobs": jobs, "counters": meta.get("counters") or {},
                "metrics": meta.get("metrics") or {}, "chains": chains}

    # --- changing ---------------------------------------------------------------------------

    @contextmanager
    def transaction(self, lazy_jobs: bool = False, flush: bool = True) -> Iterator[Document]:
        """Refused: on PostgreSQL, definitions are written by `PgDefinitions`, runs by `PgLeaseStore`."""
        raise StoreError(f"the PostgreSQL store ({self.url.shown}) is not written as a document: "
                         "definitions go through ctx.definitions, runs through ctx.leases; nothing was changed")
        yield {}  # a generator, for @contextmanager (never reached)

    def restore_backup(self) -> NoReturn:
        raise StoreError(f"the PostgreSQL store ({self.url.shown}) has no jobs.json backup to restore; "
                         "its durability is the database's (pg_dump, replication)")

    def _fail(self, doing: str, exc: psycopg.Error) -> NoReturn:
        """A database error in words, naming the store (password hidden); the transaction rolled back."""
        raise StoreError(f"{doing} the PostgreSQL store {self.url.shown}: "
                         f"{self.url.redact(str(exc).strip())}; nothing was changed") from None


# --- counters and metrics: one row per host, read added up ---------------------------------


def summed_meta(conn: Connection) -> dict[str, Any]:
    """`counters` and `metrics` of every host (and of an import) added up."""
    totals: dict[str, Any] = {key: {} for key in META_KEYS}
    for key, value in conn.execute("SELECT key, value FROM cronctl_meta ORDER BY key").fetchall():
        base = str(key).split("@", 1)[0]
        if base in totals and isinstance(value, dict):
            totals[base] = add_up(totals[base], value)
    return totals


def add_up(into: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    """Numbers added key by key, nested objects merged alike; any other value: the later one."""
    out = dict(into)
    for key, value in more.items():
        have = out.get(key)
        if isinstance(have, dict) and isinstance(value, dict):
            out[key] = add_up(have, value)
        elif _number(have) and _number(value):
            out[key] = have + value
        else:
            out[key] = value
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
