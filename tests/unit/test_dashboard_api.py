"""The dashboard's API and page on the --http endpoint, in-process (SPEC §14): the JSON the
page reads, the timeline's bars, the incremental readers, the token rule for POST, and the
page's promises that need no browser (offline, small, a strict Content-Security-Policy)."""

from __future__ import annotations

import json
import os
import re
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import msgspec
import pytest

from cronctl.context import Context
from cronctl.errors import UsageError
from cronctl.loop.endpoint import MAX_BODY, Endpoint
from cronctl.ops.status import status, status_json
from cronctl.ops.webactions import read_token
from cronctl.ops.webpage import dashboard_actions, dashboard_handlers
from cronctl.ops.webruns import Run, RunIndex
from cronctl.ops.webtimeline import Timeline, timeline
from cronctl.store.history import append_record
from cronctl.timefmt import to_iso

TOKEN = "s3cret-token-of-the-test-0123456789"


def index_of(records: list[dict[str, Any]]) -> RunIndex:
    index = RunIndex()
    index.add([msgspec.convert(r, Run) for r in records])
    return index


def record(job: str, start: datetime, seconds: float = 1.0, status_word: str = "success",
           **extra: Any) -> dict[str, Any]:
    run_id = start.strftime("%Y%m%dT%H%M%S") + f"-{abs(hash((job, start))) % 10**8:08x}"
    return {"job": job, "run_id": run_id, "status": status_word, "slot": to_iso(start), "started_at": to_iso(start),
            "ended_at": to_iso(start + timedelta(seconds=seconds)), "duration": seconds, "trigger": "schedule",
            "late": False, "reason": None if status_word == "success" else "exit_code_nonzero",
            "output_tail": "<script>alert(1)</script>\n", **extra}


