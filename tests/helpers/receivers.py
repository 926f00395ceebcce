"""Local receivers for notification tests: an HTTP endpoint and an SMTP sink, standard library only.

`Receiver` records every request (method, path, headers, body, arrival time) and answers
from a script: a list of status codes used in turn (the last one repeats), or `hang=True`
to hold each connection open without answering (until `release()` or stop), or `down()`
to refuse connections (the listening socket closed; `up()` binds the same port again).
While down, the port stays bound by a socket that does not listen: a connection is
refused as by a closed port, and no other test (an xdist worker beside this one) can
take the port in the meantime, which would make `up()` fail or answer for someone else.
`SmtpSink` speaks enough SMTP (EHLO/HELO, MAIL, RCPT, DATA, QUIT) to receive a mail.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# How often serve_forever looks for shutdown(): its default (0.5 s) was half a second of
# every test's teardown, and of every down() of a test that takes its receiver down.
POLL_S = 0.02


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    codes: list[int] = field(default_factory=lambda: [200])
    hang: bool = False
    port: int = 0
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._hold: socket.socket | None = None  # the port, kept while down
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                code = receiver._record(Request("POST", self.path, dict(self.headers.items()), body,
                                                time.monotonic()))
                if receiver.hang:
                    receiver._released.wait(120)
                    return
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            do_GET = do_POST

            def log_message(self, *_args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        if self._hold is not None:
            self._hold.close()
            self._hold = None
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(POLL_S,), daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self._hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._hold.bind(("127.0.0.1", self.port))  # bound, never listening: refused

    def release(self) -> None:
        self.hang = False
        self._released.set()

    def stop(self) -> None:
        self.release()
        self.down()
        if self._hold is not None:
            self._hold.close()
            self._hold = None

    def _record(self, request: Request) -> int:
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
            return self.codes[min(index, len(self.codes) - 1)]

    def snapshot(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def bodies(self) -> list[Any]:
        return [r.json() for r in self.snapshot() if r.headers.get("Content-Type", "").startswith("application/json")]


class SmtpSink:
    """Mails received, each parsed (email.message.Message), in arrival order."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        sink = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.wfile.write(b"220 sink ESMTP\r\n")
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    verb = line[:4].upper()
                    if verb == b"DATA":
                        self.wfile.write(b"354 go ahead\r\n")
                        data = b""
                        while True:
                            chunk = self.rfile.readline()
                            if chunk in (b".\r\n", b".\n", b""):
                                break
                            data += chunk[1:] if chunk.startswith(b"..") else chunk
                        sink.messages.append(message_from_bytes(data))
                        self.wfile.write(b"250 queued\r\n")
                    elif verb == b"QUIT":
                        self.wfile.write(b"221 bye\r\n")
                        return
                    elif verb == b"EHLO":
                        self.wfile.write(b"250 sink\r\n")
                    else:
                        self.wfile.write(b"250 ok\r\n")

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(POLL_S,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
