"""Issue 15, items 8 and 11: the smaller things a first use runs into.

Each test here failed before its fix. Most drive the CLI in-process through its real entry
point (the `cli` fixture); the kill test runs a real process, because only a real kill
shows what a file looks like when a write is cut short.
"""

from __future__ import annotations

import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from tests.conftest import subprocess_env

Cli = Callable[..., Any]

CRONTAB = "0 3 * * * /usr/bin/backup --all\n*/5 * * * * /usr/bin/poll\n"
OLD_JOBS = "jobs:\n  - {name: old, every: 1h, command: 'true'}\n"


# --- item 8: import-crontab -o writes atomically ------------------------------------------


# Python ignores SIGXFSZ (a write past the limit fails with EFBIG instead); this entry
# restores the default action, so the write past the limit kills the process outright.
KILLED_BY_SIGXFSZ = ("import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
                     "from cronctl.entry import main; main()")


def _limit_file_size() -> None:
    # A write past RLIMIT_FSIZE is answered with SIGXFSZ, whose default action kills the
    # process: a real kill at the first write of more than 16 bytes to a regular file.
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))


def test_a_kill_at_the_first_write_leaves_the_output_of_import_crontab_as_it_was(tmp_path: Path) -> None:
    crontab, out = tmp_path / "crontab", tmp_path / "jobs.yaml"
    crontab.write_text(CRONTAB)
    out.write_text(OLD_JOBS)
    env = {**subprocess_env(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-c", KILLED_BY_SIGXFSZ, "import-crontab", str(crontab), "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=60, preexec_fn=_limit_file_size)
    assert done.returncode == -signal.SIGXFSZ, done.stderr  # killed mid-write, as intended
    assert out.read_text() == OLD_JOBS


def test_a_write_cut_short_leaves_the_output_as_it_was_and_says_why(tmp_path: Path) -> None:
    crontab, out = tmp_path / "crontab", tmp_path / "jobs.yaml"
    crontab.write_text(CRONTAB)
    out.write_text(OLD_JOBS)
    env = {**subprocess_env(tmp_path / "home"), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "cronctl", "import-crontab", str(crontab), "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=60, preexec_fn=_limit_file_size)
    assert (done.returncode, done.stderr) == (1, f"cronctl: error: {out}: cannot write: File too large\n")
    assert out.read_text() == OLD_JOBS
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_import_crontab_replaces_the_output_whole_and_keeps_its_mode(cli: Cli, tmp_path: Path) -> None:
    crontab, out = tmp_path / "crontab", tmp_path / "jobs.yaml"
    crontab.write_text(CRONTAB)
    out.write_text(OLD_JOBS)
    out.chmod(0o640)
    result = cli("import-crontab", str(crontab), "-o", str(out), "--tz", "UTC")
    assert result.code == 0, result.err
    assert "/usr/bin/backup --all" in out.read_text() and "old" not in out.read_text()
    assert out.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_import_crontab_into_a_file_it_cannot_write_says_so(cli: Cli, tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(CRONTAB)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = cli("import-crontab", str(crontab), "-o", str(blocker / "jobs.yaml"), "--tz", "UTC")
    assert result.code == 1
    assert result.err.startswith(f"cronctl: error: {blocker / 'jobs.yaml'}: cannot write: ")
    assert "internal error" not in result.err


# --- metrics -o into a missing directory ------------------------------------------------------


def test_metrics_into_a_missing_directory_is_a_clear_error(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "missing" / "cronctl.prom"
    result = cli("metrics", "-o", str(target))
    assert (result.code, result.out) == (1, "")
    assert result.err == f"cronctl: error: metrics -o {target}: cannot write: No such file or directory\n"
    assert not target.parent.exists()


def test_metrics_output_is_written_whole_and_readable(cli: Cli, tmp_path: Path) -> None:
    target = tmp_path / "cronctl.prom"
    assert cli("metrics", "-o", str(target)).code == 0
    assert "cronctl_loop_state" in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
