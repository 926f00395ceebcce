"""The dashboard's API on the PostgreSQL store (SPEC §14 "works on both stores"): the same
routes answer from the database, with `loops` in the status and `host` on every run."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cronctl.context import Context
from cronctl.loop.endpoint import Endpoint
from cronctl.ops.webpage import dashboard_actions, dashboard_handlers
from cronctl.store.pg.connect import parse_store_url

TOKEN = "pg-dashboard-token-0123456789abcdef"


@pytest.fixture
def served(cli: Any, store_url: str, home: Path) -> Iterator[tuple[str, Context]]:
    assert cli("add", "tick", "--every", "1h", "--", "echo", "<script>").code == 0
    assert cli("add", "nightly", "--cron", "0 3 * * *", "--", "true").code == 0
    assert cli("force-run", "tick").code == 0
    assert cli("--store", store_url, "store", "import-json").code == 0
    ctx = Context.open(home, store_url=parse_store_url(store_url))
    endpoint = Endpoint("127.0.0.1", 0, {}, dashboard_handlers(ctx, True), dashboard_actions(ctx, TOKEN))
    endpoint.start()
    yield "http://%s:%d" % endpoint.address, ctx
    endpoint.stop()


def call(base: str, path: str, method: str = "GET", token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, method=method,
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_api_reads_the_database(served: tuple[str, Context], cli: Any, store_url: str) -> None:
    base, _ = served
    code, status = call(base, "/api/status")
    printed = cli("--store", store_url, "status", "--json").json()
    assert code == 200 and "loops" in status and status["jobs"] == printed["jobs"]
    assert [job["name"] for job in call(base, "/api/jobs")[1]["jobs"]] == ["nightly", "tick"]
    runs = call(base, "/api/history?job=tick")[1]["runs"]
    assert [run["status"] for run in runs] == ["success"] and runs[0]["host"]
    assert runs[0]["output_tail"] == "<script>\n"
    bars = call(base, "/api/history?view=timeline&since=1h&res=10")[1]["jobs"]["tick"]["bars"]
    assert len(bars) == 1 and bars[0][2] == 0
    assert call(base, "/api/history?since=nonsense")[0] == 400
    assert call(base, "/api/audit?n=5")[0] == 200


def test_actions_act_on_the_database_and_are_audited_by_http(served: tuple[str, Context], cli: Any,
                                                              store_url: str) -> None:
    base, _ = served
    assert call(base, "/api/jobs/nightly/pause", "POST")[0] == 403
    code, body = call(base, "/api/jobs/nightly/pause", "POST", TOKEN)
    assert code == 200 and body["changed"] is True
    assert cli("--store", store_url, "show", "nightly", "--json").json()["state"]["paused"] is True
    rows = cli("--store", store_url, "audit", "--event", "job.paused", "--json").json()
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert any(row.get("by") == "http" and row.get("client") == "127.0.0.1" for row in rows)
