"""systemd's notify protocol (sd_notify(3)), with the standard library only.

When `$NOTIFY_SOCKET` names a Unix datagram socket (a path, or an abstract name
written with a leading `@`), each message is one datagram of `KEY=value` lines.
Without the variable nothing is sent. A send that fails is reported once on
stderr and never ends the loop: the service manager's watchdog, not a crash
here, is what notices a loop that cannot speak.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from cronctl.clock import Clock

if TYPE_CHECKING:
    import socket

# Without a watchdog, STATUS= is refreshed this often.
STATUS_EVERY = 10.0
# An idle tick thread completes a tick at least once a second: a last tick younger than
# this is progress, whatever the ping interval (a WatchdogSec= under 4 s is too short to
# tell an idle loop from a wedged one).
MIN_PROGRESS_WINDOW = 2.0
# Smallest ping interval honoured: a WatchdogSec= below this would make the loop spin.
MIN_PING_INTERVAL = 0.05


class Notifier:
    """Sends to the service manager; a Notifier built without a socket sends nothing."""

    def __init__(self, address: str | None, watchdog_usec: int | None = None) -> None:
        self.address = _socket_address(address) if address else None
        self.watchdog_usec = watchdog_usec if address else None
        self._sock: socket.socket | None = None
        self._failure_reported = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Notifier:
        watchdog = _positive_int(env.get("WATCHDOG_USEC"))
        # WATCHDOG_PID names the process the watchdog is meant for (a child inherits the variables).
        meant_for = _positive_int(env.get("WATCHDOG_PID"))
        if meant_for is not None and meant_for != os.getpid():
            watchdog = None
        return cls(env.get("NOTIFY_SOCKET") or None, watchdog)

    @property
    def enabled(self) -> bool:
        return self.address is not None

    @property
    def ping_interval(self) -> float | None:
        """Half of WatchdogSec=, as sd_watchdog_enabled(3) advises; None without a watchdog."""
        if self.watchdog_usec is None:
            return None
        return max(MIN_PING_INTERVAL, self.watchdog_usec / 2_000_000)

    def send(self, **fields: str) -> bool:
        """One datagram of FIELD=value lines (READY="1" -> `READY=1`); False when it was not sent."""
        if self.address is None:
            return False
        payload = "\n".join(f"{key}={value}" for key, value in fields.items()).encode()
        try:
            if self._sock is None:
                import socket  # here: only a loop under a service manager sends (a few ms of every start)

                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(payload, self.address)
            return True
        except OSError as exc:
            self._report(exc)
            return False

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _report(self, exc: OSError) -> None:
        if self._failure_reported:
            return
        self._failure_reported = True
        try:
            print(f"cronctl: warning: could not notify the service manager at $NOTIFY_SOCKET "
                  f"({exc.strerror or exc}); the loop goes on, further failures are not reported",
                  file=sys.stderr, flush=True)
        except Exception:
            pass


def _socket_address(text: str) -> str | bytes:
    # An abstract socket: `@name` in the variable is `\0name` on the wire.
    return b"\0" + text[1:].encode() if text.startswith("@") else text


def _positive_int(text: str | None) -> int | None:
    try:
        value = int(text) if text else 0
    except ValueError:
        return None
    return value if value > 0 else None


class ServiceBeat:
    """What the loop tells the service manager, and when.

    `watch` runs on the main thread (the loop's watchdog); it pings WATCHDOG=1 only
    while the tick thread's last completed tick is younger than the ping interval (at
    least MIN_PROGRESS_WINDOW), so a tick thread wedged for longer than WatchdogSec=
    stops the pings within two intervals and systemd restarts the service.
    """

    def __init__(self, notifier: Notifier, clock: Clock) -> None:
        self.notifier = notifier
        self.clock = clock
        self._last_ping = float("-inf")
        self._last_status = float("-inf")
        self.pings = 0

    @property
    def watch_period(self) -> float | None:
        """How often `watch` must run: two pings are then at most 1.5 intervals apart, well
        inside WatchdogSec= (two intervals). None: no constraint."""
        interval = self.notifier.ping_interval
        return None if interval is None else interval / 2

    def standby(self) -> None:
        self.notifier.send(READY="1", STATUS="standby: waiting for the leader to go away")

    def ready(self, status: str) -> None:
        self.notifier.send(READY="1", STATUS=status)
        self._last_status = self.clock.monotonic()

    def took_over(self, status: str) -> None:
        self.notifier.send(STATUS=status)
        self._last_status = self.clock.monotonic()

    def watch(self, last_tick: float, status: Callable[[], str]) -> None:
        if not self.notifier.enabled:
            return
        now = self.clock.monotonic()
        interval = self.notifier.ping_interval
        if interval is not None:
            progressing = now - last_tick < max(interval, MIN_PROGRESS_WINDOW)
            if now - self._last_ping >= interval and progressing:
                self.notifier.send(WATCHDOG="1", STATUS=status())
                self._last_ping = self._last_status = now
                self.pings += 1
            return
        if now - self._last_status >= STATUS_EVERY:
            self.notifier.send(STATUS=status())
            self._last_status = now

    def stopping(self) -> None:
        self.notifier.send(STOPPING="1", STATUS="stopping: ending running jobs")
        self.notifier.close()
