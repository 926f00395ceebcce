"""The suite itself: what every test may assume, in one process or in an xdist worker, and the
one command that runs it all (README and .ci/run)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_no_terminal_size_reaches_a_test_or_its_children() -> None:
    # GNU readline (imported by pytest) exports COLUMNS and LINES; xdist's workers inherited
    # them and fitted `list` to 80 columns. tests/conftest.py removes both.
    assert "COLUMNS" not in os.environ and "LINES" not in os.environ
    child = subprocess.run(["env"], capture_output=True, text=True, check=True, timeout=30).stdout
    names = {line.partition("=")[0] for line in child.splitlines()}
    assert not names & {"COLUMNS", "LINES"}, child


def test_the_readme_and_ci_run_the_same_test_command() -> None:
    readme = (REPO / "README.md").read_text()
    setup = readme[readme.index("```sh\n") + 6:]
    setup = setup[:setup.index("```")].splitlines()
    assert len(setup) == 2  # the README starts with exactly two commands: the demo and the tests
    readme_pytest = setup[1].rpartition(" && ")[2]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    ci_pytest = [line for line in ci if line.startswith(".venv/bin/python -m pytest")]
    assert ci_pytest == [readme_pytest]
    assert " -n " in readme_pytest  # the suite runs on several workers (README, Testing)


def test_a_child_can_be_interrupted_however_the_suite_was_started() -> None:
    # Bit 1 of SigIgn is SIGINT: set when the suite was started in the background without job
    # control, unless tests/conftest.py gave SIGINT a handler (reset to default at exec).
    assert signal.getsignal(signal.SIGINT) != signal.SIG_IGN
    status = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True, check=True,
                            timeout=30).stdout
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    assert not ignored & (1 << (signal.SIGINT - 1)), status
