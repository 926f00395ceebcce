"""The installed entry points as an operator runs them: real processes, real pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cronctl import __version__
from tests.conftest import cronctl_bin, subprocess_env

pytestmark = pytest.mark.slow


def run(args: list[str], home: Path, **kwargs) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    return subprocess.run(args, env=subprocess_env(home), capture_output=True, text=True, timeout=60, **kwargs)


ENTRY_POINTS = [pytest.param(cronctl_bin(), id="console-script"), pytest.param([sys.executable, "-m", "cronctl"],
                                                                                  id="python-m")]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_each_entry_point_prints_the_version(tmp_path: Path, entry: list[str]) -> None:
    done = run([*entry, "--version"], tmp_path / "home")
    assert (done.returncode, done.stdout, done.stderr) == (0, f"cronctl {__version__}\n", "")


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_each_entry_point_adds_a_job_that_list_json_then_shows(tmp_path: Path, entry: list[str]) -> None:
    home = tmp_path / "home"
    added = run([*entry, "add", "backup", "--cron", "0 3 * * *", "--tz", "Europe/Berlin", "--",
                 "pg_dump db | gzip > /tmp/db.gz"], home)
    assert (added.returncode, added.stderr) == (0, "")
    assert added.stdout.startswith("added backup: 0 3 * * * (Europe/Berlin), next fire ")
    listed = run([*entry, "list", "--json"], home)
    assert (listed.returncode, listed.stderr) == (0, "")
    (job,) = json.loads(listed.stdout)["jobs"]
    assert (job["name"], job["cron"], job["timezone"], job["command"], job["source"]) == (
        "backup", "0 3 * * *", "Europe/Berlin", "pg_dump db | gzip > /tmp/db.gz", None)
    assert job["next_fire_at"] == job["state"]["next_run_at"]


def test_an_error_exits_1_with_one_line_on_stderr_and_no_traceback(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "jobs.json").write_text("garbage{")
    done = run([*cronctl_bin(), "list"], home)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(f"cronctl: error: cannot parse store {home}/jobs.json: ")
    assert done.stderr.count("\n") == 1


def test_arguments_that_are_not_utf8_are_an_error_not_a_crash(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = subprocess.run([*cronctl_bin(), "add", "x", "--every", "1m", "--", b"echo \xff"],
                          env=subprocess_env(home), capture_output=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == b"cronctl: error: job 'x': -- COMMAND: is not valid UTF-8 text ('echo \\udcff')\n"


@pytest.mark.parametrize("args", [
    ["list"], ["list", "--json"], ["next"], ["audit"],
    ["--version"],
])
def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path, args: list[str]) -> None:
    home = tmp_path / "home"
    for name in ("a", "b"):
        assert run([*cronctl_bin(), "add", name, "--every", "1m", "--", "true"], home).returncode == 0
    # `cronctl list | head -0`: the pipe is closed before cronctl writes a byte. Exit 1
    # (click's convention for EPIPE) with nothing on stderr: no traceback, no "internal error".
    reader, writer = os.pipe()
    os.close(reader)
    done = subprocess.run([*cronctl_bin(), *args], env=subprocess_env(home), stdout=writer,
                          stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(writer)
    assert (done.returncode, done.stderr) == (1, "")


# --- many writers at once --------------------------------------------------------------

# Each worker runs the installed console script 25 times in one interpreter (runpy, so the
# script file itself is what runs), which keeps the imports to one per process: 200 fresh
# interpreters would spend a minute importing typer and rich on this machine.
WORKER = textwrap.dedent("""
    import runpy, sys
    script, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    failures = 0
    for i in range(count):
        sys.argv = [script, "add", f"w{worker}-job{i:02d}", "--every", f"{i + 1}m", "--", "true"]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exc:
            failures += exc.code not in (0, None)
    sys.exit(1 if failures else 0)
""")


def test_adds_from_eight_processes_at_once_all_land_with_a_gap_free_rev(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script = cronctl_bin()[0]
    if not script.endswith("cronctl"):
        pytest.skip("the console script is not installed next to this interpreter")
    workers, each = 8, 25
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, script, str(w), str(each)], env=subprocess_env(home),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for w in range(workers)
    ]
    outputs = [proc.communicate(timeout=110) for proc in procs]
    for proc, (out, err) in zip(procs, outputs):
        assert (proc.returncode, err) == (0, ""), err
        assert out.count("added ") == each
    doc = json.loads((home / "jobs.json").read_text())
    expected = {f"w{w}-job{i:02d}" for w in range(workers) for i in range(each)}
    assert set(doc["jobs"]) == expected
    # One write per add and no other writer: rev counts the writes, with no gap and no lost update.
    assert doc["rev"] == workers * each
    rows = [json.loads(line) for line in (home / "audit.jsonl").read_text().splitlines()]
    added = [row["job"] for row in rows if row["event"] == "job.added"]
    assert sorted(added) == sorted(expected)
    backup = json.loads((home / "jobs.json.bak").read_text())
    assert backup["rev"] == workers * each - 1
