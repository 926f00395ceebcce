"""Job rows read as the JSON store's document, so the pure functions of `store/claims.py` run unchanged.

One `DocTransaction` locks the job rows it needs (FOR UPDATE, in name order, so two
loops never deadlock), assembles `{"jobs": {name: entry}, "counters", "metrics"}` from
them and their live runs, lets the caller change that document, and on a clean exit
writes back what changed, in the same transaction:

- a job row: its state (without claims), and the `next_run_at`/`wake_at`/`paused`
  columns the due indexes read;
- a claim: one `cronctl_runs` row, `claimed` until dispatched, then `running`; a claim
  that went with a history record becomes that ended run; one that went without (a
  hand-back, a spawn failure) is deleted: nothing of it ran;
- the audit rows and the counters/metrics rows (this host's, `meta_key`) the decision
  produced.

The row lock of a job is what the JSON store's file lock was: every change of that job's
state and claims is serialized across hosts, so a slot is claimed once and a finish is
fenced against the claim as it stands.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
from psycopg.types.json import Jsonb

from cronctl.errors import StoreError
from cronctl.models import Overlap
from cronctl.store.claims import Event, wake_at
from cronctl.store.pg import chain_rows, functions
from cronctl.store.pg.audit import AuditRow, audit_columns, dumps
from cronctl.store.pg.chain_rows import ChainPlan
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.transaction import short_transaction
from cronctl.timefmt import from_iso

META_KEYS = ("counters", "metrics")
# Keys of an audit event that have their own columns; the rest go to `details`.
_AUDIT_COLUMNS = ("job", "run_id", "slot", "reason")


@dataclass
class DocTransaction:
    """The document of one transaction and what to write with it."""

    conn: Connection
    host_id: str
    db_now: datetime
    doc: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # run_id -> its history record
    tails: dict[str, str] = field(default_factory=dict)  # run_id -> the output tail kept with the run
    # (job, slot) of scheduled runs dispatched in this transaction: each raises its job's
    # high-water mark `last_slot`, at or before which no scheduled slot is claimed again.
    fired: list[tuple[str, datetime]] = field(default_factory=list)
    _before: dict[str, bytes] = field(default_factory=dict)
    read_only: set[str] = field(default_factory=set)  # jobs read, not locked: never written (chain_rows)
    chains_before: dict[str, bytes] = field(default_factory=dict)  # the chain rows locked, as read

    def keep_record(self, record: dict[str, Any] | None) -> None:
        if record is not None:
            self.records[str(record["run_id"])] = record

    def was(self, name: str) -> dict[str, Any] | None:
        """Job `name` as this transaction read it; None: it was not there."""
        before = self._before.get(name)
        return None if before is None else dict(json.loads(before))

    def changed(self, name: str, entry: dict[str, Any]) -> bool:
        return dump(entry) != self._before.get(name)

    def saved(self, name: str, entry: dict[str, Any]) -> None:
        """Job `name` was written whole by the caller: `save_jobs` leaves it."""
        self._before[name] = dump(entry)

    @property
    def names_read(self) -> set[str]:
        return set(self._before)


# Each transaction's document has a revision of its own: chain_doc caches what it derives
# from the jobs by (id of the jobs mapping, revision), and an id is reused once freed.
_revisions = itertools.count(1)

PlanChains = Callable[[Connection], ChainPlan | None]


@dataclass(frozen=True)
class OpenInOne:
    """A unit's opening in one call when it can (functions.open_named, open_due): given this
    host's meta keys to lock (none: the unit changes no counter), the rows found, or None when
    it did nothing and the unit opens step by step; `plan` is the chain plan the steps would
    have made of what the call found (no chain to lock)."""

    call: Callable[[Connection, list[str]], functions.Opened | None]
    plan: ChainPlan | None


@contextmanager
def doc_transaction(conn: Connection, host_id: str, lock: LockRows, *, meta: bool = False,
                    chains: PlanChains | None = None, in_one: OpenInOne | None = None) -> Iterator[DocTransaction]:
    """Lock the job rows `lock` locks (`rows_named`, `rows_due`, `rows_where`).

    `meta` also locks the counters and metrics rows (only transactions that may change
    them: they are one row each for every loop). `chains` plans the chain rows and the
    jobs of theirs this unit locks first (store/pg/chain_rows.py). `in_one`: the same in
    one call, when the unit has no chain to plan (issue 21: a call costs 15-25 us).
    """
    with short_transaction(conn):
        tx, meta = _open(conn, host_id, lock, meta, chains, in_one)
        meta_before = {key: dump(tx.doc.get(key)) for key in META_KEYS}
        yield tx
        updates = save_jobs(tx)
        if "chains" in tx.doc:
            chain_rows.save_chains(conn, tx.chains_before, tx.doc["chains"], dump)
        chain_rows.insert_skip_runs(conn, host_id, tx.events)
        changed_meta = {meta_key(key, host_id): Jsonb(tx.doc.get(key) or {}, dumps=dumps) for key in META_KEYS
                        if meta and dump(tx.doc.get(key)) != meta_before[key]}
        if updates or tx.fired or changed_meta or tx.events:
            # The job rows, the marks, the meta rows and the audit rows: one call (functions._END_UNIT).
            functions.end_unit(conn, updates, tx.fired, changed_meta, host_id,
                               audit_columns([audit_row(event) for event in tx.events]))
        tx.fired.clear()


def _open(conn: Connection, host_id: str, lock: LockRows, meta: bool, chains: PlanChains | None,
          in_one: OpenInOne | None) -> tuple[DocTransaction, bool]:
    """The unit's document, its rows locked; and whether it locked the meta rows."""
    keys = meta_keys(host_id)
    opened = in_one.call(conn, keys if meta else []) if in_one is not None else None
    if in_one is not None and opened is not None:
        plan = in_one.plan
        jobs = locked_entries(opened.rows)
        read_only = _read_dependants(conn, jobs, opened.after)
        tx = _document(conn, host_id, jobs, opened.at)
        if meta:
            tx.doc.update(_meta_doc(opened.meta) if len(opened.meta) == len(keys) else load_meta(conn, host_id))
    else:
        plan = chains(conn) if chains is not None else None
        jobs = _lock_jobs(conn, lock, plan)
        read_only = _read_dependants(conn, jobs, chain_rows.dependants_of(conn, sorted(jobs))
                                     if plan is not None and plan.read_dependants and jobs else [])
        tx = begin(conn, host_id, jobs)
        meta = meta or (plan is not None and plan.meta)
        if meta:
            tx.doc.update(load_meta(conn, host_id))
    tx.read_only = read_only
    if plan is not None:
        tx.doc["chains"] = plan.chains
        tx.chains_before = {chain_id: dump(chain) for chain_id, chain in plan.chains.items()}
    return tx, meta


