"""`cronctl run --http`: a small read-only HTTP endpoint beside the loop.

One thread and one selector serve every client, so a client can never hold a
thread: a request head must arrive within CLIENT_TIMEOUT and fit in MAX_HEAD
bytes, at most MAX_CONNECTIONS are open at once (the next ones get a 503 and are
closed at once), and an answer a client does not read is dropped at its deadline.
The loop's threads never wait for this one. GET and HEAD never change state; the routes
(what each path returns) are given by the caller. A POST is answered only when the caller
gives an `actions` handler (the dashboard's token-guarded verbs, SPEC §14): its body is
capped at MAX_BODY, and it runs on one worker thread of its own, because a verb may wait
(a kill waits out the job's kill_grace) and this thread must go on serving everyone else.
"""

from __future__ import annotations

import ipaddress
import queue
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from cronctl.errors import CronctlError, UsageError

MAX_CONNECTIONS = 64
MAX_HEAD = 16 * 1024
CLIENT_TIMEOUT = 5.0
MAX_BODY = 4096
ACTION_TIMEOUT = 120.0  # a POST handed to the worker: how long its answer may take
MAX_PENDING_ACTIONS = 8
POLL = 0.5
_REASONS = {200: "OK", 202: "Accepted", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 409: "Conflict", 413: "Content Too Large",
            431: "Request Header Fields Too Large", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Request:
    """One parsed request, for the handlers that need more than the path."""

    method: str
    path: str  # percent-decoded, without the query
    query: dict[str, list[str]] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case
    body: bytes = b""
    client: str = ""  # the peer's address


Route = Callable[[], Reply]
Handler = Callable[[Request], Reply]


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
    def __init__(self, sock: socket.socket, deadline: float, peer: str) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.deadline = deadline
        self.peer = peer
        self.head = b""
        self.out: bytes | None = None
        self.busy = False  # handed to the action worker: its answer comes from there


class Endpoint:
    """`routes`: exact paths answered by a function of nothing; `handlers`: exact paths, or
    prefixes ending in '/', answered by a function of the Request (GET and HEAD, on this
    thread); `actions`: the one handler of every POST, run on the worker thread."""

    def __init__(self, host: str, port: int, routes: Mapping[str, Route],
                 handlers: Mapping[str, Handler] | None = None, actions: Handler | None = None) -> None:
        self.routes = dict(routes)
        self.handlers = dict(handlers or {})
        self.actions = actions
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
        # stop() and the action worker write here: with no client the thread sleeps in select().
        self._waker, self._wake_end = socket.socketpair()
        self._waker.setblocking(False)
        self._selector.register(self._waker, selectors.EVENT_READ, self._waker)
        self._clients: dict[int, _Client] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="cronctl-http", daemon=True)
        self._todo: queue.Queue[tuple[_Client, Request] | None] = queue.Queue(MAX_PENDING_ACTIONS)
        self._done: queue.SimpleQueue[tuple[_Client, Reply]] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._work, name="cronctl-http-actions", daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def open_connections(self) -> int:
        return len(self._clients)

    def start(self) -> None:
        self._thread.start()
        if self.actions is not None:
            self._worker.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._worker.is_alive():
            try:
                self._todo.put_nowait(None)
            except queue.Full:
                pass  # a daemon thread busy with a verb: it ends with the process
            self._worker.join(timeout=1)
        for client in list(self._clients.values()):
            self._close(client)
        self._selector.close()
        self._listener.close()
        self._waker.close()
        self._wake_end.close()

    def _wake(self) -> None:
        try:
            self._wake_end.send(b"x")
        except OSError:
            pass  # its buffer is full: the thread is woken already

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
                self._drain_waker()
                if self._stop.is_set():
                    return
            elif mask & selectors.EVENT_READ:
                self._read(key.data)
            else:
                self._write(key.data)
        self._expire()

    def _drain_waker(self) -> None:
        try:
            while self._waker.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass
        while True:
            try:
                client, reply = self._done.get_nowait()
            except queue.Empty:
                return
            if self._clients.get(client.fd) is client:  # else it timed out and is gone
                client.busy = False
                self._answer(client, reply, False)

    def _accept(self) -> None:
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of fds or the like: what is open still gets served
                return
            sock.setblocking(False)
            if len(self._clients) >= MAX_CONNECTIONS:
                _send_and_close(sock, _response(Reply(503, b'{"error": "too many connections"}\n')))
                continue
            # Socket deadlines are real I/O time, not the loop's (possibly fake) clock.
            client = _Client(sock, time.monotonic() + CLIENT_TIMEOUT, str(peer[0]) if peer else "")
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
        if client.busy:
            return  # bytes after its request: dropped, its answer is on the way
        client.head += data
        request = _parse(client.head, client.peer)
        if isinstance(request, Reply):
            self._answer(client, request, False)
        elif request is not None:
            self._dispatch(client, request)
        elif len(client.head) > MAX_HEAD + MAX_BODY:
            self._answer(client, Reply(431, b'{"error": "request head too large"}\n'), False)

    def _dispatch(self, client: _Client, request: Request) -> None:
        if request.method == "POST" and self.actions is not None:
            try:
                self._todo.put_nowait((client, request))
            except queue.Full:
                self._answer(client, Reply(503, b'{"error": "too many actions waiting"}\n'), False)
                return
            client.busy = True
            client.deadline = time.monotonic() + ACTION_TIMEOUT
            self._selector.modify(client.sock, selectors.EVENT_READ, client)
            return
        self._answer(client, *self._route(request))

    def _route(self, request: Request) -> tuple[Reply, bool]:
        if request.method not in ("GET", "HEAD"):
            return Reply(405, b'{"error": "read-only endpoint: GET or HEAD"}\n'), False
        route = self.routes.get(request.path)
        handler = None if route is not None else self._handler_for(request.path)
        if route is None and handler is None:
            known = ", ".join(sorted({*self.routes, *self.handlers}))
            return Reply(404, f'{{"error": "no such path; try {known}"}}\n'.encode()), False
        try:
            reply = route() if route is not None else handler(request)  # type: ignore[misc]
            return reply, request.method == "HEAD"
        except Exception as exc:
            return Reply(500, f'{{"error": "{type(exc).__name__}"}}\n'.encode()), False

    def _handler_for(self, path: str) -> Handler | None:
        if path in self.handlers:
            return self.handlers[path]
        prefixes = [p for p in self.handlers if p.endswith("/") and p != "/" and path.startswith(p)]
        return self.handlers[max(prefixes, key=len)] if prefixes else None

    # --- the action worker ------------------------------------------------------------------

    def _work(self) -> None:
        assert self.actions is not None
        while True:
            item = self._todo.get()
            if item is None:
                return
            client, request = item
            try:
                reply = self.actions(request)
            except Exception as exc:  # a verb's failure is an answer, never a dead worker
                reply = Reply(500, f'{{"error": "{type(exc).__name__}"}}\n'.encode())
            self._done.put((client, reply))
            self._wake()

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
            if client.out is None and not client.busy:  # still sending its request: tell it, if it listens
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


