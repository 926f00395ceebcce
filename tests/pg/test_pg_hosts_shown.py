"""Many hosts, read by a person (issue 26, item 8): on PostgreSQL the host is shown wherever
a run or a loop is shown: the loop's lines (started and finished), status, history."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.helpers.loophelp import stop, wait_until
from tests.pg.clusterhelp import run_cli, seed, start_host_loop

pytestmark = pytest.mark.slow

JOBS = """
jobs:
  - name: quick
    every: 1s
    command: "true"
  - name: long
    every: 1s
    overlap: skip
    command: "sleep 300"
"""


def test_the_host_is_shown_in_the_loops_lines_status_and_history(tmp_path: Path, store_url: str) -> None:
    seed(store_url, tmp_path, JOBS)
    log = tmp_path / "host-a.log"
    loop = start_host_loop(tmp_path / "host-a", store_url, "host-a", log=log)
    try:
        wait_until(lambda: re.search(r"quick\s+finished .* on host-a", log.read_text()) is not None, timeout=90)
        text = log.read_text()
        assert re.search(r"quick\s+started\s+run \S+ \(slot [^)]*\) on host-a", text), text
        wait_until(lambda: "on host-a" in run_cli(tmp_path / "cli", store_url, "host-b", "status").stdout,
                   timeout=60)
        status = run_cli(tmp_path / "cli", store_url, "host-b", "status")
        assert re.search(r"long\s+running\s+.*running \(\S+ on host-a\)", status.stdout), status.stdout
        headline = status.stdout.splitlines()[0]
        assert "pid" not in headline and "1 loop(s) running on host-a" in headline, headline
        history = run_cli(tmp_path / "cli", store_url, "host-b", "history", "quick", "-n", "2")
        assert history.stdout.splitlines()[0].split()[:3] == ["JOB", "RUN", "HOST"], history.stdout
        assert all(line.split()[2] == "host-a" for line in history.stdout.splitlines()[1:]), history.stdout
    finally:
        assert stop(loop) == 0
    time.sleep(0.1)
    assert re.search(r"long\s+finished\s+killed .* on host-a", log.read_text()), log.read_text()