# How a unit's own job rows are locked, as entries by name (after the chain's: `_lock_jobs`).
LockRows = Callable[[Connection], dict[str, Any]]


def rows_named(names: list[str]) -> LockRows:
    """The named rows, waiting for their locks (FOR UPDATE, name order): a server-side function
    (functions.py: planned once per backend), as the run path locks them."""
    return lambda conn: locked_entries(functions.lock_named(conn, names))


def rows_due(due_by: datetime | None) -> LockRows:
    """The rows due by `due_by` (None: the database's clock), SKIP LOCKED: rows another loop is
    deciding on are left to it. A server-side function whose scan is planned at each call."""
    return lambda conn: locked_entries(functions.lock_due(conn, due_by))


def rows_where(where: str, params: dict[str, Any], skip_locked: bool = False) -> LockRows:
    """The rows matching `where` (a constant predicate of this package, never user text), as a
    client statement; `skip_locked` as `rows_due`."""
    return lambda conn: load_jobs(conn, where, params, "FOR UPDATE SKIP LOCKED" if skip_locked else "FOR UPDATE")


def _lock_jobs(conn: Connection, lock: LockRows, plan: ChainPlan | None) -> dict[str, Any]:
    """The chain's job rows first (waiting: a node must never read as removed), then the unit's own."""
    jobs: dict[str, Any] = {}
    if plan is not None and plan.jobs:
        jobs = rows_named(plan.jobs)(conn)
        if plan.covers:
            return jobs
    jobs.update(lock(conn))
    return jobs


