"""`cronctl run --http` against a real loop, with real requests (urllib).

/metrics is the text of `cronctl metrics` with its content type; /healthz flips
200 -> 503 -> 200 as a job goes stale and recovers, by the judgement of
`cronctl status --stale`; /livez follows the tick thread; a non-loopback address
is refused without --http-allow-remote; a flood of idle connections neither
stops the loop ticking nor grows its fds past the endpoint's cap.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cronctl.loop.endpoint import MAX_CONNECTIONS
from tests.helpers.loophelp import cli, heartbeat, start_loop, stop, wait_ticking, wait_until

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as response:
            return response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


def status_of(port: int, path: str) -> int:
    """The status code, or 0 when the endpoint closed on us (as it does over its connection cap)."""
    try:
        return get(port, path)[0]
    except (OSError, http.client.HTTPException):
        return 0


def get_json(port: int, path: str) -> tuple[int, dict[str, Any]]:
    code, body, _ = get(port, path)
    return code, json.loads(body)


class Loop:
    def __init__(self, home: Path, *args: str) -> None:
        self.port = free_port()
        self.proc = start_loop(home, "--http", f"127.0.0.1:{self.port}", *args)
        wait_ticking(home, self.proc)
        wait_until(lambda: self._answers(), 20)

    def _answers(self) -> bool:
        return status_of(self.port, "/livez") == 200


@pytest.fixture
def loop(home: Path) -> Iterator[Loop]:
    running = Loop(home, "--max-parallel", "1")
    yield running
    assert stop(running.proc, timeout=60) == 0


def test_metrics_are_the_text_of_cronctl_metrics(home: Path, loop: Loop) -> None:
    assert cli(home, "add", "nightly", "--cron", "0 3 * * *", "--", "true").returncode == 0
    code, body, content_type = get(loop.port, "/metrics")
    # The 0.0.4 text format's type: Prometheus 2 and 3 both scrape it without a fallback.
    assert code == 200 and content_type == "text/plain; version=0.0.4; charset=utf-8"
    served = [line for line in body.decode().splitlines() if not line.startswith("cronctl_loop_heartbeat")]
    printed = cli(home, "metrics").stdout.splitlines()
    assert served == [line for line in printed if not line.startswith("cronctl_loop_heartbeat")]
    assert 'cronctl_loop_state{state="ok"} 1.0' in served


def test_healthz_flips_to_503_with_the_stale_job_and_back(home: Path, loop: Loop) -> None:
    code, body = get_json(loop.port, "/healthz")
    assert (code, body["ok"], body["loop"]["state"], body["jobs"], body["stale"]) == (200, True, "ok", 0, [])
    # With --max-parallel 1, a forced long run keeps `victim` from starting: it goes late.
    assert cli(home, "add", "hog", "--every", "1h", "--", "sleep", "300").returncode == 0
    assert cli(home, "force-run", "hog").returncode == 0
    assert cli(home, "add", "victim", "--every", "2s", "--grace", "1s", "--", "true").returncode == 0

    def unhealthy() -> dict[str, Any] | None:
        code, body = get_json(loop.port, "/healthz")
        return body if code == 503 else None

    body = wait_until(unhealthy, 30, interval=0.2)
    assert body["ok"] is False and body["loop"]["state"] == "ok"
    assert [(job["name"], job["state"]) for job in body["stale"]] == [("victim", "late")]
    # The same judgement as `cronctl status --stale`, not a second copy of it.
    assert cli(home, "status", "--stale").returncode == 3

    assert cli(home, "kill", "hog").returncode == 0
    wait_until(lambda: get_json(loop.port, "/healthz")[0] == 200, 30, interval=0.2)
    assert get(loop.port, "/livez")[0] == 200


def test_livez_follows_the_tick_thread(home: Path) -> None:
    running = Loop(home)
    try:
        code, body = get_json(running.port, "/livez")
        assert code == 200 and body["live"] is True and body["role"] == "leader"
    finally:
        assert stop(running.proc, timeout=60) == 0


def test_a_remote_address_is_refused_without_allow_remote(home: Path) -> None:
    done = cli(home, "run", "--http", "0.0.0.0:9")
    assert done.returncode == 2 and "--http-allow-remote" in done.stderr
    assert "Traceback" not in done.stderr
    assert heartbeat(home) is None  # refused before the loop started


def test_a_busy_port_is_a_clear_error(home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = cli(home, "run", "--http", f"127.0.0.1:{port}")
    assert done.returncode == 1 and "cannot listen" in done.stderr and "Traceback" not in done.stderr


def test_a_flood_of_idle_connections_neither_stalls_the_loop_nor_its_fds(home: Path, loop: Loop) -> None:
    process = psutil.Process(loop.proc.pid)
    fds_before = process.num_fds()
    ticks_before = (heartbeat(home) or {}).get("ticks", 0)
    flood: list[socket.socket] = []
    try:
        for _ in range(1000):
            sock = socket.socket()
            sock.settimeout(30)
            sock.connect(("127.0.0.1", loop.port))
            flood.append(sock)
        slow = flood[0]
        slow.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100)  # a slowloris among them
        time.sleep(1.0)
        assert process.num_fds() <= fds_before + MAX_CONNECTIONS + 8
        wait_until(lambda: (heartbeat(home) or {}).get("ticks", 0) > ticks_before + 2, 20)
    finally:
        for sock in flood:
            sock.close()
    wait_until(lambda: status_of(loop.port, "/livez") == 200, 30, interval=0.2)


def test_a_second_loop_is_told_about_the_first_not_about_the_port(home: Path, loop: Loop) -> None:
    done = cli(home, "run", "--http", f"127.0.0.1:{loop.port}")
    assert done.returncode == 1 and "already runs" in done.stderr and "cannot listen" not in done.stderr
    assert status_of(loop.port, "/livez") == 200  # the first one still answers
