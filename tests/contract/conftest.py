"""The `lease_store` fixture: one backend of `cronctl.store.leases.LeaseStore` per parameter.

Every test of this directory runs against each backend listed in BACKENDS. A backend
gives the interface under test, the FakeClock its instants come from, a way to define
a job (definitions are not the lease interface's business), the audit rows it wrote, a
hand edit of a job's state (what a clock step or an older version could leave), a count
of the run ends still pending delivery, and a way to make a writer die right after its
commit (nothing after the commit runs). `postgres` gets a fresh migrated database per test from the
fixtures of tests/helpers/pgfixtures.py (skipped with the reason when no server can be started, failed under CI).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.jobs.state import entry_from, new_state
from cronctl.ops import definitions
from cronctl.schedule.slots import first_slot
from cronctl.store.json_unit import JsonUnits
from cronctl.store.leases import LeaseStore
from cronctl.store.outbox import PENDING
from cronctl.store.pg.connect import connect, parse_store_url
from cronctl.store.pg.document import load_jobs
from cronctl.store.pg.jobs import put_entry, set_paused
from cronctl.store.pg.leases import PgLeaseStore
from cronctl.store.pg.unit import PgUnits
from cronctl.timefmt import to_iso
from tests.helpers import pgfixtures

# The shared PostgreSQL fixtures (a fresh database per test), registered by name here.
pg_server_url = pgfixtures.pg_server_url
pg_url = pgfixtures.pg_url
store_url = pgfixtures.store_url

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@dataclass
class Backend:
    name: str
    leases: LeaseStore
    clock: FakeClock
    define: Callable[..., None]  # define(job, **options): a job as `cronctl add` makes it
    pause: Callable[[str], None]
    audit_rows: Callable[[], list[dict[str, Any]]]
    set_state: Callable[..., None]  # set_state(job, **fields): a job's state edited by hand
    pending: Callable[[], int]  # run ends committed but not yet delivered (the JSON outbox)
    crash_after_commit: Callable[[], AbstractContextManager[None]]

    def events(self, event: str) -> list[dict[str, Any]]:
        return [row for row in self.audit_rows() if row.get("event") == event]


@contextmanager
def nothing_after_commit(units: type[Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The writer dies right after its commit: what its units do after one never runs."""
    with monkeypatch.context() as patch:
        patch.setattr(units, "_after_commit", lambda self, unit: None)
        yield


def json_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    clock = FakeClock(T0)
    monkeypatch = request.getfixturevalue("monkeypatch")
    ctx = Context.open(tmp_path / "home", clock=clock)

    def define(job: str, **options: Any) -> None:
        definitions.add_job(ctx, definitions.spec_from_options(job, {"command": "true", **options}))

    def pause(job: str) -> None:
        definitions.pause_job(ctx, job)

    def set_state(job: str, **fields: Any) -> None:
        with ctx.store.transaction() as doc:
            doc["jobs"][job]["state"].update(fields)

    def pending() -> int:
        return sum(len(entry["state"].get(PENDING) or {}) for entry in ctx.store.read()["jobs"].values())

    yield Backend("json", ctx.leases, clock, define, pause, lambda: list(ctx.audit.rows()), set_state, pending,
                  lambda: nothing_after_commit(JsonUnits, monkeypatch))


def postgres_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """A fresh migrated database (tests/pg's fixture) judged at the FakeClock's instants."""
    url = parse_store_url(request.getfixturevalue("store_url"))
    clock = FakeClock(T0)
    monkeypatch = request.getfixturevalue("monkeypatch")
    conn = connect(url)
    leases = PgLeaseStore(conn, "host-a", judge_by="caller", clock=clock)

    def define(job: str, **options: Any) -> None:
        spec = definitions.spec_from_options(job, {"command": "true", **options})
        now = clock.now()
        with conn.transaction():
            put_entry(conn, entry_from(spec, new_state(now, first_slot(spec, now))))

    def pause(job: str) -> None:
        assert set_paused(conn, job, True, clock.now())

    def audit_rows() -> list[dict[str, Any]]:
        with conn.transaction():
            rows = conn.execute("SELECT event, job, run_id, slot, reason, details FROM cronctl_audit"
                                " ORDER BY id").fetchall()
        return [{"event": event, "job": job, "run_id": run_id, "slot": to_iso(slot), "reason": reason, **details}
                for event, job, run_id, slot, reason, details in rows]

    def set_state(job: str, **fields: Any) -> None:
        with conn.transaction():
            entry = load_jobs(conn, "name = %(name)s", {"name": job}, "FOR UPDATE")[job]
            entry["state"].update(fields)
            put_entry(conn, entry)

    def pending() -> int:
        with conn.transaction():
            row = conn.execute("SELECT count(*) FROM cronctl_jobs WHERE state ? %s", (PENDING,)).fetchone()
        return int(row[0]) if row else 0

    try:
        yield Backend("postgres", leases, clock, define, pause, audit_rows, set_state, pending,
                      lambda: nothing_after_commit(PgUnits, monkeypatch))
    finally:
        conn.close()


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, Path], Iterator[Backend]]] = {
    "json": json_backend, "postgres": postgres_backend}


@pytest.fixture(params=sorted(BACKENDS))
def lease_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from BACKENDS[request.param](request, tmp_path)
