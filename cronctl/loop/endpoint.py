"""`cronctl run --http`: a small read-only HTTP endpoint beside the loop.

One thread and one selector serve every client, so a client can never hold a
thread: a request head must arrive within CLIENT_TIMEOUT and fit in MAX_HEAD
bytes, at most MAX_CONNECTIONS are open at once (the next ones get a 503 and are
closed at once), and an answer a client does not read is dropped at its deadline.
The loop's threads never wait for this one. Only GET and HEAD are answered and no
route changes state; the routes (what each path returns) are given by the caller.
"""

from __future__ import annotations

import ipaddress
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cronctl.errors import CronctlError, UsageError

MAX_CONNECTIONS = 64
MAX_HEAD = 16 * 1024
CLIENT_TIMEOUT = 5.0
POLL = 0.5
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            408: "Request Timeout", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
            503: "Service Unavailable"}


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"


Route = Callable[[], Reply]


def parse_listen(text: str, allow_remote: bool) -> tuple[str, int]:
    """`ADDR:PORT` (`[v6]:PORT` for IPv6) -> (host, port); a non-loopback host needs allow_remote."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--http {text!r}: expected ADDR:PORT, e.g. 127.0.0.1:9100 or [::1]:9100")
    if not allow_remote and not _is_loopback(host):
        raise UsageError(f"--http {text!r}: {host} is not a loopback address; the endpoint would be "
                         "reachable from other hosts. Add --http-allow-remote if that is intended")
    return host, int(port_text)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: where it resolves to is not ours to trust


class _Client:
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.deadline = deadline
        self.head = b""
        self.out: bytes | None = None


class Endpoint:
    def __init__(self, host: str, port: int, routes: Mapping[str, Route]) -> None:
        self.routes = dict(routes)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((host, port))
        except OSError as exc:
            self._listener.close()
            raise CronctlError(f"--http {host}:{port}: cannot listen there ({exc.strerror or exc})") from None
        self._listener.listen(128)
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        # stop() writes here: with no client the thread sleeps in select() without a timeout.
        self._waker, self._wake_end = socket.socketpair()
        self._selector.register(self._waker, selectors.EVENT_READ, self._waker)
        self._clients: dict[int, _Client] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cronctl-http", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def open_connections(self) -> int:
        return len(self._clients)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake_end.send(b"x")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for client in list(self._clients.values()):
            self._close(client)
        self._selector.close()
        self._listener.close()
        self._waker.close()
        self._wake_end.close()

    # --- the serving thread ---------------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception as exc:  # the endpoint must never take the loop down
                print(f"cronctl: error in the HTTP endpoint (it goes on): {type(exc).__name__}: {exc}",
                      file=sys.stderr)

    def _step(self) -> None:
        # Deadlines only matter while a client is connected: an idle endpoint never wakes.
        for key, mask in self._selector.select(POLL if self._clients else None):
            if key.data is None:
                self._accept()
            elif key.data is self._waker:
                return
            elif mask & selectors.EVENT_READ:
                self._read(key.data)
            else:
                self._write(key.data)
        self._expire()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of fds or the like: what is open still gets served
                return
            sock.setblocking(False)
            if len(self._clients) >= MAX_CONNECTIONS:
                _send_and_close(sock, _response(Reply(503, b'{"error": "too many connections"}\n')))
                continue
            # Socket deadlines are real I/O time, not the loop's (possibly fake) clock.
            client = _Client(sock, time.monotonic() + CLIENT_TIMEOUT)
            self._clients[client.fd] = client
            self._selector.register(sock, selectors.EVENT_READ, client)

    def _read(self, client: _Client) -> None:
        try:
            data = client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(client)
            return
        client.head += data
        if b"\r\n\r\n" in client.head or b"\n\n" in client.head:
            self._answer(client, *self._route(client.head))
        elif len(client.head) > MAX_HEAD:
            self._answer(client, Reply(431, b'{"error": "request head too large"}\n'), False)

    def _route(self, head: bytes) -> tuple[Reply, bool]:
        line = head.split(b"\n", 1)[0].decode("latin-1").strip().split()
        if len(line) != 3:
            return Reply(400, b'{"error": "bad request line"}\n'), False
        method, target = line[0], line[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            return Reply(405, b'{"error": "read-only endpoint: GET or HEAD"}\n'), False
        route = self.routes.get(target)
        if route is None:
            known = ", ".join(sorted(self.routes))
            return Reply(404, f'{{"error": "no such path; try {known}"}}\n'.encode()), False
        try:
            return route(), method == "HEAD"
        except Exception as exc:
            return Reply(500, f'{{"error": "{type(exc).__name__}"}}\n'.encode()), False

    def _answer(self, client: _Client, reply: Reply, head_only: bool) -> None:
        client.out = _response(reply, head_only)
        self._selector.modify(client.sock, selectors.EVENT_WRITE, client)
        self._write(client)

    def _write(self, client: _Client) -> None:
        assert client.out is not None
        try:
            sent = client.sock.send(client.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        client.out = client.out[sent:]
        if not client.out:
            self._close(client)

    def _expire(self) -> None:
        now = time.monotonic()
        for client in [c for c in self._clients.values() if c.deadline <= now]:
            if client.out is None:  # still sending its head: tell it, if it listens
                self._forget(client)
                _send_and_close(client.sock, _response(Reply(408, b'{"error": "request timeout"}\n')))
            else:
                self._close(client)

    def _forget(self, client: _Client) -> None:
        self._clients.pop(client.fd, None)
        try:
            self._selector.unregister(client.sock)
        except (KeyError, ValueError):
            pass

    def _close(self, client: _Client) -> None:
        self._forget(client)
        client.sock.close()


def _response(reply: Reply, head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Unknown')}\r\n"
            f"Content-Type: {reply.content_type}\r\nContent-Length: {len(reply.body)}\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n").encode()
    return head if head_only else head + reply.body


def _send_and_close(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except OSError:
        pass
    sock.close()
