"""cronctl as PID 1 of a container: it reaps the orphans of its jobs and ends its jobs at SIGTERM.

The loop runs as PID 1 of a fresh PID namespace (`unshare --pid --fork`, as root), the
position it has in a container without an init. Skipped where namespaces cannot be made.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.conftest import cronctl_bin, subprocess_env
from tests.helpers.loophelp import audit_rows, cli, is_guard, wait_until

pytestmark = pytest.mark.slow


def can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    done = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=30, check=False)
    return done.returncode == 0


@pytest.mark.skipif(not can_unshare(), reason="needs root and unshare(1) to make a PID namespace")
def test_as_pid_1_it_reaps_orphans_and_ends_its_jobs_at_sigterm(home: Path) -> None:
    # The job leaves an orphan that exits 1 s later: a zombie unless PID 1 reaps it.
    job = "sh -c 'sleep 1 &'; exec sleep 300"
    assert cli(home, "add", "orphaner", "--every", "1h", "--kill-grace", "2s", "--", "sh", "-c", job).returncode == 0
    wrapper = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", *cronctl_bin(), "run"],
                               env=subprocess_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        pid1 = wait_until(lambda: psutil.Process(wrapper.pid).children(), 20)[0]
        assert "1" == _ns_pid(pid1.pid)
        wait_until(lambda: (home / "scheduler.json").exists(), 20)
        assert cli(home, "force-run", "orphaner").returncode == 0
        wait_until(lambda: audit_rows(home, "run.started", "orphaner"), 20)
        # The orphan (a sleep 1 whose parent shell is gone) ends: it must not stay a zombie.
        def zombies() -> list[psutil.Process]:
            return [c for c in pid1.children() if c.status() == psutil.STATUS_ZOMBIE]

        # Only the job's sleep 300 left (and its guard, proc/guard.py).
        wait_until(lambda: len([c for c in pid1.children() if not is_guard(c)]) == 1 and not zombies(), 30)
        os.kill(pid1.pid, signal.SIGTERM)
        assert wrapper.wait(timeout=60) == 0
    finally:
        if wrapper.poll() is None:
            wrapper.kill()
            wrapper.wait(timeout=10)
    (ended,) = audit_rows(home, "run.finished", "orphaner")
    assert ended["status"] == "killed"


def _ns_pid(host_pid: int) -> str:
    """The pid a process has inside its own PID namespace (the last NSpid entry)."""
    for line in Path(f"/proc/{host_pid}/status").read_text().splitlines():
        if line.startswith("NSpid:"):
            return line.split()[-1]
    return ""
