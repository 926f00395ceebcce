"""The `lease_store` fixture: one backend of `cronctl.store.leases.LeaseStore` per parameter.

Every test of this directory runs against each backend listed in BACKENDS. A backend
gives the interface under test, the FakeClock its instants come from, a way to define
a job (definitions are not the lease interface's business) and the audit rows and
history records it wrote. The PostgreSQL store plugs in as one more entry here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.ops import definitions
from cronctl.store.leases import LeaseStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@dataclass
class Backend:
    name: str
    leases: LeaseStore
    clock: FakeClock
    define: Callable[..., None]  # define(job, **options): a job as `cronctl add` makes it
    pause: Callable[[str], None]
    audit_rows: Callable[[], list[dict[str, Any]]]

    def events(self, event: str) -> list[dict[str, Any]]:
        return [row for row in self.audit_rows() if row.get("event") == event]


def json_backend(tmp_path: Path) -> Iterator[Backend]:
    clock = FakeClock(T0)
    ctx = Context.open(tmp_path / "home", clock=clock)

    def define(job: str, **options: Any) -> None:
        definitions.add_job(ctx, definitions.spec_from_options(job, {"command": "true", **options}))

    def pause(job: str) -> None:
        definitions.pause_job(ctx, job)

    yield Backend("json", ctx.leases, clock, define, pause, lambda: list(ctx.audit.rows()))


BACKENDS: dict[str, Callable[[Path], Iterator[Backend]]] = {"json": json_backend}


@pytest.fixture(params=sorted(BACKENDS))
def lease_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield from BACKENDS[request.param](tmp_path)
