"""The store URL, its redaction, connections and their backoff, host identity, the database clock."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from typing import cast

from tests.helpers import pgserver
import psycopg
import pytest

from cronctl.clock import FakeClock, SystemClock
from cronctl.errors import StoreError
from cronctl.store.pg.connect import (
    Connection,
    StoreUnreachableError,
    StoreUrl,
    backoff_delays,
    connect,
    connect_with_backoff,
    parse_store_url,
    store_url_from,
)
from cronctl.store.pg.dbclock import read_db_clock
from cronctl.store.pg.identity import boot_id, host_id
from cronctl.store.pg.redact import redact

# --- redaction ---------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "shown"), [
    ("postgresql://bob:s3cret@db.example:5432/jobs", "postgresql://bob:***@db.example:5432/jobs"),
    ("postgres://bob:p%40ss@db/jobs?sslmode=require", "postgres://bob:***@db/jobs?sslmode=require"),
    ("postgresql://bob:s3@cret@db/jobs", "postgresql://bob:***@db/jobs"),
    ("postgresql://bob@db/jobs", "postgresql://bob@db/jobs"),
    ("postgresql://bob:s3cret@[::1]:5432/jobs", "postgresql://bob:***@[::1]:5432/jobs"),
    ("postgresql://db:5432/jobs?user=a@b", "postgresql://db:5432/jobs?user=a@b"),
    ("postgresql://db:5432/jobs", "postgresql://db:5432/jobs"),
    ("postgresql:///jobs?host=/run/pg&password=s3cret&user=bob", "postgresql:///jobs?host=/run/pg&password=***&user=bob"),
    ("host=db port=5432 password=s3cret dbname=jobs", "host=db port=5432 password=*** dbname=jobs"),
    ("host=db password = 'it\\'s secret' dbname=jobs", "host=db password = *** dbname=jobs"),
    ("host=db password='it''s secret' dbname=jobs", "host=db password=*** dbname=jobs"),
    ('missing "=" after "postgresql://bob:s3cret@db/x" in connection info string',
     'missing "=" after "postgresql://bob:***@db/x" in connection info string'),
])
def test_redact_masks_the_password_of_urls_and_conninfo(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_redact_masks_a_known_password_wherever_an_error_quotes_it() -> None:
    message = 'FATAL:  password authentication failed for user "bob" (tried "s3cret")'
    assert redact(message, secrets=("s3cret",)) == 'FATAL:  password authentication failed for user "bob" (tried "***")'


def test_a_store_url_never_shows_its_password() -> None:
    url = parse_store_url("postgresql://bob:s3cret@db.example/jobs")
    for text in (str(url), repr(url), url.shown, f"{url}", url.redact("error near s3cret")):
        assert "s3cret" not in text
    assert url.password == "s3cret"


# --- the URL -------------------------------------------------------------------------------


def test_store_option_wins_over_the_environment() -> None:
    env = {"CRONCTL_STORE": "postgresql://env@db/a"}
    chosen = store_url_from("postgresql://opt@db/b", env)
    assert chosen is not None and chosen.raw.endswith("/b")
    from_env = store_url_from(None, env)
    assert from_env is not None and from_env.raw.endswith("/a")
    assert store_url_from(None, {}) is None


@pytest.mark.parametrize(("text", "words"), [
    ("mysql://bob:s3cret@db/jobs", "expected a postgresql:// URL"),
    ("/var/lib/cronctl", "expected a postgresql:// URL"),
    ("postgresql://bob:s3@cret@db/jobs", "write it as %40"),
    ("postgresql://bob:s3cret@db/jobs?bogus=1", "bogus"),
])
def test_a_bad_store_url_is_a_clear_error_without_the_password(text: str, words: str) -> None:
    with pytest.raises(StoreError) as caught:
        parse_store_url(text)
    assert words in str(caught.value)
    assert "s3cret" not in str(caught.value) and "cret" not in str(caught.value).replace("postgresql", "")


# --- connecting ----------------------------------------------------------------------------


def test_an_unreachable_server_is_a_clear_error_naming_the_url_without_its_password() -> None:
    url = parse_store_url(f"postgresql://bob:s3cret@127.0.0.1:{pgserver.free_port()}/jobs")
    with pytest.raises(StoreUnreachableError) as caught:
        connect(url, timeout_s=2)
    message = str(caught.value)
    assert message.startswith("cannot reach the PostgreSQL store postgresql://bob:***@127.0.0.1:")
    assert "Connection refused" in message and "s3cret" not in message
    assert caught.value.__cause__ is None and caught.value.exit_code == 1


def test_a_connection_is_pooler_safe_and_names_itself(pg_url: str) -> None:
    with connect(parse_store_url(pg_url)) as conn:
        assert conn.autocommit is False
        assert conn.prepare_threshold is None
        row = conn.execute("SELECT current_setting('application_name')").fetchone()
        assert row == (f"cronctl pid {os.getpid()}",)
        # Nothing was SET for the session: every setting still has its default source.
        changed = conn.execute("SELECT name FROM pg_settings WHERE source = 'session'").fetchall()
        assert changed == []


def test_backoff_doubles_up_to_its_cap() -> None:
    delays = backoff_delays(first_s=0.1, cap_s=1.0)
    assert [round(next(delays), 3) for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


CONNECTED = cast(Connection, object())


class _FlakyServer:
    """Refuses the first `failures` connections, then hands out a sentinel connection."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, url: StoreUrl) -> Connection:
        self.calls += 1
        if self.calls <= self.failures:
            raise StoreUnreachableError(f"cannot reach the PostgreSQL store {url.shown}: refused")
        return CONNECTED


