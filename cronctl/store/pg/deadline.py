"""A client-side deadline on every database round trip (SPEC §9: partitions that keep the socket open).

A hung middlebox, a frozen pooler, a stopped server or a lost reply keep the socket
open: the kernel acknowledges what is sent and nothing comes back. libpq's
`connect_timeout` covers only the connection, `tcp_user_timeout` only unacknowledged
data, the server's `statement_timeout` only a server that still runs. So every wait of
a connection for the server (psycopg funnels each one through `Connection.wait`: a
statement, a fetch, a COPY buffer, BEGIN, COMMIT) is armed with a deadline, and one
watchdog thread, which never touches the database, shuts the socket down when a
deadline passes. The blocked wait then wakes at once on the dead socket; the connection
is abandoned (`finish`: its server session ends by its own timeouts; no cancel request
is sent, as it would travel the same stalled path) and the caller gets
`StoreDeadlineError`, which the loop counts as an outage and a command reports.

The socket is shut down, never closed, by the watchdog: closing a descriptor another
thread waits on would let a new file reuse its number. Arming and disarming are under
one lock with the firing, so the descriptor is always the connection's own.
"""

from __future__ import annotations

import heapq
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from cronctl.errors import StoreError

# SPEC §9: a round trip's default deadline, and its ceiling as a share of the lease.
DEFAULT_DEADLINE_S = 5.0
LEASE_SHARE = 0.25
# The beat (one small statement per tick) gives up sooner: before the other loops, which
# call a loop unreachable after 3 s without a heartbeat, would act on its silence.
BEAT_DEADLINE_S = 2.0


def deadline_for(lease_s: float | None) -> float:
    """The round-trip deadline of a loop with this lease (a command: None, the default)."""
    if lease_s is None:
        return DEFAULT_DEADLINE_S
    return max(0.5, min(DEFAULT_DEADLINE_S, lease_s * LEASE_SHARE))


class StoreDeadlineError(StoreError):
    """A round trip got no answer within its deadline; the connection was abandoned."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the PostgreSQL store did not answer within {seconds:g} s")


class _Watchdog:
    """One thread for the whole process: shuts down the sockets of round trips past their deadline."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._armed: dict[int, tuple[float, int]] = {}  # token -> (deadline, fd)
        self._heap: list[tuple[float, int]] = []
        self.fired: set[int] = set()
        self._tokens = itertools.count(1)
        self._thread: threading.Thread | None = None

    def arm(self, fd: int, seconds: float) -> int:
        with self._cond:
            token = next(self._tokens)
            due = time.monotonic() + seconds
            self._armed[token] = (due, fd)
            earliest = self._heap[0][0] if self._heap else None
            heapq.heappush(self._heap, (due, token))
            if self._thread is None or not self._thread.is_alive():
                # Also after a fork (the loop forks children; only its own thread runs in them).
                self._thread = threading.Thread(target=self._run, name="cronctl-pg-deadline", daemon=True)
                self._thread.start()
            elif earliest is None or due < earliest:
                self._cond.notify()
            return token

    def disarm(self, token: int) -> bool:
        """Stop watching; True when the deadline fired (the socket is shut down)."""
        with self._cond:
            self._armed.pop(token, None)
            if token in self.fired:
                self.fired.discard(token)
                return True
            return False

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0][1] not in self._armed or self._heap[0][0] <= now):
                    due, token = heapq.heappop(self._heap)
                    armed = self._armed.pop(token, None)
                    if armed is not None:
                        _shut_down(armed[1])
                        self.fired.add(token)
                self._cond.wait(timeout=(self._heap[0][0] - now) if self._heap else 60.0)


def _shut_down(fd: int) -> None:
    """Both directions of the socket, through a duplicate descriptor (the original stays the connection's)."""
    try:
        dup = os.dup(fd)
    except OSError:
        return
    try:
        with socket.socket(fileno=dup) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


_WATCHDOG = _Watchdog()


class DeadlineConnection(psycopg.Connection[TupleRow]):
    """A psycopg connection whose every wait for the server has a deadline (see the module doc)."""

    deadline_s: float = DEFAULT_DEADLINE_S

    def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            fd = self.pgconn.socket
        except psycopg.OperationalError:
            return super().wait(gen, *args, **kwargs)  # no socket: psycopg says why
        token = _WATCHDOG.arm(fd, self.deadline_s)
        try:
            result = super().wait(gen, *args, **kwargs)
        except BaseException:
            if _WATCHDOG.disarm(token):
                self._abandon()
                raise StoreDeadlineError(self.deadline_s) from None
            raise
        if _WATCHDOG.disarm(token):
            # It answered just as the deadline passed, and its socket is gone: what came
            # back cannot be used with a dead connection, so this counts as no answer too.
            self._abandon()
            raise StoreDeadlineError(self.deadline_s)
        return result

    def _abandon(self) -> None:
        """The connection is given up: psycopg sees it broken, and its owner opens a new one."""
        try:
            self.pgconn.finish()
        except Exception:  # noqa: BLE001 - already unusable; nothing more to do with it
            pass


@contextmanager
def deadline(conn: Any, seconds: float) -> Iterator[None]:
    """Round trips of `conn` inside the block get `seconds` instead of its usual deadline
    (the beat's shorter one). A connection without deadlines is left as it is."""
    with _deadline_of(conn, lambda before: min(before, seconds)):
        yield


# A schema upgrade's DDL may rewrite whole tables (V9: both the jobs and the runs, 6.3 s at a
# million jobs on a busy 2-core machine): its round trips get this long, once per upgrade.
MIGRATION_DEADLINE_S = 600.0


@contextmanager
def migration_deadline(conn: Any) -> Iterator[None]:
    """Round trips of `conn` inside the block get MIGRATION_DEADLINE_S, however short its usual
    deadline: a stalled server still ends the upgrade, a table's rewrite does not."""
    with _deadline_of(conn, lambda before: max(before, MIGRATION_DEADLINE_S)):
        yield


@contextmanager
def _deadline_of(conn: Any, change: Callable[[float], float]) -> Iterator[None]:
    if not isinstance(conn, DeadlineConnection):
        yield
        return
    before = conn.deadline_s
    conn.deadline_s = change(before)
    try:
        yield
    finally:
        conn.deadline_s = before
