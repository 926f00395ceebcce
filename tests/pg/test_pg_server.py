"""The throwaway server and the per-test database the other PostgreSQL tests stand on."""

from __future__ import annotations

from tests.helpers import pgserver
import psycopg
import pytest


@pytest.mark.parametrize("turn", [1, 2])
def test_each_test_gets_an_empty_database_of_its_own(pg_url: str, turn: int) -> None:
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
        assert tables == (0,)
        # Left behind on purpose: the other turn must not see it.
        conn.execute("CREATE TABLE left_behind (turn int)")


def test_the_server_is_postgresql_15_or_newer(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int").fetchone()
        assert row is not None and row[0] >= 150000


def test_stop_refuses_a_directory_the_script_did_not_make(capsys: pytest.CaptureFixture[str]) -> None:
    assert pgserver.main(["stop", "/var/lib/postgresql"]) == 1
    assert "not a directory this script made" in capsys.readouterr().err


def test_only_ci_fails_when_no_server_can_be_started() -> None:
    assert pgserver.must_fail_without_server({"CI": "true"})
    assert not pgserver.must_fail_without_server({"CI": ""})
    assert not pgserver.must_fail_without_server({})
