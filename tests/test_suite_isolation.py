"""The suite's own environment: what every test may assume, in one process or in an xdist worker."""

from __future__ import annotations

import os
import subprocess


def test_no_terminal_size_reaches_a_test_or_its_children() -> None:
    # GNU readline (imported by pytest) exports COLUMNS and LINES; xdist's workers inherited
    # them and fitted `list` to 80 columns. tests/conftest.py removes both.
    assert "COLUMNS" not in os.environ and "LINES" not in os.environ
    child = subprocess.run(["env"], capture_output=True, text=True, check=True, timeout=30).stdout
    names = {line.partition("=")[0] for line in child.splitlines()}
    assert not names & {"COLUMNS", "LINES"}, child
