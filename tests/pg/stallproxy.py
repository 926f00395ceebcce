"""A TCP proxy in front of PostgreSQL that can stall: the fault that keeps every socket open.

A hung middlebox, a frozen pooler, a stopped server or a lost reply all look alike to a
client: its socket stays connected, the kernel acknowledges what it sends, and nothing
comes back. `connect_timeout`, `tcp_user_timeout` and the server's `statement_timeout`
do not fire then (issue 20). This proxy plays that fault on demand:

- `forward()`: bytes flow both ways (the initial state);
- `stall()`: nothing is forwarded either way and no socket is closed or read; new
  connections are accepted (the kernel does that anyway) and left as silent;
- `stall_on(marker)`: forward until a client sends bytes containing `marker`, then stall,
  holding that chunk (a statement "in flight" when the stall began);
- `stall_after(marker)`: forward until a client sends bytes containing `marker`, pass that
  chunk on, then stall (the statement reached the server; its answer and whatever the
  client sends next do not);
- `resume()`: forward again, held bytes first;
- `cut()`: a fast outage: every connection is closed and new ones are closed at once.

It runs on a daemon thread of the test process; `url` is the store URL pointed at it.
Usable as a context manager, or from the command line (`python -m tests.pg.stallproxy
TARGET_PORT`) for benches.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

_CHUNK = 65536


@dataclass
class _Pair:
    client: socket.socket
    server: socket.socket
    # Bytes read but not yet sent, per destination socket (what a stall holds).
    held: dict[socket.socket, bytearray] = field(default_factory=dict)

    def other(self, sock: socket.socket) -> socket.socket:
        return self.server if sock is self.client else self.client


class StallProxy:
    """See the module doc. `mode` is "forward", "stall" or "cut"."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listener, selectors.EVENT_READ, None)
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self.mode = "forward"
        self._marker: bytes | None = None
        self._marker_passes = False  # stall_after: the marker's chunk is forwarded before the stall
        self.stalls = 0  # how many stalls began (a marker's too)
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="stall-proxy", daemon=True)
        self._thread.start()

    # --- control (any thread) ------------------------------------------------------------

    def forward(self) -> None:
        self._set("forward")

    resume = forward

    def stall(self) -> None:
        self._set("stall")

    def cut(self) -> None:
        self._set("cut")

    def stall_on(self, marker: bytes) -> None:
        """Forward until a client sends `marker`; that chunk is held and the proxy stalls."""
        with self._lock:
            self._marker, self._marker_passes = marker, False
        self._poke()

    def stall_after(self, marker: bytes) -> None:
        """Forward until a client sends `marker`; that chunk goes on to the server, then the proxy stalls."""
        with self._lock:
            self._marker, self._marker_passes = marker, True
        self._poke()

    def url_for(self, url: str) -> str:
        """`url` (a postgresql:// URL of the target) with its host and port replaced by this proxy's."""
        parts = urlsplit(url)
        user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
        return urlunsplit((parts.scheme, f"{user}127.0.0.1:{self.port}", parts.path, parts.query, parts.fragment))

    def close(self) -> None:
        self._closed = True
        self._poke()
        self._thread.join(timeout=5)
        for pair in self._pairs:
            _close(pair.client, pair.server)
        _close(self._listener, self._wake_r, self._wake_w)

    def __enter__(self) -> StallProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _set(self, mode: str) -> None:
        with self._lock:
            if mode == "stall" and self.mode != "stall":
                self.stalls += 1
            self.mode = mode
            self._marker = None if mode != "forward" else self._marker
        self._poke()

    def _poke(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # --- the proxy thread -------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._closed:
            for key, _ in self._sel.select(timeout=0.2):
                if key.data == "wake":
                    self._wake_r.recv(4096)
                elif key.data is None:
                    self._accept()
                else:
                    self._pump(key.data, key.fileobj)  # type: ignore[arg-type]
            self._apply_mode()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self.mode == "cut":
            _close(client)
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            _close(client)
            return
        for sock in (client, server):
            sock.setblocking(False)
        pair = _Pair(client, server, {client: bytearray(), server: bytearray()})
        self._pairs.append(pair)
        if self.mode == "forward":
            self._watch(pair)

    def _watch(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.server):
            try:
                self._sel.register(sock, selectors.EVENT_READ, pair)
            except KeyError:
                pass

    def _unwatch(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.server):
            try:
                self._sel.unregister(sock)
            except (KeyError, ValueError):
                pass

    def _pump(self, pair: _Pair, sock: socket.socket) -> None:
        """Read what `sock` sent and pass it on (or hold it, when it carries the stall marker)."""
        try:
            data = sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(pair)
            return
        dest = pair.other(sock)
        pair.held[dest] += data
        with self._lock:
            marker = self._marker
            hit = marker is not None and sock is pair.client and marker in data
            if hit:
                self._marker = None
                if self._marker_passes:
                    self._flush(pair)  # the marker's chunk reaches the server before the stall
                self.mode = "stall"
                self.stalls += 1
        if self.mode == "forward":
            self._flush(pair)

    def _flush(self, pair: _Pair) -> None:
        for dest, buf in pair.held.items():
            while buf:
                try:
                    sent = dest.send(bytes(buf))
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    self._drop(pair)
                    return
                del buf[:sent]

    def _drop(self, pair: _Pair) -> None:
        self._unwatch(pair)
        _close(pair.client, pair.server)
        if pair in self._pairs:
            self._pairs.remove(pair)

    def _apply_mode(self) -> None:
        """Stalled pairs are not read (their sockets stay open, silent); forwarding ones are."""
        if self.mode == "cut":
            for pair in list(self._pairs):
                self._drop(pair)
            return
        for pair in list(self._pairs):
            if self.mode == "stall":
                self._unwatch(pair)
            else:
                self._watch(pair)
                self._flush(pair)


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        try:
            sock.close()
        except OSError:
            pass


@contextmanager
def stall_proxy(url: str) -> Iterator[tuple[StallProxy, str]]:
    """A proxy in front of the server of `url`, and the URL through it; closed afterwards."""
    parts = urlsplit(url)
    proxy = StallProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    try:
        yield proxy, proxy.url_for(url)
    finally:
        proxy.close()


def main() -> None:
    """`python -m tests.pg.stallproxy PORT`: print the proxy's port, then obey `forward`,
    `stall` and `cut` lines on stdin (a bench drives it from another process)."""
    import sys

    proxy = StallProxy("127.0.0.1", int(sys.argv[1]))
    print(proxy.port, flush=True)
    for line in sys.stdin:
        word = line.strip()
        if word in ("forward", "resume", "stall", "cut"):
            getattr(proxy, word)()
            print("ok", flush=True)
    proxy.close()


if __name__ == "__main__":
    main()