def test_reconnect_retries_with_backoff_until_the_server_answers() -> None:
    clock = FakeClock()
    waits: list[float] = []
    server = _FlakyServer(failures=3)
    conn = connect_with_backoff(parse_store_url("postgresql://bob:s3cret@db/jobs"), clock, give_up_after_s=60,
                                on_retry=lambda error, delay: waits.append(delay), connector=server)
    assert conn is CONNECTED and server.calls == 4
    assert [round(w, 3) for w in waits] == [0.1, 0.2, 0.4]
    assert clock.monotonic() == pytest.approx(1000.7)


def test_reconnect_gives_up_with_the_last_error_when_time_is_up() -> None:
    clock = FakeClock()
    server = _FlakyServer(failures=1000)
    with pytest.raises(StoreUnreachableError, match=r"postgresql://bob:\*\*\*@db/jobs"):
        connect_with_backoff(parse_store_url("postgresql://bob:s3cret@db/jobs"), clock, give_up_after_s=10,
                             connector=server)
    # 0.1 + 0.2 + ... + 3.2 = 6.3 s waited; the next 5 s wait would pass the 10 s budget.
    assert clock.monotonic() == pytest.approx(1006.3)
    assert server.calls == 7


# --- identity ------------------------------------------------------------------------------


def test_host_and_boot_ids_come_from_the_environment_first(tmp_path: Path) -> None:
    machine_id = tmp_path / "machine-id"
    machine_id.write_text("abc123\n")
    assert host_id({}, machine_id) == "abc123"
    assert host_id({"CRONCTL_HOST_ID": "host-b"}, machine_id) == "host-b"
    assert boot_id({"CRONCTL_BOOT_ID": "boot-2"}, tmp_path / "absent") == "boot-2"


def test_a_missing_host_id_says_which_file_and_which_variable(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"machine-id.*CRONCTL_HOST_ID"):
        host_id({}, tmp_path / "machine-id")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(StoreError, match=r"empty; set \$CRONCTL_BOOT_ID"):
        boot_id({}, tmp_path / "empty")


def test_this_machine_has_a_boot_id() -> None:
    assert len(boot_id({})) >= 32


# --- the database clock ----------------------------------------------------------------------


def test_skew_is_database_time_minus_local_time(pg_url: str) -> None:
    clock = FakeClock(start=datetime(2020, 1, 1, tzinfo=timezone.utc))
    with connect(parse_store_url(pg_url)) as conn:
        reading = read_db_clock(conn, clock)
    # The fake clock does not move during the query: no round trip, skew exactly the difference.
    assert reading.round_trip_s == 0
    assert reading.skew_s == (reading.db_now - clock.now()).total_seconds()
    assert reading.skew_s > 0 and reading.worth_auditing


def test_on_one_machine_the_skew_is_small(pg_url: str) -> None:
    with connect(parse_store_url(pg_url)) as conn:
        reading = read_db_clock(conn, SystemClock())
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert abs(reading.skew_s) <= reading.round_trip_s + 1.0
    assert not reading.worth_auditing
