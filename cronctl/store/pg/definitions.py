"""`Definitions` (store/definitions.py) on PostgreSQL: a write locks only the rows it names.

`editing(names)` opens one short transaction, takes the definitions lock in *shared* mode
(definition writers do not wait for each other; `store import-json` takes it exclusive, so
an `add` lands before or after an import, never across it), locks the named job rows FOR
UPDATE in name order (the order of the loops' `doc_transaction`: no deadlock) and hands
their entries over, claims from their live runs. On a clean exit it writes, in that same
transaction: removed jobs deleted (a live run of one, which `remove --force` ended, is
ended `killed`), new jobs inserted (COPY: one stream for 100,000 of them), replaced jobs
updated (`spec_version` bumped when the spec changed), and the audit rows. `last_slot`,
the high-water mark, is never written: a definition never moves it back.

A job with `after` is stored as any other (its chains: store/pg/chain_rows.py); the chain
rules read the chained jobs by the index on `after` (`linked_specs`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import psycopg
from psycopg.types.json import Jsonb

from cronctl.errors import CronctlError, StoreError
from cronctl.models import JobSpec, Overlap
from cronctl.store.claims import wake_at
from cronctl.store.definitions import AuditRows, DefinitionsEdit, already_exists
from cronctl.store.pg.audit import dumps, insert_audit_rows, json_text
from cronctl.store.pg.connect import Connection, StoreUrl
from cronctl.store.pg.copy_text import Ahead, copy_line, write_lines
from cronctl.store.pg.document import load_jobs
from cronctl.store.pg.transaction import Limits, short_transaction
from cronctl.store.pg.writes import take_xact_lock, told_failures
from cronctl.timefmt import from_iso

# pg_advisory_xact_lock key of definition writers: "crondoc" in ASCII, so it reads in pg_locks.
DEFINITIONS_LOCK_KEY = 0x63726F6E646F63
# A definitions transaction may wait as long as the JSON store's lock does (30 s), and its
# body may end runs (`remove --force` waits out a kill grace) while it holds the rows.
DEFINITIONS_LIMITS = Limits(idle_s=120.0, lock_s=30.0, statement_s=120.0)

_COPY = "COPY cronctl_jobs (name, spec, overlap, paused, next_run_at, wake_at, state) FROM STDIN"
# One statement over arrays, never executemany: a pipeline's messages are not timed by
# PostgreSQL, and a stall between them kept these row locks for ever (store/pg/transaction.py).
_UPDATE = """UPDATE cronctl_jobs AS j SET spec = u.spec, overlap = u.overlap, spec_version = j.spec_version + u.bump,
                    state = u.state, next_run_at = u.next_run_at, wake_at = u.wake_at, paused = u.paused,
                    updated_at = clock_timestamp()
               FROM unnest(%s::jsonb[], %s::text[], %s::int[], %s::jsonb[], %s::timestamptz[], %s::timestamptz[],
                           %s::boolean[], %s::text[])
                    AS u(spec, overlap, bump, state, next_run_at, wake_at, paused, name)
              WHERE j.name = u.name"""
# A removed job's runs still in flight (`remove --force` ended their processes): ended, so no
# live row outlives its job (a job added again under the name would show them as its own).
_END_REMOVED_RUNS = """UPDATE cronctl_runs SET state = 'killed', reason = 'removed', ended_at = clock_timestamp(),
                           lease_expires_at = NULL, claim = NULL
                        WHERE job = ANY(%s) AND live"""


class PgEdit:
    """A `DefinitionsEdit` over the rows one transaction locked."""

    def __init__(self, conn: Connection, entries: dict[str, Any], ahead: Ahead[bytes] | None = None) -> None:
        self.conn = conn
        self.ahead = ahead or Ahead()
        self._entries = entries
        self._specs = {name: spec_of(entry) for name, entry in entries.items()}  # as read
        self.added: dict[str, dict[str, Any]] = {}
        self.replaced: dict[str, dict[str, Any]] = {}
        self.removed: list[str] = []
        self.rows: AuditRows = []

    @property
    def entries(self) -> Mapping[str, dict[str, Any]]:
        return self._entries

    def add(self, entry: dict[str, Any]) -> None:
        self.added[entry["name"]] = entry

    def replace(self, name: str, entry: dict[str, Any]) -> None:
        self.replaced[name] = entry

    def remove(self, name: str) -> None:
        self.removed.append(name)
        self.replaced.pop(name, None)

    def linked_specs(self, upstreams: Iterable[str]) -> dict[str, JobSpec]:
        # The upstreams asked for are held FOR SHARE until this edit commits: a `remove` of one
        # (FOR UPDATE) waits, then reads the dependant this edit adds and refuses to orphan it;
        # a removal committed first leaves the upstream unknown here. (Two edits that would close
        # a cycle through each other's rows deadlock; PostgreSQL ends one, which changes nothing.)
        wanted = sorted(set(upstreams) - set(self._entries))
        if wanted:
            self.conn.execute("SELECT 1 FROM cronctl_jobs WHERE name = ANY(%s) ORDER BY name FOR SHARE", (wanted,))
        # Every job in a chain has `after` (a key of its spec only then, models.to_dict): the
        # partial index cronctl_jobs_chained finds them without a scan; plus the upstreams asked for.
        rows = self.conn.execute("SELECT name, spec FROM cronctl_jobs WHERE spec ? 'after' OR name = ANY(%s)",
                                 (sorted(set(upstreams)),)).fetchall()
        return {name: JobSpec.from_dict(spec) for name, spec in rows}

    def audit(self, rows: AuditRows) -> None:
        self.rows.extend(rows)

    def write(self, shown: str) -> None:
        """Everything the body changed, in this transaction (see the module doc)."""
        if self.removed:
            self.conn.execute(_END_REMOVED_RUNS, (self.removed,))
            self.conn.execute("DELETE FROM cronctl_jobs WHERE name = ANY(%s)", (self.removed,))
        if self.added:
            self._insert()
        if self.replaced:
            rows = [self._update_row(name, entry) for name, entry in self.replaced.items()]
            self.conn.execute(_UPDATE, [list(column) for column in zip(*rows, strict=True)])

    def _insert(self) -> None:
        names = sorted(self.added)
        taken = [row[0] for row in self.conn.execute(
            "SELECT name FROM cronctl_jobs WHERE name = ANY(%s) ORDER BY name", (names,)).fetchall()]
        if taken:
            raise added_meanwhile(taken)
        try:
            self._copy(names)
        except psycopg.errors.UniqueViolation:
            # Another writer's insert of a name committed while this one waited on the index.
            raise added_meanwhile(names if len(names) == 1 else []) from None

    def _copy(self, names: list[str]) -> None:
        # COPY: one stream for any number of rows (`apply -f` of 100,000 jobs), not a round trip
        # each; the lines `PgDefinitions.prepare` encoded before this transaction are only sent.
        lines = (self.ahead.take(name, self.added[name]) or job_line(name, self.added[name]) for name in names)
        with self.conn.cursor() as cur, cur.copy(_COPY) as copy:
            write_lines(copy, lines, self.conn.info.encoding)

    def _update_row(self, name: str, entry: dict[str, Any]) -> tuple[Any, ...]:
        spec, state = spec_of(entry), stored_state(entry)
        bump = 1 if spec != self._specs.get(name) else 0
        return (Jsonb(spec), overlap_of(entry), bump, Jsonb(state, dumps=dumps), from_iso(state.get("next_run_at")),
                wake_at({**entry, "state": state}), paused_of(entry, state), name)


def added_meanwhile(names: list[str]) -> CronctlError:
    """A job this write adds was added by another writer meanwhile: one job, as `add` words it."""
    if len(names) == 1:
        return already_exists(names[0])
    listed = ", ".join(f"'{name}'" for name in names) or "of this file"
    return StoreError(f"job {listed} was added meanwhile by another writer of the PostgreSQL store; "
                      "nothing was changed: try again")


def job_line(name: str, entry: dict[str, Any]) -> bytes:
    """A new job's row as COPY (`_COPY`) reads it."""
    state = stored_state(entry)
    # A spec is `JobSpec.to_dict`'s and a new state `new_state`'s: plain data.
    return copy_line((name, json_text(spec_of(entry), plain=True), overlap_of(entry), paused_of(entry, state),
                      from_iso(state.get("next_run_at")), wake_at({**entry, "state": state}),
                      json_text(state, plain=True)))


