"""SPEC §12, the dead man's switch: a job that goes late while the loop is alive (no failure,
no claim: nothing written about it) gets its `stale` from the loop's own health pass, once
per episode, and a later episode is news again. A real `cronctl run`, a local receiver.

With --max-parallel 1, a forced long run keeps `victim` from starting: its slot passes by
more than its grace, which is what `status` calls late.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.helpers.loophelp import cli, start_loop, stop, wait_ticking, wait_until
from tests.helpers.receivers import Receiver

pytestmark = pytest.mark.slow


def stale_of(receiver: Receiver, job: str) -> list[dict[str, object]]:
    return [body for body in receiver.bodies() if body["job"] == job and body["event"] == "stale"]


def state_of(home: Path, job: str) -> str:
    jobs = json.loads(cli(home, "status", "--json").stdout)["jobs"]
    return str(next(entry["state"] for entry in jobs if entry["name"] == job))


def test_a_job_gone_late_gives_one_stale_per_episode(tmp_path: Path, receiver: Receiver) -> None:
    home = tmp_path / "home"
    loop = start_loop(home, "--max-parallel", "1")
    try:
        wait_ticking(home, loop)
        assert cli(home, "add", "hog", "--every", "1h", "--", "sleep", "300").returncode == 0
        assert cli(home, "add", "victim", "--every", "2s", "--grace", "1s", "--notify", receiver.url,
                   "--notify-on", "stale", "--", "true").returncode == 0
        assert cli(home, "force-run", "hog").returncode == 0  # the one place is taken from now on
        wait_until(lambda: stale_of(receiver, "victim"), 60, interval=0.2)
        time.sleep(12)  # two more health passes (every 5 s) while it stays late: nothing more
        first = stale_of(receiver, "victim")
        assert len(first) == 1
        assert first[0]["status"] == "late" and "not started" in str(first[0]["text"])
        assert state_of(home, "victim") == "late"  # what the health pass judged is what status says

        assert cli(home, "kill", "hog").returncode == 0  # room again: victim runs, healthy
        wait_until(lambda: state_of(home, "victim") in ("ok", "running"), 60, interval=0.5)
        time.sleep(6)  # a health pass sees it healthy (a success re-arms it anyway)
        assert cli(home, "force-run", "hog").returncode == 0  # a second episode
        wait_until(lambda: len(stale_of(receiver, "victim")) == 2, 60, interval=0.2)
    finally:
        cli(home, "kill", "hog")
        assert stop(loop, timeout=60) == 0
    assert len(stale_of(receiver, "victim")) == 2
    assert not stale_of(receiver, "hog")  # the hog itself was running, never late
