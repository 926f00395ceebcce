"""The --http endpoint on its own: routing, the read-only rule, the address check, and
clients that try to stall it (slowloris, a 1 MB head, 1,000 connections)."""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from cronctl.errors import CronctlError, UsageError
from cronctl.loop import endpoint as endpoint_mod
from cronctl.loop.endpoint import MAX_CONNECTIONS, Endpoint, Reply, parse_listen


@pytest.fixture
def server() -> Iterator[Endpoint]:
    served = Endpoint("127.0.0.1", 0, {"/ping": lambda: Reply(200, b'{"pong": true}\n'),
                                        "/boom": lambda: 1 / 0})  # type: ignore[dict-item,return-value]
    served.start()
    yield served
    served.stop()


def get(server: Endpoint, path: str, timeout: float = 10.0) -> tuple[int, bytes, str]:
    host, port = server.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as response:
            return response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


def test_routes_and_errors(server: Endpoint) -> None:
    assert get(server, "/ping") == (200, b'{"pong": true}\n', "application/json")
    assert get(server, "/ping?verbose=1")[0] == 200
    code, body, _ = get(server, "/nope")
    assert code == 404 and b"/ping" in body
    assert get(server, "/boom")[0] == 500  # a failing page is an answer, not a dead endpoint
    assert get(server, "/ping")[0] == 200


def test_nothing_but_get_and_head(server: Endpoint) -> None:
    host, port = server.address
    request = urllib.request.Request(f"http://{host}:{port}/ping", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 405
    head = urllib.request.Request(f"http://{host}:{port}/ping", method="HEAD")
    with urllib.request.urlopen(head, timeout=10) as response:
        assert response.status == 200 and response.read() == b""


@pytest.mark.parametrize("text", ["127.0.0.1:9100", "localhost:9100", "[::1]:9100", "127.0.0.2:0"])
def test_loopback_addresses_need_no_permission(text: str) -> None:
    host, port = parse_listen(text, allow_remote=False)
    assert host in text and str(port) in text


@pytest.mark.parametrize("text", ["0.0.0.0:9100", "192.0.2.1:9100", "[::]:9100", "example.com:9100"])
def test_other_addresses_are_refused_without_allow_remote(text: str) -> None:
    with pytest.raises(UsageError, match="--http-allow-remote"):
        parse_listen(text, allow_remote=False)
    assert parse_listen(text, allow_remote=True)[1] == 9100


@pytest.mark.parametrize("text", ["9100", "host:", ":9100", "1.2.3.4:99999", "a:b"])
def test_malformed_addresses_say_what_is_expected(text: str) -> None:
    with pytest.raises(UsageError, match="ADDR:PORT"):
        parse_listen(text, allow_remote=True)


def test_a_busy_port_is_a_clear_error(server: Endpoint) -> None:
    host, port = server.address
    with pytest.raises(CronctlError, match="cannot listen"):
        Endpoint(host, port, {})


@pytest.mark.slow
def test_a_slowloris_client_neither_blocks_others_nor_stays(server: Endpoint,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint_mod, "CLIENT_TIMEOUT", 1.0)
    slow = socket.create_connection(server.address, timeout=30)
    slow.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    assert get(server, "/ping")[0] == 200  # others are served meanwhile
    slow.settimeout(30)
    answer = slow.recv(4096)  # the endpoint gives up on it: a 408, then EOF
    assert answer.startswith(b"HTTP/1.1 408")
    assert slow.recv(4096) == b""
    slow.close()


def test_a_one_megabyte_head_is_refused_and_closed(server: Endpoint) -> None:
    client = socket.create_connection(server.address, timeout=30)
    client.sendall(b"GET /ping HTTP/1.1\r\n")
    try:
        client.sendall(b"X-Big: " + b"a" * (1 << 20))
    except (BrokenPipeError, ConnectionResetError):
        pass  # closed while we were still sending: refused all the same
    answer = b""
    try:
        while chunk := client.recv(4096):
            answer += chunk
    except ConnectionResetError:
        pass
    client.close()
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:80]
    assert get(server, "/ping")[0] == 200


@pytest.mark.slow
def test_a_thousand_connections_cannot_exhaust_it(server: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(endpoint_mod, "CLIENT_TIMEOUT", 2.0)
    flood: list[socket.socket] = []
    try:
        for _ in range(1000):
            sock = socket.socket()
            sock.settimeout(30)
            sock.connect(server.address)
            flood.append(sock)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and server.open_connections < MAX_CONNECTIONS:
            time.sleep(0.05)
        time.sleep(0.5)
        assert server.open_connections <= MAX_CONNECTIONS  # the rest were answered 503 and closed
        # Once the idle ones reach their deadline, a real request goes through.
        code = 0
        deadline = time.monotonic() + 30
        while code != 200 and time.monotonic() < deadline:
            try:
                code = get(server, "/ping")[0]
            except (OSError, http.client.HTTPException):  # closed at once while over the cap
                code = 0
            time.sleep(0.1)
        assert code == 200
    finally:
        for sock in flood:
            sock.close()


def test_a_slow_action_never_holds_the_readers() -> None:
    """A POST runs on the action worker: a kill waiting out kill_grace leaves every GET answered."""
    import threading

    from cronctl.loop.endpoint import Request

    release = threading.Event()

    def slow_action(request: Request) -> Reply:
        release.wait(30)
        return Reply(200, b'{"done": true}\n')

    served = Endpoint("127.0.0.1", 0, {"/ping": lambda: Reply(200, b"{}\n")}, actions=slow_action)
    served.start()
    try:
        host, port = served.address
        answer: list[int] = []

        def post() -> None:
            request = urllib.request.Request(f"http://{host}:{port}/act", data=b"", method="POST")
            with urllib.request.urlopen(request, timeout=30) as response:
                answer.append(response.status)

        poster = threading.Thread(target=post)
        poster.start()
        time.sleep(0.3)
        started = time.monotonic()
        assert get(served, "/ping")[0] == 200 and time.monotonic() - started < 5
        assert answer == []  # still waiting for its verb
        release.set()
        poster.join(30)
        assert answer == [200]
    finally:
        release.set()
        served.stop()


def test_without_an_action_handler_a_post_is_still_refused(server: Endpoint) -> None:
    host, port = server.address
    request = urllib.request.Request(f"http://{host}:{port}/ping", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 405