def locked_entries(rows: list[functions.LIVE_ROWS]) -> dict[str, Any]:
    """`load_jobs`'s entries (with a lock: claims as stored) from a locking function's rows."""
    jobs: dict[str, Any] = {}
    for name, spec, state, run_id, claim, host in rows:
        if run_id is None:
            jobs[name] = {**spec, "state": dict(state)}
            continue
        if isinstance(claim.get("owner"), dict):
            claim["owner"]["host"] = host  # whose pid it is: judged here only on its own host
        jobs[name]["state"].setdefault("claims", {})[run_id] = claim
    return jobs


def _read_dependants(conn: Connection, jobs: dict[str, Any], dependants: list[str]) -> set[str]:
    """The `dependants` of the locked jobs this unit did not lock, read: what `has_dependants`
    asks of a root a claim write claims (chain_doc reads it from the document's jobs)."""
    missing = [name for name in dependants if name not in jobs]
    if missing:
        jobs.update(load_jobs(conn, "name = ANY(%(chained)s)", {"chained": missing}, None))
    return set(missing)


def begin(conn: Connection, host_id: str, jobs: dict[str, Any]) -> DocTransaction:
    """The document of the job rows just locked, remembered as read (what `save_jobs` compares with)."""
    # The instant once the locks are held: a decision is judged when it is taken, not before a wait.
    row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return _document(conn, host_id, jobs, row[0])


def _document(conn: Connection, host_id: str, jobs: dict[str, Any], db_now: datetime) -> DocTransaction:
    tx = DocTransaction(conn, host_id, db_now, {"jobs": jobs})
    tx._before = {name: dump(entry) for name, entry in jobs.items()}
    tx.doc["rev"] = next(_revisions)
    return tx


def load_jobs(conn: Connection, where: str, params: dict[str, Any], lock: str | None) -> dict[str, Any]:
    """Job entries as the JSON document holds them (claims from the live runs), by name.

    `where` and `lock` (None, or a FOR UPDATE clause) are this package's constants. A read
    (no lock) shows each claim with the `host` that holds it (SPEC §9: `host` wherever a run
    is shown); a transaction's document keeps the claims as stored, to compare and write back.
    """
    rows = conn.execute(f"SELECT name, spec, state FROM cronctl_jobs WHERE {where} ORDER BY name {lock or ''}",
                        params).fetchall()
    jobs: dict[str, Any] = {name: {**spec, "state": dict(state)} for name, spec, state in rows}
    if jobs:
        for job, run_id, claim, host in conn.execute(
                "SELECT job, run_id, claim, host_id FROM cronctl_runs WHERE job = ANY(%s) AND live"
                " AND claim IS NOT NULL ORDER BY fence", (list(jobs),)):
            if isinstance(claim.get("owner"), dict):
                claim["owner"]["host"] = host  # whose pid it is: judged here only on its own host
            shown = {**claim, "host": host} if lock is None and host else claim
            jobs[job]["state"].setdefault("claims", {})[run_id] = shown
    return jobs


def meta_key(key: str, host_id: str) -> str:
    """Each host counts in rows of its own, so loops on different hosts never wait on one row;
    readers add the rows up (`PgLeaseStore.counters`)."""
    return f"{key}@{host_id}"


def meta_keys(host_id: str) -> list[str]:
    return [meta_key(key, host_id) for key in META_KEYS]


def load_meta(conn: Connection, host_id: str) -> dict[str, Any]:
    keys = meta_keys(host_id)
    rows = functions.lock_meta(conn, keys)
    if len(rows) < len(keys):  # this host's first count: its rows, then locked as any other time
        conn.execute("INSERT INTO cronctl_meta (key) SELECT unnest(%s::text[]) ON CONFLICT DO NOTHING", (keys,))
        rows = functions.lock_meta(conn, keys)
    return _meta_doc(rows)


def _meta_doc(rows: list[tuple[Any, ...]]) -> dict[str, Any]:
    return {key.split("@", 1)[0]: value for key, value in rows if value}


