"""`status --json` answered without typer (fastpath.py) says exactly what the typer command says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cronctl.cli import fastpath
from conftest import cronctl_bin, subprocess_env


@pytest.mark.parametrize("argv, expected", [
    (["status", "--json"], fastpath.StatusArgs(None, False)),
    (["status", "--json", "--stale"], fastpath.StatusArgs(None, True)),
    (["status", "--stale", "--json", "--json"], fastpath.StatusArgs(None, True)),
    (["--home", "/x", "status", "--json"], fastpath.StatusArgs("/x", False)),
    (["--home=/x", "--home", "/y", "status", "--json"], fastpath.StatusArgs("/y", False)),
])
def test_the_exact_status_json_forms_are_taken(argv: list[str], expected: fastpath.StatusArgs) -> None:
    assert fastpath.parse(argv) == expected


@pytest.mark.parametrize("argv", [
    [], ["status"], ["status", "--stale"], ["status", "--json", "--watch"], ["status", "--json", "--help"],
    ["status", "--json", "-w"], ["status", "--json", "extra"], ["list", "--json"], ["--json", "status"],
    ["--home"], ["--home", "status", "--json"], ["--home=", "status", "--json"], ["--home", "--json", "status"],
    ["--homes", "/x", "status", "--json"], ["--version"], ["status", "--json=1"],
])
def test_everything_else_goes_to_the_typer_app(argv: list[str]) -> None:
    assert fastpath.parse(argv) is None


def _both(home: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same command through the console script (fast path) and through cli.main (typer)."""
    env = subprocess_env(home)
    fast = subprocess.run([*cronctl_bin(), *argv], env=env, capture_output=True, text=True, timeout=60)
    typer_way = subprocess.run([sys.executable, "-c", "import sys; from cronctl.cli.main import main; main(sys.argv[1:])",
                                *argv], env=env, capture_output=True, text=True, timeout=60)
    return fast, typer_way


def _same(fast: subprocess.CompletedProcess[str], typer_way: subprocess.CompletedProcess[str]) -> None:
    assert (fast.returncode, fast.stderr) == (typer_way.returncode, typer_way.stderr)
    # No loop runs in these homes, so nothing in the answer depends on the moment it was read.
    assert fast.stdout == typer_way.stdout


def test_the_fast_path_prints_what_the_typer_command_prints(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    cli("add", "ok-job", "--every", "1h", "--", "true")
    cli("add", "never-ran", "--cron", "*/5 * * * *", "--", "echo", "hi")
    cli("pause", "never-ran")
    for argv in (["status", "--json"], ["status", "--json", "--stale"], ["--home", str(home), "status", "--json"]):
        _same(*_both(home, *argv))


def test_stale_exits_3_on_both_paths(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    from cronctl.context import Context
    from cronctl.paths import resolve_home

    cli("add", "late", "--every", "1m", "--", "true")
    with Context.open(resolve_home(None)).store.transaction() as doc:
        doc["jobs"]["late"]["state"]["next_run_at"] = "2020-01-01T00:00:00.000+00:00"
    fast, typer_way = _both(home, "status", "--json", "--stale")
    _same(fast, typer_way)
    assert fast.returncode == 3 and '"late"' in fast.stdout


def test_a_corrupt_store_fails_alike_and_is_left_alone(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    cli("add", "a", "--every", "1h", "--", "true")
    store = home / "jobs.json"
    store.write_bytes(b'{"jobs": {')
    fast, typer_way = _both(home, "status", "--json")
    _same(fast, typer_way)
    assert fast.returncode == 1 and str(store) in fast.stderr and "Traceback" not in fast.stderr
    assert store.read_bytes() == b'{"jobs": {'


def test_the_fast_path_does_not_import_the_cli_framework(home: Path) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "cronctl", "status", "--json"],
                          env=subprocess_env(home), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("{")
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "cronctl.ops.status" in imported
    assert not {name for name in imported if name.split(".")[0] in ("typer", "click", "rich", "pydantic")}
