"""The backend seam (store/backend.py) on the JSON store: one `Backend` per Context, no
cluster, the read commands' answers without the lease machinery, and the PostgreSQL-only
commands refused in one line. (The PostgreSQL side runs in tests/pg: every command there
goes through `PgBackend` and `PgCluster`.)"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.errors import JobNotFoundError
from cronctl.store.backend import JsonBackend, open_backend

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def test_a_json_context_holds_one_json_backend_and_no_cluster(home: Path) -> None:
    ctx = Context.open(home, clock=FakeClock(T0))
    assert isinstance(ctx.backend, JsonBackend)
    assert ctx.cluster is None and ctx.backend.url is None and ctx.backend.records_in_home
    assert ctx.store is ctx.backend.document and ctx.audit is ctx.backend.audit
    assert ctx.leases is ctx.backend.leases and ctx.definitions is ctx.backend.definitions  # made once
    assert ctx.reopen().backend is not ctx.backend  # the endpoint's threads get their own


def test_the_read_answers_agree_with_the_lease_store(cli: Any, home: Path) -> None:
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    assert cli("force-run", "tick", "--wait").code == 0
    fresh = Context.open(home).backend  # answers from one document read
    views, counters, chains, any_jobs = fresh.overview()
    leases = Context.open(home).leases
    assert [view.spec for view in views] == [view.spec for view in leases.jobs()]
    assert [view.spec for view in fresh.job_views()] == [view.spec for view in leases.jobs()]
    assert fresh.job_view("tick").spec == leases.job("tick").spec
    assert counters == leases.counters() and chains == {} and any_jobs is None
    assert fresh.has_job("tick") and not fresh.has_job("tock")
    with pytest.raises(JobNotFoundError, match="tock"):
        fresh.job_view("tock")
    [record] = leases.history("tick")
    assert fresh.find_record("tick", record["run_id"]) == record
    assert fresh.find_record("tick", "no-such-run") is None


def test_the_json_backend_reads_without_the_lease_machinery_or_the_driver(home: Path) -> None:
    # The `status --json` and `list` fast paths must not import them (about 20 ms).
    probe = ("import sys\nfrom pathlib import Path\nfrom cronctl.context import Context\n"
             f"ctx = Context.open(Path({str(home)!r}))\n"
             "ctx.backend.overview(); ctx.backend.job_views(); ctx.backend.has_job('x'); assert ctx.cluster is None\n"
             "print(sorted(m for m in sys.modules if m.startswith(('cronctl.store.leases', 'cronctl.store.pg',"
             " 'psycopg'))))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_open_backend_chooses_the_json_store_without_a_url(home: Path) -> None:
    from cronctl.paths import open_home

    clock = FakeClock(T0)
    backend = open_backend(open_home(home), clock, None, lock_timeout=2.5)
    assert isinstance(backend, JsonBackend) and backend.cluster is None
    assert backend.document._lock_timeout == 2.5 and backend.audit.clock is clock  # as Context.open passes them


@pytest.mark.parametrize(("args", "words"), [
    (["store", "forget-host", "web-3"], "store forget-host: hosts share only a PostgreSQL store"),
    (["store", "import-json"], "store import-json: name the PostgreSQL store with --store URL"),
])
def test_a_postgresql_only_command_on_the_json_store_is_one_line(cli: Any, home: Path, args: list[str],
                                                                  words: str) -> None:
    result = cli(*args)
    assert result.code == 1 and words in result.err and "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1