def save_jobs(tx: DocTransaction) -> list[tuple[Any, ...]]:
    """Each changed job's claims, as runs rows, of job rows that exist (a job new to this
    transaction is inserted by the caller first: its claims before are none); its state, as
    the row update returned, which the unit's end writes (`functions.end_unit`).

    The job rows go in one statement at the end (`resume` of 10,000 jobs: one round trip, not
    10,000); their order against the runs rows does not matter in one transaction.
    """
    updates = []
    for name, entry in tx.doc["jobs"].items():
        if not tx.changed(name, entry):
            continue
        if name in tx.read_only:
            raise StoreError(f"job {name} was changed by a write that did not lock it; nothing was changed")
        state = dict(entry["state"])
        claims: dict[str, Any] = state.get("claims") or {}
        if "claims" in state:
            state["claims"] = {}  # the key stays, as the JSON document keeps it; the claims are runs rows
        was = tx.was(name)
        before = (was["state"].get("claims") or {}) if was is not None else {}
        _save_claims(tx, name, entry, before, claims)
        updates.append((Jsonb(state, dumps=dumps), from_iso(state.get("next_run_at")),
                        wake_at({**entry, "state": state}), bool(entry.get("paused") or state.get("paused")), name))
    return updates


def _save_claims(tx: DocTransaction, job: str, entry: dict[str, Any], before: dict[str, Any],
                 after: dict[str, Any]) -> None:
    for run_id, claim in after.items():
        if claim.get("dispatched") and not (before.get(run_id) or {}).get("dispatched") \
                and claim.get("trigger") == "schedule":
            slot = from_iso(claim.get("slot"))
            if slot is not None:
                tx.fired.append((job, slot))
        if run_id not in before:
            _insert_run(tx, job, entry, claim)
        elif claim != before[run_id]:
            functions.update_claim(tx.conn, (run_id, Jsonb(claim, dumps=dumps), _live_state(claim), *_child(claim),
                                             from_iso(claim.get("started_at")), from_iso(claim.get("lease_until"))))
    for run_id in before.keys() - after.keys():
        record = tx.records.get(run_id)
        if record is None:
            tx.conn.execute("DELETE FROM cronctl_runs WHERE run_id = %s", (run_id,))
            continue
        functions.end_run(tx.conn, (
            run_id, record["status"], record.get("reason"), record.get("fault"), record.get("exit_code"),
            record.get("signal"), record.get("duration"), tx.tails.get(run_id, _text(record.get("output_tail"))),
            from_iso(record["ended_at"]), Jsonb(record, dumps=dumps)))


def _insert_run(tx: DocTransaction, job: str, entry: dict[str, Any], claim: dict[str, Any]) -> None:
    functions.insert_run(tx.conn, (
        claim["run_id"], job, from_iso(claim["slot"]), claim["trigger"], claim["attempt"],
        entry.get("overlap", Overlap.SKIP.value) == Overlap.SKIP.value, _live_state(claim), bool(claim.get("late")),
        tx.host_id, claim.get("boot_id"), *_child(claim), from_iso(claim["claimed_at"]), from_iso(claim.get("due_at")),
        from_iso(claim.get("started_at")), from_iso(claim.get("lease_until")), Jsonb(claim, dumps=dumps)))


def _text(value: str | None) -> str | None:
    """A text column refuses NUL: it becomes U+FFFD, as in the jsonb columns (audit.dumps)."""
    return value.replace("\x00", "\ufffd") if value else value


def _live_state(claim: dict[str, Any]) -> str:
    return "running" if claim.get("dispatched") else "claimed"


def _child(claim: dict[str, Any]) -> tuple[int | None, float | None]:
    child = claim.get("child") or {}
    return child.get("pid"), child.get("start_time")


def audit_row(event: Event) -> AuditRow:
    """The JSON store's event as a row: its well-known keys in their columns, the rest as details."""
    details = {key: value for key, value in event.details.items() if key not in _AUDIT_COLUMNS}
    slot = event.details.get("slot")
    return AuditRow(event.name, job=event.details.get("job"), run_id=event.details.get("run_id"),
                    slot=from_iso(slot) if isinstance(slot, str) else slot, reason=event.details.get("reason"),
                    details=details)


_encode_sorted = msgspec.json.Encoder(order="sorted").encode


def dump(value: Any) -> bytes:
    """The bytes two versions of a value are compared by (msgspec: ~10x json.dumps, a definitions
    transaction compares every job of the store); anything msgspec cannot encode, as json.dumps would."""
    try:
        return _encode_sorted(value)
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError):
        return json.dumps(value, sort_keys=True, default=str).encode()
