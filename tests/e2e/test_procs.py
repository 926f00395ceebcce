"""Process identity and killing, with real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from cronctl.proc import identity as procs
from cronctl.proc.find import find_run_processes, snapshot_runs
from cronctl.proc.identity import ProcIdentity
from cronctl.proc.kill import terminate_run
from tests.helpers.runnerhelp import live_group_members

pytestmark = pytest.mark.slow


@pytest.fixture
def run_id() -> Iterator[str]:
    """A fresh run id; whatever still carries it at the end is killed."""
    rid = uuid.uuid4().hex
    yield rid
    for proc in find_run_processes(rid):
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


def run_env(run_id: str) -> dict[str, str]:
    return {**os.environ, "CRONCTL_RUN_ID": run_id}


def start(args: list[str], run_id: str | None = None, **kwargs: object) -> subprocess.Popen[bytes]:
    env = run_env(run_id) if run_id else dict(os.environ)
    proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
        args, env=env, start_new_session=True, **kwargs
    )
    return proc


# How long a test waits for the state it means (a fork has exec'd, a process has left its
# session): generous, for a busy machine; the waits end as soon as the state holds.
SETTLE = 30.0


def execd(processes: list[psutil.Process], root_pid: int, name: str = "sleep") -> bool:
    """Every process but the root has exec'd `name`: a fork still running the shell carries
    the run's variable (and the shell's traps) until it execs, so a count of processes alone
    is not the state a test means."""
    try:
        return all(p.pid == root_pid or p.name() == name for p in processes)
    except psutil.NoSuchProcess:
        return False


def settled(run_id: str, root: ProcIdentity | None, count: int) -> bool:
    assert root is not None
    found = find_run_processes(run_id, root)
    return len(found) == count and execd(found, root.pid)


def wait_until(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return bool(predicate())  # type: ignore[operator]


def pids(processes: list[psutil.Process]) -> set[int]:
    return {p.pid for p in processes}


# --- identity --------------------------------------------------------------------


def test_identify_gives_the_pid_and_start_time_of_a_live_process() -> None:
    sleeper = start(["sleep", "30"])
    try:
        ident = procs.identify(sleeper.pid)
        assert ident == ProcIdentity(sleeper.pid, psutil.Process(sleeper.pid).create_time())
        assert procs.is_alive(ident)
    finally:
        sleeper.kill()
        sleeper.wait()


def test_identify_of_a_missing_pid_is_none() -> None:
    assert procs.identify(2**22 + 7) is None


def test_a_reused_pid_is_not_alive() -> None:
    sleeper = start(["sleep", "30"])
    try:
        real = procs.identify(sleeper.pid)
        assert real is not None
        # The same pid with another start time is what a reused pid looks like.
        assert not procs.is_alive(ProcIdentity(sleeper.pid, real.start_time - 10))
        assert not procs.is_alive(ProcIdentity(sleeper.pid, real.start_time + 0.5))
        assert procs.is_alive(ProcIdentity(sleeper.pid, real.start_time + 0.01))
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_zombie_and_a_reaped_process_are_not_alive() -> None:
    child = start(["true"])
    ident = procs.identify(child.pid)
    assert ident is not None
    assert wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, SETTLE)
    assert not procs.is_alive(ident)
    child.wait()
    assert not procs.is_alive(ident)


def test_boot_id_is_the_kernels_uuid() -> None:
    assert uuid.UUID(procs.boot_id())
    assert procs.boot_id() == procs.boot_id()


# --- finding the processes of a run ------------------------------------------------


def test_a_setsid_escapee_is_found_by_its_environment(run_id: str) -> None:
    shell = start(["sh", "-c", "setsid sleep 30 & echo $!"], run_id, stdout=subprocess.PIPE)
    root = procs.identify(shell.pid)
    assert shell.stdout is not None
    escapee = int(shell.stdout.readline())
    shell.wait()
    # It left the run's session (setsid(1) may take a moment to get there).
    assert wait_until(lambda: os.getsid(escapee) == escapee, SETTLE)
    assert escapee in pids(find_run_processes(run_id))
    assert escapee in pids(find_run_processes(run_id, root))


def test_the_supervisors_pass_still_finds_a_setsid_escapee_by_its_environment(run_id: str) -> None:
    """snapshot_runs(own_roots=True) reads the environment only of processes started since
    the root: an escapee was forked by the run, after its root, so it is among them."""
    shell = start(["sh", "-c", "setsid sleep 30 & echo $!"], run_id, stdout=subprocess.PIPE)
    root = procs.identify(shell.pid)
    assert shell.stdout is not None and root is not None
    escapee = int(shell.stdout.readline())
    shell.wait()
    assert wait_until(lambda: os.getsid(escapee) == escapee, SETTLE)
    assert escapee in pids(snapshot_runs({run_id: root}, own_roots=True)[run_id])


def test_the_supervisors_pass_reads_no_environment_older_than_its_roots(run_id: str) -> None:
    """A process started more than a second before every root cannot have been forked by
    their runs: its environment is not read (the pass no longer costs every process's)."""
    elder = start(["sleep", "30"], run_id)
    try:
        assert wait_until(lambda: find_run_processes(run_id) != [], SETTLE), "it carries the run's variable"
        time.sleep(1.2)
        later = start(["sleep", "30"])
        root = procs.identify(later.pid)
        assert root is not None
        try:
            assert pids(snapshot_runs({run_id: root})[run_id]) == {elder.pid, later.pid}, "every environment read"
            assert pids(snapshot_runs({run_id: root}, own_roots=True)[run_id]) == {later.pid}, \
                "the root alone: not one older than it"
        finally:
            later.kill()
            later.wait()
    finally:
        elder.kill()
        elder.wait()


def test_the_root_and_its_descendants_are_found_even_without_the_variable(run_id: str) -> None:
    shell = start(["sh", "-c", "env -u CRONCTL_RUN_ID sleep 30 & wait"], run_id)
    try:
        root = procs.identify(shell.pid)
        # The state meant: the forked shell has run `env`, which has exec'd sleep without the
        # variable (until then the fork still carries it, and is found by it).
        assert wait_until(lambda: execd(psutil.Process(shell.pid).children(), shell.pid)
                          and len(psutil.Process(shell.pid).children()) == 1, SETTLE)
        child = psutil.Process(shell.pid).children()[0].pid
        assert find_run_processes(run_id) == [psutil.Process(shell.pid)]
        assert pids(find_run_processes(run_id, root)) == {shell.pid, child}
    finally:
        terminate_run(run_id, procs.identify(shell.pid), 1.0)
        shell.wait()


def test_session_members_are_found_after_the_root_died(run_id: str) -> None:
    shell = start(["sh", "-c", "env -u CRONCTL_RUN_ID sleep 30 >/dev/null & echo $!"], run_id, stdout=subprocess.PIPE)
    root = procs.identify(shell.pid)
    assert shell.stdout is not None and root is not None
    orphan = int(shell.stdout.readline())
    shell.wait()
    # Until `env` has exec'd sleep, the forked shell still carries the variable.
    assert wait_until(lambda: psutil.Process(orphan).name() == "sleep", SETTLE)
    try:
        # Reparented, no variable: only its session ties it to the run.
        assert find_run_processes(run_id) == []
        assert pids(find_run_processes(run_id, root)) == {orphan}
    finally:
        terminate_run(run_id, root, 1.0)
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == psutil.STATUS_ZOMBIE


def test_processes_of_another_run_are_not_found(run_id: str) -> None:
    other = uuid.uuid4().hex
    sleeper = start(["sleep", "30"], other)
    try:
        assert wait_until(lambda: find_run_processes(other) != [], SETTLE)
        assert find_run_processes(run_id) == []
        assert find_run_processes(run_id[:-1]) == []  # no prefix matches
    finally:
        sleeper.kill()
        sleeper.wait()


# --- terminating a run ------------------------------------------------------------------


def test_terminate_run_never_signals_a_process_that_reuses_the_root_pid(run_id: str) -> None:
    # A session leader, so its pid is also a group and session id: the most
    # tempting target for a careless killpg.
    victim = start(["sleep", "30"])
    try:
        real = procs.identify(victim.pid)
        assert real is not None
        stale = ProcIdentity(victim.pid, real.start_time - 100)
        assert find_run_processes(run_id, stale) == []
        report = terminate_run(run_id, stale, 0.3)
        assert (report.terminated, report.killed) == (0, 0)
        time.sleep(0.1)
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_terminate_run_ends_a_polite_run_with_sigterm_alone(run_id: str) -> None:
    shell = start(["sh", "-c", "setsid sleep 300 & sleep 300 & wait"], run_id)
    root = procs.identify(shell.pid)
    assert wait_until(lambda: settled(run_id, root, 3), SETTLE)
    report = terminate_run(run_id, root, 5.0)
    assert (report.terminated, report.killed) == (3, 0)
    assert report.elapsed < 2.0
    assert shell.wait(timeout=5) == -15
    assert find_run_processes(run_id) == []


def test_terminate_run_sigkills_a_group_and_escapee_that_ignore_sigterm(run_id: str) -> None:
    shell = start(["sh", "-c", "trap '' TERM; setsid sleep 300 & sleep 300 & wait"], run_id)
    root = procs.identify(shell.pid)
    assert wait_until(lambda: settled(run_id, root, 3), SETTLE)
    report = terminate_run(run_id, root, 0.5)
    assert (report.terminated, report.killed) == (0, 3)
    # Observed: about 0.55 s for a 0.5 s grace.
    assert 0.5 <= report.elapsed < 3.0
    assert shell.wait(timeout=5) == -9
    assert live_group_members(shell.pid) == []
    assert find_run_processes(run_id) == []


def test_terminate_run_with_an_injected_sleep_still_ends(run_id: str) -> None:
    shell = start(["sh", "-c", "trap '' TERM; sleep 300"], run_id)
    root = procs.identify(shell.pid)
    assert wait_until(lambda: settled(run_id, root, 2), SETTLE)
    slept: list[float] = []
    report = terminate_run(run_id, root, 30.0, sleep=slept.append)
    assert report.killed == 2 and sum(slept) >= 30.0
    assert shell.wait(timeout=5) == -9


def test_terminate_run_of_nothing_reports_nothing() -> None:
    report = terminate_run(uuid.uuid4().hex, None, 1.0)
    assert (report.terminated, report.killed) == (0, 0)
    assert report.elapsed < 1.0


def test_set_child_subreaper_takes_effect() -> None:
    # Process-wide and irreversible, so in a process of its own.
    script = (
        "import ctypes; from cronctl.proc.identity import set_child_subreaper\n"
        "ok = set_child_subreaper()\n"
        "flag = ctypes.c_int()\n"
        "ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0)\n"
        "print(ok, flag.value)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=30, cwd=repo
    )
    assert out.stdout.split() == ["True", "1"], out.stderr
