"""The JSON store's document API (`Store`: read, read_if_changed, transaction) on PostgreSQL.

What defines and edits jobs (add, edit, pause, resume, remove, apply), doctor and metrics
work on a document; here that document is assembled from the rows, in the JSON store's
shape (`store/schema.py`):

- `jobs`: {name: {**spec, "state": state}}, each job's live claims from its runs rows
  (`document.load_jobs`, as the lease store reads them);
- `counters` and `metrics`: every host's rows of `cronctl_meta` added up;
- `version` (the document's shape, 1 as the JSON store's), `rev` 0 (the database keeps no
  revision of a whole document: `read_if_changed` has a signature instead) and `chains`
  empty (chains are not on PostgreSQL yet: a job with `after` is refused).

`transaction()` serialises definition writers with a transaction-scoped advisory lock
(two `add`s of different jobs both land, as under the JSON store's file lock; it ends
with the transaction, so a transaction-mode pooler cannot strand it), locks every job
row FOR UPDATE in name order (the order of the loops' `doc_transaction`: no deadlock),
and writes back only what changed, in that transaction: new jobs inserted, removed jobs
deleted (a live run of one, after `remove --force` ended it, is ended `killed`), a
changed spec with `spec_version` bumped, states and claims through `document.save_jobs`,
the counters' and metrics' change into this host's rows. `last_slot`, the high-water
mark, is never written here: a definition never moves it back. An exception in the body
rolls everything back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NoReturn, Protocol

import psycopg
from psycopg.types.json import Jsonb

from cronctl.errors import StoreError
from cronctl.models import Overlap
from cronctl.paths import Paths
from cronctl.store.claims import wake_at
from cronctl.store.codec import CURRENT_VERSION, Document
from cronctl.store.jsonstore import Store
from cronctl.store.pg.audit import dumps
from cronctl.store.pg.connect import Connection, StoreUrl
from cronctl.store.pg.document import (
    META_KEYS,
    DocTransaction,
    begin,
    dump,
    load_jobs,
    load_meta,
    save_jobs,
    save_meta,
)
from cronctl.store.pg.schema import LIVE_STATES
from cronctl.store.pg.transaction import Limits, short_transaction
from cronctl.store.pg.writes import take_xact_lock, told_failures
from cronctl.timefmt import from_iso

# pg_advisory_xact_lock key of definition writers: "crondoc" in ASCII, so it reads in pg_locks.
DEFINITIONS_LOCK_KEY = 0x63726F6E646F63
# A definitions transaction may wait as long as the JSON store's lock does (30 s), and its
# body may end runs (`remove --force` waits out a kill grace) while it holds the rows.
DOC_LIMITS = Limits(idle_s=120.0, lock_s=30.0, statement_s=120.0)

# One statement, whatever the job count: the jobs' count and the sum of their change
# instants (every write sets updated_at anew, so any change moves the sum; a max would
# miss two writers committing out of order), the newest fence (every claim) and the
# counters' rows (a handful).
_SIGNATURE = """SELECT j.n, j.stamp, (SELECT max(fence) FROM cronctl_runs),
                       (SELECT md5(coalesce(string_agg(key || value::text, ',' ORDER BY key), ''))
                          FROM cronctl_meta)
                  FROM (SELECT count(*) AS n, coalesce(sum(extract(epoch FROM updated_at)), 0) AS stamp
                          FROM cronctl_jobs) AS j"""

_COPY = "COPY cronctl_jobs (name, spec, overlap, paused, next_run_at, wake_at, state) FROM STDIN"
_UPDATE_SPEC = """UPDATE cronctl_jobs SET spec = %s, overlap = %s, spec_version = spec_version + 1,
                      updated_at = clock_timestamp() WHERE name = %s"""
# A removed job's runs still in flight (`remove --force` ended their processes): ended, so no
# live row outlives its job (a job added again under the name would show them as its own).
_END_REMOVED_RUNS = """UPDATE cronctl_runs SET state = 'killed', reason = 'removed', ended_at = clock_timestamp(),
                           lease_expires_at = NULL, claim = NULL
                        WHERE job = ANY(%s) AND state = ANY(%s)"""


class Session(Protocol):
    """The invocation's one connection (`store.backends.PgSession`) and the lock of its transactions."""

    url: StoreUrl
    lock: threading.RLock

    def conn(self) -> Connection: ...


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

    postgres = True  # doctor tells the backends apart by this

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
            return self._assemble(load_jobs(conn, "true", {}, None), summed_meta(conn))

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
            return self._assemble(load_jobs(conn, "true", {}, None), summed_meta(conn)), signature

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
    def _assemble(jobs: dict[str, Any], meta: dict[str, Any]) -> Document:
        return {"version": CURRENT_VERSION, "rev": 0, "jobs": jobs, "counters": meta.get("counters") or {},
                "metrics": meta.get("metrics") or {}, "chains": {}}

    # --- changing ---------------------------------------------------------------------------

    @contextmanager
    def transaction(self, lazy_jobs: bool = False) -> Iterator[Document]:
        """`lazy_jobs` is the JSON store's; here a transaction always loads every job row."""
        with told_failures(self.url) as stage:
            conn = self.session.conn()
            with self.session.lock, short_transaction(conn, DOC_LIMITS):
                # Polled in short round trips: each has the deadline, a wait for another writer does not.
                take_xact_lock(conn, DEFINITIONS_LOCK_KEY, DOC_LIMITS.lock_s, "the change")
                tx = begin(conn, self.host_id, load_jobs(conn, "true", {}, "FOR UPDATE"))
                meta_before = summed_meta(conn)
                doc = tx.doc
                doc.update(self._assemble(doc["jobs"], dump_copy(meta_before)))
                yield doc
                self._refuse_unwritable(tx)
                write_definitions(tx)
                save_jobs(tx)
                save_meta_change(conn, self.host_id, meta_before, doc)
                stage.committing = True  # what fails from here failed the COMMIT itself

    def _refuse_unwritable(self, tx: DocTransaction) -> None:
        doc = tx.doc
        # A caller's bug must not leave rows that the next read refuses (as jsonstore refuses to write).
        jobs = doc.get("jobs")
        problem = None if isinstance(jobs, dict) else '"jobs" is not an object'
        for name, entry in (jobs or {}).items() if isinstance(jobs, dict) else ():
            if not isinstance(entry, dict) or not isinstance(entry.get("state"), dict):
                problem = f"job '{name}' has no state object"
            elif entry.get("after") and tx.changed(name, entry):
                raise StoreError(f"job '{name}': field 'after': job chains are not available on the PostgreSQL "
                                 f"store ({self.url.shown}) yet; the store was not changed")
        if problem:
            raise StoreError(f"refusing to write the PostgreSQL store {self.url.shown}: {problem}; "
                             "the store was not changed")

    def restore_backup(self) -> NoReturn:
        raise StoreError(f"the PostgreSQL store ({self.url.shown}) has no jobs.json backup to restore; "
                         "its durability is the database's (pg_dump, replication)")

    def _fail(self, doing: str, exc: psycopg.Error) -> NoReturn:
        """A database error in words, naming the store (password hidden); the transaction rolled back."""
        raise StoreError(f"{doing} the PostgreSQL store {self.url.shown}: "
                         f"{self.url.redact(str(exc).strip())}; nothing was changed") from None


