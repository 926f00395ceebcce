"""The store URL and connections to it: redacted everywhere, pooler-safe, retried with backoff.

A connection carries no session state a transaction-mode pooler (PgBouncer) would lose
between transactions: no session SET (settings are `SET LOCAL` inside a transaction), no
session advisory lock, no server-side prepared statement (`prepare_threshold=None`).
`application_name` ("cronctl pid N": which process a backend serves) is a startup
parameter, which poolers pass on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow

from cronctl.clock import Clock
from cronctl.errors import StoreError
from cronctl.store.pg.deadline import DEFAULT_DEADLINE_S, DeadlineConnection
from cronctl.store.pg.redact import redact
from cronctl.store.pg.urlshape import libpq_words, shape

STORE_ENV = "CRONCTL_STORE"
SCHEMES = ("postgresql", "postgres")
APPLICATION_NAME = "cronctl"
CONNECT_TIMEOUT_S = 3
# A peer that vanishes mid-statement (partition) is given up after this long, not after
# the kernel's TCP retransmission timeout of many minutes.
TCP_USER_TIMEOUT_MS = 10_000
# Real packet loss on an idle connection is found within idle + interval x count (5 + 2 x 3 s),
# not the kernel's two hours; a stalled peer that still ACKs is the round-trip deadline's (deadline.py).
KEEPALIVES: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3}

Connection = psycopg.Connection[TupleRow]


class StoreUnreachableError(StoreError):
    """The database did not answer; the message names the redacted URL and libpq's reason."""


@dataclass(frozen=True)
class StoreUrl:
    """A libpq URL whose password is shown nowhere: `str()`, `repr()` and `shown` are redacted."""

    raw: str

    @property
    def password(self) -> str | None:
        value = conninfo_to_dict(self.raw).get("password")
        return None if value is None else str(value)

    @property
    def shown(self) -> str:
        return self.redact(self.raw)

    def redact(self, text: str) -> str:
        """Any text (an error message, a log line) with this URL's password masked."""
        return redact(text, secrets=(self._password_or_none(),))

    @property
    def without_password(self) -> str:
        """The URL with its password left out, not masked (a unit file's setting: libpq then
        reads the password from ~/.pgpass or $PGPASSFILE)."""
        parts = urlsplit(self.raw)
        if not parts.scheme or parts.password is None and "password=" not in parts.query:
            return self.raw
        user = f"{parts.username}@" if parts.username else ""
        host = parts.netloc.rsplit("@", 1)[-1]
        query = "&".join(item for item in parts.query.split("&") if item and not item.startswith("password="))
        return urlunsplit((parts.scheme, f"{user}{host}", parts.path, query, parts.fragment))

    def _password_or_none(self) -> str | None:
        try:
            return self.password
        except psycopg.Error:
            return None

    def __str__(self) -> str:
        return self.shown

    def __repr__(self) -> str:
        return f"StoreUrl({self.shown!r})"


def parse_store_url(text: str) -> StoreUrl:
    """A `postgresql://` URL checked by libpq's own parser; a clear StoreError otherwise.

    A URL that does not parse is never echoed, not even redacted (where its password
    ends is what is unknown): the error names its scheme and host only (urlshape).
    """
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme not in SCHEMES:
        raise StoreError(f"--store: expected a postgresql:// URL ({shape(text)}; the rest is not shown)")
    authority = text.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    if authority.count("@") > 1:
        raise StoreError(f"--store ({shape(text)}): the user or password contains a raw '@'; write it as %40")
    try:
        urlsplit(text).port  # noqa: B018 - raises on an unclosed IPv6 bracket or a bad port
        conninfo_to_dict(text)
    except ValueError as exc:
        raise StoreError(f"--store ({shape(text)}): cannot parse the URL: {libpq_words(str(exc))}") from None
    except psycopg.Error as exc:
        words = libpq_words(str(exc))
        hint = " (write a '%' in the user or password as %25)" if "percent-encoded token" in words else ""
        raise StoreError(f"--store ({shape(text)}): libpq cannot parse the URL: {words}{hint}") from None
    return StoreUrl(text)


def store_url_from(option: str | None, env: Mapping[str, str]) -> StoreUrl | None:
    """`--store` wins over $CRONCTL_STORE; neither means the JSON store of the home (None)."""
    text = option if option else env.get(STORE_ENV, "")
    return parse_store_url(text) if text else None


def connect(url: StoreUrl, timeout_s: int = CONNECT_TIMEOUT_S, deadline_s: float = DEFAULT_DEADLINE_S) -> Connection:
    """One connection, autocommit off: every unit of work is an explicit, short transaction,
    and every round trip of it has `deadline_s` (store/pg/deadline.py)."""
    try:
        conn = DeadlineConnection.connect(
            url.raw,
            autocommit=False,
            prepare_threshold=None,
            connect_timeout=timeout_s,
            application_name=f"{APPLICATION_NAME} pid {os.getpid()}",  # which process, in pg_stat_activity
            tcp_user_timeout=TCP_USER_TIMEOUT_MS,
            **KEEPALIVES,
        )
        conn.deadline_s = deadline_s
        return conn
    except psycopg.Error as exc:
        raise StoreUnreachableError(f"cannot reach the PostgreSQL store {url.shown}: "
                                    f"{url.redact(str(exc).strip())}") from None


def backoff_delays(first_s: float = 0.1, cap_s: float = 5.0) -> Iterator[float]:
    """0.1, 0.2, 0.4 ... doubling up to `cap_s`, then `cap_s` for ever."""
    delay = first_s
    while True:
        yield delay
        delay = min(cap_s, delay * 2)


def connect_with_backoff(
    url: StoreUrl,
    clock: Clock,
    give_up_after_s: float,
    on_retry: Callable[[StoreUnreachableError, float], None] = lambda error, delay: None,
    connector: Callable[[StoreUrl], Connection] = connect,
) -> Connection:
    """Connect, retrying with capped exponential backoff until `give_up_after_s` has passed.

    `on_retry(error, delay)` is told of each failure before the wait (the loop says so on
    stderr and in its heartbeat). The last error is raised when the time is up.
    """
    started = clock.monotonic()
    delays = backoff_delays()
    while True:
        try:
            return connector(url)
        except StoreUnreachableError as error:
            delay = next(delays)
            if clock.monotonic() - started + delay > give_up_after_s:
                raise
            on_retry(error, delay)
            clock.sleep(delay)
