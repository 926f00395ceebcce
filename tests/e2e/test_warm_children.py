"""Warm children (proc/warm.py): gated shells spawned before their run, adopted by it.

An adopted warm child must be the run exactly as a freshly spawned gated child is: its
environment, directory, command (shell or argv), output and log, its guard, and nothing of
it begins before its gate opens. What the lines to its gate cannot carry is spawned fresh."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from cronctl.proc.gate import GATE_NAME, GATE_SCRIPT, GATE_SHELL
from cronctl.proc.supervisor import Supervisor
from cronctl.proc.warm import preface
from tests.helpers.runnerhelp import Results, request

pytestmark = pytest.mark.slow  # most spawn processes

ROOT = Path(__file__).parents[2]


@pytest.fixture
def sup() -> Iterator[tuple[Supervisor, Results]]:
    results = Results()
    supervisor = Supervisor(on_result=results)
    supervisor.start()
    try:
        yield supervisor, results
    finally:
        supervisor.shutdown(wait=10)


def warm_children(supervisor: Supervisor) -> set[int]:
    return {warm.child.pid for warm in supervisor.warm._children}


def gated(cwd: str, *tail: str) -> list[str]:
    return [GATE_SHELL, "-c", GATE_SCRIPT, GATE_NAME, cwd, *tail]


# --- the lines (pure) ---------------------------------------------------------------------------


def test_the_lines_carry_what_differs_from_the_warm_childs_environment() -> None:
    base = {"PATH": "/bin", "HOME": "/root", "GONE": "x"}
    env = {"PATH": "/bin", "HOME": "/home/u", "CRONCTL_RUN_ID": "r1"}
    lines = preface(env, base, gated("/tmp", "-c", "echo a\necho b"))
    assert lines is not None
    assert lines.now == b"D /tmp\n", "its directory at adoption: a vanished one is a run never started"
    assert lines.at_open.decode().split("\n") == ["U GONE", "E HOME=/home/u", "E CRONCTL_RUN_ID=r1", "C echo a",
                                                   "C echo b", ""]
    argv = preface({}, {}, gated("", "/bin/echo", "one two", "$HOME"))
    assert argv is not None and (argv.now, argv.at_open) == (b"", b"A /bin/echo\nA one two\nA $HOME\n")


@pytest.mark.parametrize("env, tail", [
    ({"X": "two\nlines"}, ("-c", "true")),  # a value with a newline
    ({"bad name": "1"}, ("-c", "true")),  # not a shell name: export would fail
    ({"_cronctl_c": "1"}, ("-c", "true")),  # the warm script's own variable
    ({}, ("-c", "echo \\")),  # the newline after the last line would continue it
    ({}, ("/bin/echo", "a\nb")),  # an argument with a newline
    ({"BIG": "x" * 70_000}, ("-c", "true")),  # more than the pipe takes in one write
])
def test_what_the_lines_cannot_carry_is_spawned_fresh(env: dict[str, str], tail: tuple[str, ...]) -> None:
    assert preface(env, {}, gated("", *tail)) is None


def test_a_child_with_a_setup_helper_is_never_warm() -> None:
    assert preface({}, {}, ["/usr/bin/python3", "-m", "cronctl.proc.become", *gated("", "-c", "true")]) is None


# --- adoption (real processes) ------------------------------------------------------------------


def test_an_adopted_warm_child_runs_the_command_with_the_runs_environment_and_log(
        sup: tuple[Supervisor, Results], tmp_path: Path) -> None:
    supervisor, results = sup
    assert supervisor.warm.fill(2, lambda: False) == 2
    warm_pids = warm_children(supervisor)
    shell = request(tmp_path, 'echo "run=$CRONCTL_RUN_ID x=$X pwd=$(pwd)"\nexit 3', cwd=str(tmp_path),
                    env={"X": "a b $HOME"})
    argv = request(tmp_path, ("/bin/echo", "one  two", "$HOME"))
    children = [supervisor.spawn_gated(req, warm=True) for req in (shell, argv)]
    assert {child.pid for child in children} == warm_pids, "both runs are the warm children"
    assert len(supervisor.warm) == 0
    supervisor.open_gates([shell.run_id, argv.run_id])
    first, second = results.wait(shell.run_id), results.wait(argv.run_id)
    assert (first.status, first.exit_code) == ("error", 3)
    assert shell.log_path.read_text() == f"run={shell.run_id} x=a b $HOME pwd={tmp_path}\n"
    assert (second.status, second.exit_code) == ("success", 0)
    assert argv.log_path.read_text() == "one  two $HOME\n"


def test_a_warm_child_holds_none_of_the_stores_keys_in_its_environment_or_its_runs(
        sup: tuple[Supervisor, Results], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SPEC §9, secrets stay with cronctl: a warm child is spawned before any run, from the
    loop's own environment, so it must be stripped as a fresh child is (proc/childenv.py)."""
    monkeypatch.setenv("CRONCTL_STORE", "postgresql://cronctl:s3cret-url@db/cronctl")
    monkeypatch.setenv("PGPASSWORD", "s3cret-pg")
    supervisor, results = sup
    assert supervisor.warm.fill(1, lambda: False) == 1
    (pid,) = warm_children(supervisor)
    assert b"s3cret" not in Path(f"/proc/{pid}/environ").read_bytes(), "nothing of the store in the waiting shell"
    req = request(tmp_path, 'echo "store=${CRONCTL_STORE-unset} pg=${PGPASSWORD-unset}"')
    assert supervisor.spawn_gated(req, warm=True).pid == pid
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).status == "success"
    assert req.log_path.read_text() == "store=unset pg=unset\n"