def write_definitions(tx: DocTransaction) -> None:
    """Jobs new to the document inserted, jobs gone deleted, changed specs updated with their version."""
    jobs: dict[str, Any] = tx.doc["jobs"]
    removed = sorted(tx.names_read - jobs.keys())
    if removed:
        tx.conn.execute(_END_REMOVED_RUNS, (removed, list(LIVE_STATES)))
        tx.conn.execute("DELETE FROM cronctl_jobs WHERE name = ANY(%s)", (removed,))
    added = sorted(jobs.keys() - tx.names_read)
    if added:
        _insert_jobs(tx, added)
    for name in sorted(jobs.keys() & tx.names_read):
        entry = jobs[name]
        was = tx.was(name) if tx.changed(name, entry) else None
        if was is not None and spec_of(was) != spec_of(entry):
            tx.conn.execute(_UPDATE_SPEC, (Jsonb(spec_of(entry)), _overlap(entry), name))


def _insert_jobs(tx: DocTransaction, names: list[str]) -> None:
    taken = tx.conn.execute("SELECT name FROM cronctl_jobs WHERE name = ANY(%s) ORDER BY name", (names,)).fetchall()
    if taken:
        listed = ", ".join(f"'{row[0]}'" for row in taken)
        raise StoreError(f"job {listed} was added meanwhile by another writer of the PostgreSQL store; "
                         "nothing was changed: try again")
    rows = []
    for name in names:
        entry = tx.doc["jobs"][name]
        state = dict(entry["state"])
        if state.get("claims"):
            state["claims"] = {}  # a new job's claims are runs rows: `save_jobs` writes them
        else:
            tx.saved(name, entry)  # written whole here: nothing left for `save_jobs`
        rows.append((name, Jsonb(spec_of(entry)), _overlap(entry), bool(entry.get("paused") or state.get("paused")),
                     from_iso(state.get("next_run_at")), wake_at({**entry, "state": state}), Jsonb(state, dumps=dumps)))
    # COPY: one stream for any number of rows (`apply -f` of 10,000 jobs), not a round trip each.
    with tx.conn.cursor() as cur, cur.copy(_COPY) as copy:
        for row in rows:
            copy.write_row(row)


def spec_of(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "state"}


def _overlap(entry: dict[str, Any]) -> str:
    return str(entry.get("overlap") or Overlap.SKIP.value)


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


def change_of(before: Any, after: Any) -> Any:
    """What `after` adds to `before` (numbers subtracted, objects key by key); None: nothing."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes = {key: change_of(before.get(key), value) for key, value in after.items()}
        kept = {key: value for key, value in changes.items() if value is not None}
        return kept or None
    if _number(after) and (before is None or _number(before)):
        delta = after - (before or 0)
        return delta if delta else None
    return None if after == before else after


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def save_meta_change(conn: Connection, host_id: str, before: dict[str, Any], doc: Document) -> None:
    """The body's change of the totals, added to this host's rows (other hosts' rows are theirs)."""
    changes = {key: change_of(before.get(key) or {}, doc.get(key) or {}) for key in META_KEYS}
    changed = {key: value for key, value in changes.items() if value}
    if not changed:
        return
    mine = load_meta(conn, host_id)
    save_meta(conn, host_id, {key: add_up(mine.get(key) or {}, value) for key, value in changed.items()})


def dump_copy(value: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of plain JSON data (the totals as read stay apart from the body's document)."""
    import json

    copied: dict[str, Any] = json.loads(dump(value))
    return copied