def spec_of(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "state"}


def stored_state(entry: dict[str, Any]) -> dict[str, Any]:
    """The state as its row holds it: the claims are runs rows (the key stays, as the document keeps it)."""
    state = dict(entry["state"])
    if "claims" in state:
        state["claims"] = {}
    return state


def overlap_of(entry: dict[str, Any]) -> str:
    return str(entry.get("overlap") or Overlap.SKIP.value)


def paused_of(entry: dict[str, Any], state: dict[str, Any]) -> bool:
    return bool(entry.get("paused") or state.get("paused"))


class Session(Protocol):
    """The invocation's one connection (`store.pg.session.PgSession`) and the lock of its transactions."""

    url: StoreUrl
    lock: threading.RLock

    def conn(self) -> Connection: ...


class AuditWriter(Protocol):
    """The database's audit log (`store.pg.auditlog.PgAuditLog`): rows made ready, told once written."""

    def prepare(self, rows: AuditRows) -> tuple[list[dict[str, Any]], list[bytes]]: ...

    def prepare_ahead(self, rows: AuditRows) -> None: ...

    def forget_ahead(self) -> None: ...

    def tell(self, written: list[dict[str, Any]]) -> None: ...


class PgDefinitions:
    """`Definitions` over the job rows (see the module doc)."""

    def __init__(self, session: Session, audit: AuditWriter) -> None:
        self.session = session
        self.audit_log = audit
        self.ahead: Ahead[bytes] = Ahead()

    def prepare(self, entries: Mapping[str, dict[str, Any]], rows: AuditRows) -> None:
        """New jobs' rows and audit rows encoded now, before the write that may add them opens its
        transaction (issue 21: `apply -f` does this on an idle thread); no connection is used."""
        for name, entry in entries.items():
            self.ahead.keep(name, entry, job_line(name, entry))
        self.audit_log.prepare_ahead(rows)

    def get(self, name: str) -> dict[str, Any] | None:
        with self._read() as conn:
            return load_jobs(conn, "name = %(name)s", {"name": name}, None).get(name)

    def names(self) -> set[str]:
        with self._read() as conn:
            return {row[0] for row in conn.execute("SELECT name FROM cronctl_jobs")}

    @contextmanager
    def editing(self, names: Collection[str] | None, source: str | None = None) -> Iterator[DefinitionsEdit]:
        try:
            with self._transaction() as conn:
                where, params = _locked(names, source)
                edit = PgEdit(conn, load_jobs(conn, where, params, "FOR UPDATE"), self.ahead)
                yield edit
                edit.write(self.session.url.shown)
                written, audit_lines = self.audit_log.prepare(edit.rows)
                if audit_lines:
                    insert_audit_rows(conn, audit_lines)
            self.audit_log.tell(written)
        finally:
            self.ahead.clear()  # what `prepare` made is for the next write only
            self.audit_log.forget_ahead()

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with told_failures(self.session.url) as stage:
            conn = self.session.conn()
            with self.session.lock, short_transaction(conn, DEFINITIONS_LIMITS):
                take_xact_lock(conn, DEFINITIONS_LOCK_KEY, DEFINITIONS_LIMITS.lock_s, "the change", shared=True)
                yield conn
                stage.committing = True  # what fails from here failed the COMMIT itself

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with told_failures(self.session.url, "cannot read") as _stage:
            conn = self.session.conn()
            with self.session.lock, conn.transaction():
                yield conn


def _locked(names: Collection[str] | None, source: str | None) -> tuple[str, dict[str, Any]]:
    """The rows to lock: a constant predicate of this module, the values as parameters."""
    if names is None:
        return "true", {}
    if source is None:
        return "name = ANY(%(names)s)", {"names": list(names)}
    return "name = ANY(%(names)s) OR spec->>'source' = %(source)s", {"names": list(names), "source": source}