def test_nothing_of_a_warm_run_begins_before_its_gate_and_a_cancelled_one_never_begins(
        sup: tuple[Supervisor, Results], tmp_path: Path) -> None:
    supervisor, results = sup
    supervisor.warm.fill(1, lambda: False)
    marker = tmp_path / "ran"
    req = request(tmp_path, f"touch {marker}")
    supervisor.spawn_gated(req, warm=True)
    time.sleep(0.3)
    assert not marker.exists(), "adopted, but its gate is closed: nothing ran"
    assert supervisor.cancel_gate(req.run_id)
    result = results.wait(req.run_id)
    assert (result.status, result.reason) == ("not_started", "gate_cancelled")
    assert not marker.exists()


def test_a_directory_gone_at_adoption_is_a_run_never_started(sup: tuple[Supervisor, Results], tmp_path: Path) -> None:
    """The warm child enters the run's directory before its gate opens, as the gate does."""
    supervisor, results = sup
    supervisor.warm.fill(1, lambda: False)
    req = request(tmp_path, "true")
    from cronctl.proc.spawn import preflight
    env, _ = preflight(req)
    adopted = supervisor.warm.adopt(req, env, gated(str(tmp_path / "gone"), "-c", "true"), supervisor._track)
    assert adopted is not None
    supervisor.wake()
    time.sleep(0.3)
    supervisor.open_gates([req.run_id])
    result = results.wait(req.run_id)
    assert (result.status, result.reason) == ("not_started", "blocked_config")


def test_a_request_the_lines_cannot_carry_leaves_the_warm_child_for_another(
        sup: tuple[Supervisor, Results], tmp_path: Path) -> None:
    supervisor, results = sup
    supervisor.warm.fill(1, lambda: False)
    req = request(tmp_path, 'printf "%s" "$X"', env={"X": "two\nlines"})
    supervisor.spawn_gated(req, warm=True)
    assert len(supervisor.warm) == 1, "spawned fresh; the warm child is kept"
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).status == "success"
    assert req.log_path.read_text() == "two\nlines"


def test_a_warm_child_that_died_is_not_adopted(sup: tuple[Supervisor, Results], tmp_path: Path) -> None:
    supervisor, results = sup
    supervisor.warm.fill(1, lambda: False)
    (warm,) = warm_children(supervisor)
    os.kill(warm, signal.SIGKILL)  # still unreaped: the pid cannot name another process
    time.sleep(0.2)
    req = request(tmp_path, "echo fresh")
    child = supervisor.spawn_gated(req, warm=True)
    assert child.pid != warm
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).status == "success"
    assert req.log_path.read_text() == "fresh\n"
    assert len(results.by_id) == 1, "the dead warm child was no run: no result of its own"