class Server:
    def __init__(self, home: Path, token: str | None) -> None:
        self.ctx = Context.open(home)
        self.endpoint = Endpoint("127.0.0.1", 0, {}, dashboard_handlers(self.ctx, token is not None),
                                 dashboard_actions(self.ctx, token))
        self.endpoint.start()
        self.base = "http://%s:%d" % self.endpoint.address

    def call(self, path: str, method: str = "GET", token: str | None = None,
             data: bytes | None = None) -> tuple[int, bytes, Any]:
        request = urllib.request.Request(self.base + path, method=method, data=data,
                                         headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read(), response.headers
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read(), exc.headers

    def json(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        code, body, _ = self.call(path, **kwargs)
        return code, json.loads(body)


@pytest.fixture
def jobs(home: Path, cli: Any) -> Path:
    assert cli("add", "alpha", "--every", "1h", "--", "echo", "hi").code == 0
    assert cli("add", "beta", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--", "false").code == 0
    return home


def serve(home: Path, token: str | None) -> Iterator[Server]:
    server = Server(home, token)
    yield server
    server.endpoint.stop()


@pytest.fixture
def server(jobs: Path) -> Iterator[Server]:
    yield from serve(jobs, None)


@pytest.fixture
def armed(jobs: Path) -> Iterator[Server]:
    yield from serve(jobs, TOKEN)


def test_api_status_is_the_document_of_status_json(server: Server, cli: Any) -> None:
    code, served = server.json("/api/status")
    printed = cli("status", "--json").json()
    assert code == 200
    assert [(j["name"], j["state"], j["schedule"]) for j in served["jobs"]] == \
        [(j["name"], j["state"], j["schedule"]) for j in printed["jobs"]]
    assert set(served) == set(status_json(status(server.ctx), only_stale=False))


def test_api_jobs_speak_the_schedule_in_words_and_the_zone(server: Server) -> None:
    code, data = server.json("/api/jobs")
    beta = next(job for job in data["jobs"] if job["name"] == "beta")
    assert code == 200 and beta["schedule_words"] == "At 03:00" and beta["timezone"] == "Europe/Berlin"
    assert beta["next_fire_at"].endswith("+00:00")
    assert server.json("/api/jobs/nope")[0] == 404


def test_api_history_filters_by_job_since_status_and_chain(server: Server, jobs: Path) -> None:
    now = datetime.now(timezone.utc)
    ctx = server.ctx
    append_record(ctx.paths, record("alpha", now - timedelta(hours=3)))
    append_record(ctx.paths, record("alpha", now - timedelta(minutes=10), status_word="error"))
    append_record(ctx.paths, record("beta", now - timedelta(minutes=5), chain="C1"))
    assert len(server.json("/api/history")[1]["runs"]) == 3
    assert [r["job"] for r in server.json("/api/history?job=beta")[1]["runs"]] == ["beta"]
    assert len(server.json("/api/history?since=1h")[1]["runs"]) == 2
    since = to_iso(now - timedelta(minutes=7))
    recent = server.json("/api/history?since=" + urllib.request.quote(since or ""))[1]["runs"]
    assert [r["job"] for r in recent] == ["beta"]
    assert [r["status"] for r in server.json("/api/history?status=error")[1]["runs"]] == ["error"]
    assert [r["job"] for r in server.json("/api/history?chain=C1")[1]["runs"]] == ["beta"]
    assert len(server.json("/api/history?n=1")[1]["runs"]) == 1
    code, error = server.json("/api/history?since=yesterday")
    assert code == 400 and "since=" in error["error"]
    assert server.json("/api/history?n=0")[0] == 400


def test_history_is_read_again_only_for_what_was_appended_or_after_a_trim(server: Server) -> None:
    def kept() -> int:  # the runs the reader keeps for the timeline and strip
        jobs = server.json("/api/history?view=timeline&since=1h&res=1")[1]["jobs"]
        return len(jobs.get("alpha", {}).get("recent", []))

    now = datetime.now(timezone.utc)
    append_record(server.ctx.paths, record("alpha", now - timedelta(minutes=3)))
    assert kept() == 1
    append_record(server.ctx.paths, record("alpha", now - timedelta(minutes=2)))
    assert kept() == 2 and len(server.json("/api/history?job=alpha")[1]["runs"]) == 2
    path = server.ctx.paths.history("alpha")
    with open(path, "ab") as handle:
        handle.write(b'{"job": "alpha", "torn')  # a writer cut short: skipped until its end arrives
    assert kept() == 2
    kept_line = path.read_bytes().splitlines(keepends=True)[-2:-1]  # a trim replaces the file
    tmp = path.with_name("h.tmp")
    tmp.write_bytes(b"".join(kept_line))
    os.replace(tmp, path)
    assert kept() == 1 and len(server.json("/api/history?job=alpha")[1]["runs"]) == 1


def test_the_timeline_merges_runs_closer_than_a_pixel_and_keeps_late_starts_and_skips() -> None:
    since = datetime(2026, 12, 1, tzinfo=timezone.utc)
    records = [record("a", since - timedelta(hours=1))]  # before the window: only in the strip
    records += [record("a", since + timedelta(minutes=m)) for m in range(10)]
    records.append(record("a", since + timedelta(minutes=10), status_word="error"))
    records.append(record("a", since + timedelta(minutes=11), late=True))
    records.append(record("a", since + timedelta(minutes=12), status_word="skipped") | {"started_at": None})
    data = timeline({"a": index_of(records)}, since, since + timedelta(hours=1), res=90)
    bars = data["jobs"]["a"]["bars"]
    assert [(bar[2], bar[3], bar[4]) for bar in bars] == [(0, 10, 0), (1, 1, 0), (0, 1, 1)]
    assert bars[0][0] == 0 and bars[0][1] == 541.0
    assert data["jobs"]["a"]["ticks"] == [720.0]
    assert len(data["jobs"]["a"]["recent"]) == 14 and data["jobs"]["a"]["last"]["status"] == "skipped"
    fine = timeline({"a": index_of(records)}, since, since + timedelta(hours=1), res=1)
    assert len(fine["jobs"]["a"]["bars"]) == 12  # zoomed in: a bar per run


def test_the_timeline_kept_between_polls_merges_only_what_was_appended() -> None:
    since = datetime(2026, 12, 1, tzinfo=timezone.utc)
    until = since + timedelta(hours=2)
    rows = [record("a", since + timedelta(minutes=m), status_word="error" if 20 <= m < 25 else "success")
            for m in range(60)]
    kept, index = Timeline(), index_of(rows)
    kept.build({"a": index}, since, until, 30)
    more = [record("a", since + timedelta(minutes=m)) for m in range(60, 90)]
    index.add([msgspec.convert(r, Run) for r in more])
    assert kept.build({"a": index}, since, until, 30) == timeline({"a": index_of(rows + more)}, since, until, 30)
    trimmed = index_of((rows + more)[-40:])  # a trim: a new index, built again
    assert kept.build({"a": trimmed}, since, until, 30) == timeline({"a": trimmed}, since, until, 30)
    later = since + timedelta(minutes=30)  # the window moved: built again from its start
    assert kept.build({"a": trimmed}, later, until, 30) == timeline({"a": trimmed}, later, until, 30)
    assert kept.build({}, later, until, 30)["jobs"] == {}


def test_a_run_that_ended_before_the_last_kept_is_put_in_its_place() -> None:
    since = datetime(2026, 12, 1, tzinfo=timezone.utc)
    rows = [record("a", since + timedelta(minutes=m)) for m in (1, 3, 2)]
    index = index_of(rows)
    assert list(index.ends) == sorted(index.ends) and index.version == 1
    assert [run.run_id for run in index.recent] == [rows[0]["run_id"], rows[2]["run_id"], rows[1]["run_id"]]


def test_slots_skipped_by_overlap_or_missed_are_ticks_from_the_audit() -> None:
    since = datetime(2026, 12, 1, tzinfo=timezone.utc)
    rows = [record("a", since + timedelta(minutes=1))]
    audit = [{"event": "run.skipped", "job": "a", "slot": to_iso(since + timedelta(minutes=2)), "reason": "overlap"},
             {"event": "run.missed", "job": "b", "slot": to_iso(since + timedelta(minutes=3)), "count": 4},
             {"event": "run.missed", "job": "b", "slot": to_iso(since - timedelta(minutes=3)), "count": 1},
             {"event": "run.finished", "job": "a", "slot": to_iso(since + timedelta(minutes=4))}]
    data = Timeline().build({"a": index_of(rows)}, since, since + timedelta(hours=1), 10, audit)
    assert data["jobs"]["a"]["ticks"] == [120.0] and len(data["jobs"]["a"]["bars"]) == 1
    assert data["jobs"]["b"]["ticks"] == [180.0] and data["jobs"]["b"]["bars"] == []


def test_api_audit_filters_since_event_and_job(server: Server) -> None:
    server.ctx.audit.append("run.missed", job="alpha", count=2)
    server.ctx.audit.append("chain.finished", root="alpha", chain="C", outcome="failed", statuses={"a": "skipped"})
    code, data = server.json("/api/audit?n=50")
    assert code == 200 and [r["event"] for r in data["rows"]][-2:] == ["run.missed", "chain.finished"]
    assert [r["event"] for r in server.json("/api/audit?event=chain.finished")[1]["rows"]] == ["chain.finished"]
    assert {r["job"] for r in server.json("/api/audit?job=alpha")[1]["rows"]} == {"alpha"}
    assert server.json("/api/audit?since=10m")[0] == 200
    assert server.json("/api/audit?since=2999-01-01T00:00:00%2B00:00")[1]["rows"] == []


def test_without_a_token_every_post_is_403_and_nothing_changes(server: Server, cli: Any) -> None:
    for verb in ("pause", "resume", "force-run", "kill"):
        code, data = server.json(f"/api/jobs/alpha/{verb}", method="POST", token=TOKEN)
        assert code == 403 and "--http-token" in data["error"]
    assert cli("show", "alpha", "--json").json()["state"].get("paused") is not True
    assert not [r for r in server.json("/api/audit?n=200")[1]["rows"] if r.get("by") == "http"]


def test_a_get_never_acts(armed: Server, cli: Any) -> None:
    assert armed.call("/api/jobs/alpha/pause")[0] == 404
    assert cli("show", "alpha", "--json").json()["state"].get("paused") is not True


def test_with_the_token_pause_and_resume_act_and_are_audited_by_http(armed: Server, cli: Any) -> None:
    assert armed.json("/api/jobs/alpha/pause", method="POST", token="wrong-token-xxxxxxxxxx")[0] == 403
    assert armed.json("/api/jobs/alpha/pause", method="POST")[0] == 403
    assert cli("show", "alpha", "--json").json()["state"].get("paused") is not True
    code, data = armed.json("/api/jobs/alpha/pause", method="POST", token=TOKEN)
    assert code == 200 and data["changed"] is True
    assert cli("show", "alpha", "--json").json()["state"]["paused"] is True
    assert armed.json("/api/jobs/alpha/resume", method="POST", token=TOKEN)[0] == 200
    assert cli("show", "alpha", "--json").json()["state"].get("paused") is not True
    rows = [r for r in armed.json("/api/audit?n=200")[1]["rows"] if r.get("by") == "http"]
    assert [(r["event"], r["client"]) for r in rows] == [("job.paused", "127.0.0.1"), ("job.resumed", "127.0.0.1")]
    assert armed.json("/api/jobs/nope/pause", method="POST", token=TOKEN)[0] == 404
    assert armed.json("/api/jobs/alpha/kill", method="POST", token=TOKEN)[0] == 409  # not running
    assert armed.json("/api/jobs/alpha/explode", method="POST", token=TOKEN)[0] == 404


def test_a_post_body_over_the_cap_is_refused(armed: Server) -> None:
    code, _, _ = armed.call("/api/jobs/alpha/pause", method="POST", token=TOKEN, data=b"x" * (MAX_BODY + 1))
    assert code == 413


def test_a_post_whose_body_never_comes_does_not_hold_the_endpoint(armed: Server,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from cronctl.loop import endpoint as endpoint_mod

    monkeypatch.setattr(endpoint_mod, "CLIENT_TIMEOUT", 1.0)
    host, port = armed.endpoint.address
    slow = socket.create_connection((host, port), timeout=30)
    slow.sendall(b"POST /api/jobs/alpha/pause HTTP/1.1\r\nContent-Length: 100\r\n\r\nxx")
    assert armed.call("/api/status")[0] == 200
    assert slow.recv(4096).startswith(b"HTTP/1.1 408")
    slow.close()


def test_the_page_is_offline_small_and_forbids_inline_script(server: Server) -> None:
    total = 0
    for path in ("/", "/jobs/alpha", "/assets/app.js", "/assets/app.css"):
        code, body, headers = server.call(path)
        assert code == 200, path
        total += len(body) if path != "/jobs/alpha" else 0
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        assert "unsafe-inline" not in headers["Content-Security-Policy"]
        # No CDN, no external font: no URL but the SVG namespace, which names and fetches nothing.
        assert not re.search(rb"https?://", body.replace(b"http://www.w3.org/2000/svg", b"")), path
    assert total < 150 * 1024
    assert b'content="off"' in server.call("/")[1]
    script = server.call("/assets/app.js")[1]
    assert not re.search(rb"innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(", script)
    assert server.call("/assets/index.html")[0] == 404


def test_the_page_says_when_actions_are_on(armed: Server) -> None:
    assert b'content="on"' in armed.call("/")[1]


def test_the_log_link_serves_the_runs_output_as_plain_text(server: Server) -> None:
    paths = server.ctx.paths
    paths.job_runs_dir("alpha").mkdir(parents=True, exist_ok=True)
    paths.run_log("alpha", "20261201T000000-abcdef12").write_bytes(b"<b>out</b>\n")
    code, body, headers = server.call("/api/logs/alpha/20261201T000000-abcdef12")
    assert code == 200 and body == b"<b>out</b>\n" and headers["Content-Type"].startswith("text/plain")
    assert server.call("/api/logs/alpha/nope")[0] in (404, 503)


def test_a_token_file_must_be_private_and_long_enough(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    assert read_token(path) == TOKEN
    path.chmod(0o644)
    with pytest.raises(UsageError, match="chmod 600"):
        read_token(path)
    path.chmod(0o600)
    path.write_text("short")
    with pytest.raises(UsageError, match="at least 16"):
        read_token(path)
    with pytest.raises(UsageError, match="cannot read"):
        read_token(tmp_path / "missing")


def test_run_refuses_a_bad_token_file_before_starting(home: Path, cli: Any, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o644)
    done = cli("run", "--http", "127.0.0.1:0", "--http-token", str(token))
    assert done.code == 2 and "chmod 600" in done.err and str(token) in done.err and "Traceback" not in done.err
    token.chmod(0o600)
    done = cli("run", "--http-token", str(token))
    assert done.code == 2 and "--http-token needs --http" in done.err
    assert not (home / "scheduler.json").exists()  # refused before the loop started
