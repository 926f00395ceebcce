"""Without the PostgreSQL driver (SPEC §9, "Installing"): a PostgreSQL URL is one line naming the
extra to install, exit 1, never an internal error; the JSON store does not need the driver."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import cronctl_bin, subprocess_env

pytestmark = pytest.mark.slow

# Loaded at interpreter start (site): the import of psycopg fails as if it were not installed.
HIDE_PSYCOPG = '''
import sys

class _NoPsycopg:
    def find_spec(self, name, path=None, target=None):
        if name == "psycopg" or name.startswith("psycopg."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoPsycopg())
'''
URL = "postgresql://cronctl@127.0.0.1:1/cronctl"


def without_driver(home: Path, tmp_path: Path, *args: str, store: bool = True) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE_PSYCOPG)
    env = {**subprocess_env(home), "PYTHONPATH": str(site)}
    env.pop("CRONCTL_STORE", None)
    if store:
        env["CRONCTL_STORE"] = URL
    return subprocess.run([*cronctl_bin(), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["run", "--once"], ["store", "import-json"],
                                  ["doctor"], ["list"]])
def test_a_postgresql_url_without_the_driver_names_the_extra(home: Path, tmp_path: Path, args: list[str]) -> None:
    done = without_driver(home, tmp_path, *args)
    assert done.returncode == 1, done.stderr
    assert done.stderr == "cronctl: error: --store: install the PostgreSQL driver: pip install 'cronctl[postgres]'\n"


def test_the_same_through_the_store_option(home: Path, tmp_path: Path) -> None:
    done = without_driver(home, tmp_path, "--store", URL, "list", store=False)
    assert (done.returncode, done.stderr.splitlines()[-1]) == (
        1, "cronctl: error: --store: install the PostgreSQL driver: pip install 'cronctl[postgres]'")


def test_the_json_store_needs_no_driver(home: Path, tmp_path: Path) -> None:
    assert without_driver(home, tmp_path, "add", "a", "--every", "1h", "--", "true", store=False).returncode == 0
    done = without_driver(home, tmp_path, "status", store=False)
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr
