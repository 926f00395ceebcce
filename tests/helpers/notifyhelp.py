"""A fake systemd notify socket: a Unix datagram socket that collects what the loop sends."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path


class NotifySocket:
    """Bound at `path` (or an abstract name); `datagrams` holds (monotonic time, fields) as they arrive."""

    def __init__(self, path: Path | None = None, abstract: str | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract is not None:
            self.sock.bind(b"\0" + abstract.encode())
            self.address = "@" + abstract
        else:
            assert path is not None
            self.sock.bind(str(path))
            self.address = str(path)
        self.sock.settimeout(0.1)
        self.datagrams: list[tuple[float, dict[str, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._collect, daemon=True)
        self._thread.start()

    def _collect(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            self.datagrams.append((time.monotonic(), fields))

    def with_field(self, key: str, value: str | None = None) -> list[tuple[float, dict[str, str]]]:
        return [(t, f) for t, f in list(self.datagrams) if key in f and (value is None or f[key] == value)]

    def wait_for(self, key: str, value: str | None = None, timeout: float = 30.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.with_field(key, value)
            if found:
                return found[0][1]
            time.sleep(0.02)
        raise AssertionError(f"no {key}={value or '*'} within {timeout}s; got {[f for _, f in self.datagrams]}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sock.close()