def _parse(data: bytes, peer: str) -> Request | Reply | None:
    """The request in `data`; None while its head (or its body, Content-Length long) is incomplete."""
    cut = data.find(b"\r\n\r\n")
    sep = 4
    if cut < 0:
        cut, sep = data.find(b"\n\n"), 2
    if cut < 0:
        return None if len(data) <= MAX_HEAD else Reply(431, b'{"error": "request head too large"}\n')
    if cut > MAX_HEAD:
        return Reply(431, b'{"error": "request head too large"}\n')
    lines = data[:cut].decode("latin-1").splitlines()
    first = lines[0].strip().split() if lines else []
    if len(first) != 3:
        return Reply(400, b'{"error": "bad request line"}\n')
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        return Reply(400, b'{"error": "bad Content-Length"}\n')
    if int(length_text) > MAX_BODY:
        return Reply(413, b'{"error": "request body too large"}\n')
    body = data[cut + sep:]
    if len(body) < int(length_text):
        return None
    target = urlsplit(first[1])
    return Request(first[0], unquote(target.path), parse_qs(target.query), headers, body[:int(length_text)], peer)


def _response(reply: Reply, head_only: bool = False) -> bytes:
    extra = "".join(f"{name}: {value}\r\n" for name, value in reply.headers)
    head = (f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Unknown')}\r\n"
            f"Content-Type: {reply.content_type}\r\nContent-Length: {len(reply.body)}\r\n"
            f"Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n{extra}Connection: close\r\n\r\n"
            ).encode()
    return head if head_only else head + reply.body


def _send_and_close(sock: socket.socket, data: bytes) -> None:
    try:
        sock.send(data)
    except OSError:
        pass
    sock.close()
