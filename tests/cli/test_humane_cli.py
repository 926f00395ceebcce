"""What a person meets: help with examples, docs for every command, plain piped output, a live view."""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cronctl.cli.main import app  # the app with every command module registered
from cronctl.jobs.words import describe_expression
from tests.conftest import cronctl_bin, subprocess_env

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[")


def command_names() -> list[str]:
    import typer.main

    group = typer.main.get_command(app)
    return sorted(group.commands)  # type: ignore[attr-defined]


def test_every_command_has_help_with_an_example_and_a_docs_entry() -> None:
    import typer.main

    group = typer.main.get_command(app)
    docs = (REPO / "README.md").read_text() + "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    names = command_names()
    assert {"add", "apply", "run", "status", "doctor", "metrics", "export", "import-crontab"} <= set(names)
    for name in names:
        command = group.commands[name]  # type: ignore[attr-defined]
        assert command.help and command.help.strip(), f"{name} has no help text"
        assert "Example: " in command.help and f"cronctl {name}" in command.help, f"{name}: no example"
        assert f"cronctl {name}" in docs, f"{name} is not documented in README.md or docs/"


@pytest.mark.slow
def test_piped_output_has_no_escape_codes(home: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in subprocess_env(home).items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"

    def run(*args: str) -> str:
        done = subprocess.run([*cronctl_bin(), *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode in (0, 1, 3), done.stderr
        return done.stdout + done.stderr

    run("apply", "-f", str(REPO / "jobs.example.yaml"))
    for args in (["list"], ["show", "disk-report"], ["next", "-n", "2"], ["status"], ["history"],
                 ["audit", "-n", "5"], ["doctor"], ["--help"], ["add", "--help"]):
        out = run(*args)
        assert out.strip(), args
        assert not ANSI.search(out), f"escape codes in piped output of {args}"


@pytest.mark.slow
def test_status_watch_redraws_and_exits_cleanly_on_ctrl_c(home: Path) -> None:
    assert subprocess.run([*cronctl_bin(), "add", "tick", "--every", "1m", "--", "true"],
                          env=subprocess_env(home), capture_output=True, timeout=60).returncode == 0
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*cronctl_bin(), "status", "--watch", "--interval", "0.3"], env=subprocess_env(home),
                            stdin=follower, stdout=follower, stderr=follower, start_new_session=True)
    os.close(follower)
    screen = b""
    deadline = time.monotonic() + 30
    while b"tick" not in screen and time.monotonic() < deadline:
        try:
            screen += os.read(leader, 65536)
        except OSError:
            break
    time.sleep(0.8)  # a few redraws
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=20) == 0
    os.close(leader)
    assert b"tick" in screen and b"loop:" in screen
    assert b"Traceback" not in screen


@pytest.mark.parametrize(("expr", "words"), [
    ("*/5 * * * *", "Every 5 minutes"),
    ("30 2 * * 1-5", "At 02:30, Monday through Friday"),
    ("0 0 13 * 5", "At 00:00, on day 13 of the month, or on Friday"),
    ("0 0 */2 * 5", "At 00:00, every 2 days, and only on Friday (both day fields must match)"),
    ("@weekly", "At 00:00, only on Sunday"),
])
def test_cron_expressions_are_described_with_debians_day_rule(expr: str, words: str) -> None:
    assert describe_expression(expr) == words


def test_the_loop_prints_one_line_per_decision() -> None:
    from cronctl.cli.render import loop_line

    assert loop_line({"ts": "2026-12-02T13:11:23.100+00:00", "event": "run.finished", "job": "bad",
                      "status": "error", "exit_code": 4, "duration_s": 0.25}) == \
        "13:11:23 bad              finished  error (exit 4) in 0.25s"
    assert loop_line({"ts": "2026-12-02T13:11:23.100+00:00", "event": "run.missed", "job": "ok", "count": 3,
                      "reason": "coalesced", "catchup": "latest"}) == \
        "13:11:23 ok               missed    3 slot(s) (coalesced, catchup latest)"
    assert loop_line({"ts": "2026-12-02T13:11:23.100+00:00", "event": "job.added", "job": "x"}) is None


# --- plain tables -------------------------------------------------------------------------


def test_table_rows_stay_one_line_each_and_wide_characters_line_up() -> None:
    from cronctl.cli.render import columns

    lines = columns(("NAME", "COMMAND", "LAST"), [("日本", "echo a\necho\tb", "x"), ("b", "\x1b[31mred", "-")])
    assert lines == [
        "NAME  COMMAND          LAST",
        "日本  echo a\\necho\\tb  x",
        "b     \\x1b[31mred      -",
    ]


def test_a_multi_line_command_is_one_row_of_list_status_and_history(home: Path) -> None:
    import json

    env = subprocess_env(home)
    run = lambda *args: subprocess.run([*cronctl_bin(), *args], env=env, capture_output=True, text=True,  # noqa: E731
                                       timeout=60, check=True)
    run("add", "two-lines", "--every", "1h", "--", "echo one\necho two")
    assert "echo one\\necho two" in run("list").stdout.splitlines()[1]
    assert run("status").stdout.splitlines()[-1].startswith("two-lines  ")
    run("force-run", "two-lines")
    history = run("history").stdout.splitlines()
    assert len(history) == 2 and history[1].startswith("two-lines  ")
    assert json.loads(run("history", "--json").stdout)["runs"][0]["status"] == "success"
