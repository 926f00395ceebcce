"""Secrets stay with cronctl (SPEC §9) on PostgreSQL: the store's password, in $CRONCTL_STORE and
libpq's variables, reaches no job or hook and shows in no output, table, log or error."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.loophelp import wait_until
from tests.pg.clusterhelp import host_env, rows, seed
from tests.helpers.secrethelp import PASSWORD, PLANTED, files_with, texts_with

pytestmark = pytest.mark.slow

CRONCTL = [sys.executable, "-m", "cronctl"]
JOBS = """
jobs:
  - name: root
    every: 1s
    command: "env; exit 3"
    on_failure: "env"
"""


def with_password(url: str) -> str:
    """The test server trusts every connection: a password in the URL is carried, never checked."""
    head, _, rest = url.partition("://")
    user, _, host = rest.partition("@")
    return f"{head}://{user}:{PASSWORD}@{host}"


def table_texts(url: str) -> list[tuple[str, str]]:
    tables = [name for (name,) in rows(url, "SELECT tablename FROM pg_tables WHERE tablename LIKE 'cronctl%%'")]
    return [(table, "\n".join(text for (text,) in rows(url, f"SELECT row_to_json(t)::text FROM {table} t")))
            for table in tables]


def test_the_password_reaches_no_child_and_shows_nowhere(store_url: str, tmp_path: Path) -> None:
    url = with_password(store_url)
    home = tmp_path / "home"
    # Those the loop's own connection tolerates (a service or key file that does not exist would stop it).
    planted = {name: PLANTED[name] for name in ("PGPASSWORD", "PGPASSFILE", "PGUSER")}
    env = {**host_env(url, "host-a"), **planted}
    seed(url, tmp_path, JOBS)
    outputs: list[tuple[str, str]] = []

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*CRONCTL, "--home", str(home), *args], env=env, capture_output=True, text=True,
                              timeout=60)
        outputs.append((" ".join(args), done.stdout + done.stderr))
        return done

    loop = subprocess.Popen([*CRONCTL, "--home", str(home), "run"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: any(p.stat().st_size for p in (home / "runs").glob("root/*.on_failure.log")), 60, 0.2)
    finally:
        loop.send_signal(signal.SIGTERM)
        out, _ = loop.communicate(timeout=60)
    outputs.append(("run", out.decode(errors="replace")))
    for args in (["status"], ["status", "--json"], ["history", "--json"], ["logs", "root"], ["audit", "-n", "1000"],
                 ["list", "--json"], ["doctor"], ["show", "root"]):
        cli(*args)

    logs = [path.read_text() for path in (home / "runs").rglob("*.log")]
    assert any("CRONCTL_RUN_ID=" in text for text in logs)
    for text in logs:
        assert "CRONCTL_STORE=" not in text and "PGPASSWORD=" not in text, text
    assert files_with(home) == []
    assert texts_with(outputs) == []
    assert texts_with(table_texts(store_url)) == []


def test_store_on_the_command_line_with_a_password_warns_once(store_url: str, tmp_path: Path) -> None:
    url = with_password(store_url)
    env = {k: v for k, v in host_env(url, "host-a").items() if k != "CRONCTL_STORE"}
    done = subprocess.run([*CRONCTL, "--store", url, "--home", str(tmp_path / "h"), "status"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.stderr.count("warning: --store carries a password") == 1, done.stderr
    assert "$CRONCTL_STORE" in done.stderr and "~/.pgpass" in done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    quiet = subprocess.run([*CRONCTL, "--home", str(tmp_path / "h"), "status"], env={**env, "CRONCTL_STORE": url},
                           capture_output=True, text=True, timeout=60)
    assert "warning" not in quiet.stderr


@pytest.mark.parametrize("bad", [
    f"op:{PASSWORD}@localhost",
    f"postgresql://op:{PASSWORD} x@localhost/db",
    f"postgresql://op:{PASSWORD}%zz@localhost/db",
    f"postgresql://op:{PASSWORD}@[::1/db",
    f"postgresql//op:{PASSWORD}@localhost/db",
])
def test_an_unparsable_url_is_named_by_scheme_and_host_only(bad: str, tmp_path: Path) -> None:
    for how in (["--store", bad], []):
        env = {"PATH": "/usr/bin:/bin", "CRONCTL_STORE": bad} if not how else {"PATH": "/usr/bin:/bin"}
        done = subprocess.run([*CRONCTL, *how, "--home", str(tmp_path / "h"), "status"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        assert PASSWORD not in done.stderr and "internal error" not in done.stderr, done.stderr
        assert done.stderr.startswith("cronctl: error: --store"), done.stderr
