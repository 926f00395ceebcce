"""`--store` / $CRONCTL_STORE and `cronctl store import-json`, through the real CLI entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.cli import fastpath
from cronctl.clock import FakeClock, SystemClock
from cronctl.store.claims import Dispatched, Lease, Owner
from cronctl.store.pg.auditlog import PgAuditLog
from cronctl.store.pg.connect import connect, parse_store_url
from cronctl.store.pg.leases import PgLeaseStore
from cronctl.store.pg.session import PgSession
from tests.conftest import cronctl_bin

READS = (("list", "--json"), ("show", "tick", "--json"), ("status", "--json"))


def with_password(url: str, password: str = "s3cret-pw") -> str:
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user.split(':')[0]}:{password}@{host}"  # the test server trusts: any password


def filled_home(cli: Any) -> None:
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    assert cli("add", "nightly", "--cron", "0 3 * * *", "--", "echo hi").code == 0
    assert cli("force-run", "tick").code == 0  # one real run: a history record
    assert cli("pause", "nightly").code == 0


def test_imported_store_reads_as_the_json_one(cli: Any, store_url: str) -> None:
    filled_home(cli)
    before = {args: cli(*args).out for args in READS}
    json_history = cli("history", "--json").json()["runs"]

    imported = cli("--store", store_url, "store", "import-json", "--json")
    assert imported.code == 0, imported.err
    assert (imported.json()["jobs"], imported.json()["records"]) == (2, 1)

    for args in READS:
        if args[0] != "status":
            assert cli("--store", store_url, *args).out == before[args], args
    # status: the same jobs and counters; its loop side is the cluster's (SPEC §9: no live loop is stale)
    status, json_status = cli("--store", store_url, "status", "--json").json(), json.loads(before[READS[-1]])
    assert (status["jobs"], status["counters"]) == (json_status["jobs"], json_status["counters"])
    assert (status["loop"]["state"], status["loops"], status["loop_stale"]) == ("stopped", [], True)
    pg_history = cli("--store", store_url, "history", "--json").json()["runs"]
    assert [{k: v for k, v in run.items() if k != "host"} for run in pg_history] == json_history
    assert all(run["host"] for run in pg_history)
    table = cli("--store", store_url, "history")
    assert table.code == 0 and "success" in table.out


def test_an_import_never_overwrites_jobs_silently(cli: Any, store_url: str) -> None:
    filled_home(cli)
    assert cli("--store", store_url, "store", "import-json").code == 0
    again = cli("--store", store_url, "store", "import-json")
    assert again.code == 1 and "already in the PostgreSQL store: nightly, tick" in again.err
    assert "Traceback" not in again.err
    replaced = cli("--store", store_url, "store", "import-json", "--replace")
    assert replaced.code == 0 and "imported 2 job(s) and 1 history record(s)" in replaced.out
    assert len(cli("--store", store_url, "history", "--json").json()["runs"]) == 1


def test_import_from_another_home(cli: Any, store_url: str, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    filled_home(cli)
    monkeypatch.setenv("CRONCTL_HOME", str(tmp_path / "elsewhere"))
    assert cli("--store", store_url, "store", "import-json", "--from", str(tmp_path / "home")).code == 0
    assert [job["name"] for job in cli("--store", store_url, "list", "--json").json()["jobs"]] == ["nightly", "tick"]


def test_the_password_is_never_shown(cli: Any, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = with_password(store_url)
    added = cli("--store", url, "add", "tick", "--every", "1h", "--", "true")
    assert added.code == 0 and "s3cret-pw" not in added.err + added.out
    status = cli("--store", url, "status")
    assert "s3cret-pw" not in status.err + status.out and "Traceback" not in status.err
    monkeypatch.setenv("CRONCTL_STORE", url)
    listed = cli("list", "--json")
    assert listed.code == 0 and [job["name"] for job in json.loads(listed.out)["jobs"]] == ["tick"]


def test_an_unreachable_store_is_one_clear_line(cli: Any) -> None:
    gone = cli("--store", "postgresql://cronctl:s3cret-pw@127.0.0.1:1/cronctl", "list")
    assert gone.code == 1 and "cannot reach the PostgreSQL store" in gone.err
    assert "s3cret-pw" not in gone.err and "Traceback" not in gone.err


def test_import_needs_a_store(cli: Any) -> None:
    missing = cli("store", "import-json")
    assert missing.code == 1 and "--store URL or $CRONCTL_STORE" in missing.err


def test_the_fast_path_answers_a_postgres_store_of_the_environment_as_the_full_cli(
        store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 21: typer's import was most of a one-job `add` on PostgreSQL. `--store` stays typer's.
    monkeypatch.setenv("CRONCTL_STORE", "postgresql://cronctl@db/cronctl")
    assert fastpath.parse(["status", "--json"]) is not None and fastpath.parse(["add", "a", "--", "x"]) is not None
    assert fastpath.parse(["--store", store_url, "list"]) is None
    env = {**os.environ, "CRONCTL_HOME": str(tmp_path / "home"), "NO_COLOR": "1", "CRONCTL_STORE": store_url}

    def both(*argv: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
        fast = subprocess.run([*cronctl_bin(), *argv], env=env, capture_output=True, text=True, timeout=60)
        typer_way = subprocess.run([sys.executable, "-c", "import sys; from cronctl.cli.main import main; "
                                    "main(sys.argv[1:])", *argv], env=env, capture_output=True, text=True, timeout=60)
        return fast, typer_way

    for name in ("backup-db", "backup-home", "report"):
        added = subprocess.run([*cronctl_bin(), "add", name, "--every", "1h", "--", "true"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert (added.returncode, added.stderr) == (0, "") and added.stdout.startswith(f"added {name}: every 1h")
    for argv in (["list", "--json"], ["list", "backup-", "--json"], ["show", "report", "--json"],
                 ["status", "--json"], ["status", "--stale", "--json"], ["history", "--json"], ["show", "ghost"],
                 ["remove", "ghost"], ["list", "nothing"]):
        fast, typer_way = both(*argv)
        assert (fast.returncode, fast.stdout, fast.stderr) == (typer_way.returncode, typer_way.stdout,
                                                               typer_way.stderr), argv
    assert [job["name"] for job in json.loads(both("list", "backup-", "--json")[0].stdout)["jobs"]] == [
        "backup-db", "backup-home"]
    env["CRONCTL_STORE"] = "postgresql://cronctl:s3cret-pw@127.0.0.1:1/cronctl"
    fast, typer_way = both("list")
    assert (fast.returncode, fast.stderr) == (typer_way.returncode, typer_way.stderr)
    assert fast.returncode == 1 and "cannot reach the PostgreSQL store" in fast.stderr
    assert "s3cret-pw" not in fast.stderr and "Traceback" not in fast.stderr


def test_status_judges_a_run_of_another_host_by_its_lease(cli: Any, store_url: str) -> None:
    filled_home(cli)
    assert cli("--store", store_url, "store", "import-json").code == 0
    remote = Owner("gen-remote", 4242, 1.0, "a-boot-of-another-host")
    with connect(parse_store_url(store_url)) as conn:
        leases = PgLeaseStore(conn, "host-b", clock=SystemClock())
        now = leases.db_now()
        soon = datetime.now(timezone.utc) + timedelta(minutes=5)
        [run] = leases.claim_force("tick", now, remote, Lease(0.0, soon)).claims
        leases.mark_dispatched(remote, [Dispatched("tick", run.run_id, 4242, 1.0, 0.0)], now)
        by_name = {job["name"]: job for job in cli("--store", store_url, "status", "--json").json()["jobs"]}
        assert (by_name["tick"]["state"], by_name["tick"]["running"]) == ("running", [run.run_id])

        leases.renew(remote, {run.run_id: "tick"}, Lease(0.0, datetime.now(timezone.utc) - timedelta(minutes=1)))
    by_name = {job["name"]: job for job in cli("--store", store_url, "status", "--json").json()["jobs"]}
    assert by_name["tick"]["state"] == "wedged" and "has not been renewed" in by_name["tick"]["reason"]


def test_audit_reads_the_databases_rows(cli: Any, store_url: str, home: Path) -> None:
    filled_home(cli)
    assert cli("--store", store_url, "store", "import-json").code == 0
    home_rows = (home / "audit.jsonl").read_bytes() if (home / "audit.jsonl").exists() else b""

    rows = cli("--store", store_url, "audit", "--json").json()["rows"]
    assert [(row["event"], row["job"], row["source"]) for row in rows] == [
        ("job.added", "nightly", "import-json"), ("job.added", "tick", "import-json")]
    assert all(row["host"] for row in rows)
    if (home / "audit.jsonl").exists():
        assert (home / "audit.jsonl").read_bytes() == home_rows  # the home's log is not the store's


def test_the_database_audit_log_writes_and_reads_rows_as_the_file_log_does(store_url: str, tmp_path: Path) -> None:
    session = PgSession(parse_store_url(store_url))
    log = PgAuditLog(session, tmp_path / "audit.jsonl", FakeClock(datetime(2026, 3, 1, 12, tzinfo=timezone.utc)))
    echoed: list[dict[str, Any]] = []
    log.listeners.append(echoed.append)
    written = log.append("job.paused", job="tick", why=None)
    log.append("cli.some_new_event", detail=3)  # any event name, as the file log takes
    from cronctl.store.pg.identity import host_id

    # the host that wrote it, as every row of the lease store says (issue 26)
    assert written == {"ts": "2026-03-01T12:00:00.000+00:00", "event": "job.paused", "job": "tick",
                       "host": host_id()}
    rows = list(log.rows())
    assert all(row["host"] == host_id() for row in rows)
    assert [(row["event"], row.get("job"), row.get("detail")) for row in rows] == [
        ("job.paused", "tick", None), ("cli.some_new_event", None, 3)]
    assert echoed[0] == written and not (tmp_path / "audit.jsonl").exists()


def test_the_text_of_the_read_commands_is_the_json_stores_too(cli: Any, store_url: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from cronctl.cli import app as cli_module

    monkeypatch.setitem(cli_module._state, "clock", FakeClock(datetime(2026, 3, 1, 12, tzinfo=timezone.utc)))
    assert cli("add", "tick", "--every", "1h", "--", "true").code == 0
    assert cli("add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris", "--", "echo hi").code == 0
    assert cli("pause", "nightly").code == 0
    reads = (("list",), ("show", "tick"), ("show", "nightly"), ("status",), ("history",))
    before = {args: cli(*args) for args in reads}
    assert cli("--store", store_url, "store", "import-json").code == 0
    for args in reads:
        after = cli("--store", store_url, *args)
        if args == ("status",):  # the loop lines are the cluster's (SPEC §9); the job table is the same
            assert after.out.split("\n", 1)[1] == before[args].out.split("\n", 1)[1]
            assert after.out.startswith("loop: stopped — no loop runs on this store")
            continue
        assert (after.code, after.out) == (before[args].code, before[args].out), args


def test_the_loops_unit_names_the_store_without_its_password(cli: Any, store_url: str) -> None:
    unit = cli("--store", with_password(store_url), "export", "--format", "systemd-service")
    assert unit.code == 0, unit.err
    bare = store_url.split("?", 1)[0]
    assert f'Environment="CRONCTL_STORE={bare}' in unit.out and "s3cret-pw" not in unit.out + unit.err
    assert "~/.pgpass" in unit.out