def guards(done: Callable[[dict[int, list[str]]], bool]) -> dict[int, list[str]]:
    """The guards among our children, once `done` says so (a guard just spawned may not have
    exec'd its shell yet: its command line is still ours for a moment)."""
    deadline = time.monotonic() + 10
    while True:
        found = {}
        for proc in psutil.Process().children():
            try:
                if "cronctl-guard" in proc.cmdline():
                    found[proc.pid] = proc.cmdline()
            except psutil.Error:
                continue
        if done(found) or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def test_a_run_with_another_kill_grace_gets_a_guard_of_its_own(sup: tuple[Supervisor, Results], tmp_path: Path) -> None:
    supervisor, results = sup
    supervisor.warm.fill(1, lambda: False, kill_grace=10.0)
    (warm_guard,) = guards(lambda found: len(found) == 1)
    req = request(tmp_path, "sleep 0.3", kill_grace=2.0)
    supervisor.spawn_gated(req, warm=True)
    (new_guard, argv), = guards(lambda found: len(found) == 1 and warm_guard not in found).items()
    assert new_guard != warm_guard and argv[-1] == "20", "the run's guard waits its own 2 s"
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).status == "success"


def test_shutdown_and_drain_leave_no_warm_child(tmp_path: Path) -> None:
    supervisor = Supervisor(on_result=Results())
    supervisor.start()
    supervisor.warm.fill(3, lambda: False)
    assert supervisor.warm.drain(keep=1) == 2
    supervisor.shutdown(wait=10)
    assert len(supervisor.warm) == 0
    left = [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
    assert left == [], f"left running: {[p.cmdline() for p in left]}"


def test_a_supervisor_shutting_down_makes_no_warm_child() -> None:
    supervisor = Supervisor(on_result=Results())
    supervisor.start()
    supervisor.shutdown(wait=10)
    assert supervisor.warm.fill(3, lambda: False) == 0


def test_filling_stops_as_soon_as_it_is_told() -> None:
    supervisor = Supervisor(on_result=Results())
    supervisor.start()
    try:
        asked = iter([False, False, True])
        assert supervisor.warm.fill(10, lambda: next(asked)) == 2
    finally:
        supervisor.shutdown(wait=10)


WARM_THEN_DIE = textwrap.dedent("""
    import json, time
    from cronctl.proc.supervisor import Supervisor
    sup = Supervisor(on_result=lambda result: None)
    sup.start()
    sup.warm.fill(3, lambda: False)
    import psutil
    print(json.dumps([p.pid for p in psutil.Process().children()]), flush=True)
    time.sleep(600)
""")


def test_warm_children_and_their_guards_end_with_a_loop_killed_by_kill_9() -> None:
    proc = subprocess.Popen([sys.executable, "-c", WARM_THEN_DIE], stdout=subprocess.PIPE, cwd=ROOT,
                            start_new_session=True)
    assert proc.stdout is not None
    pids = json.loads(proc.stdout.readline())
    assert len(pids) == 6, "three warm children, three guards"
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(psutil.pid_exists(pid) and psutil.Process(pid).status()
                                              != psutil.STATUS_ZOMBIE for pid in pids):
        time.sleep(0.05)
    alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], "a warm child reads EOF at its gate and exits; its guard finds nothing to end"


def test_a_warm_spawn_the_platform_refuses_ends_the_filling_and_leaves_nothing() -> None:
    import errno

    def refused(*_: object) -> int:
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))

    supervisor = Supervisor(on_result=Results(), spawn=refused)
    supervisor.start()
    try:
        assert supervisor.warm.fill(5, lambda: False) == 0
        assert len(supervisor.warm) == 0
        assert [p for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE] == []
    finally:
        supervisor.shutdown(wait=10)
