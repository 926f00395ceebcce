"""The runner with real processes: gate, status, output, timeouts, kills, scale."""

from __future__ import annotations

import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from tests.helpers.runnerhelp import Results, live_group_members, request  # the results and supervisor fixtures live in conftest.py

from cronctl.proc import identity as procs
from cronctl.proc.find import find_run_processes
from cronctl.proc.run import RunResult
from cronctl.proc.spawn import RunRequest
from cronctl.proc.supervisor import Supervisor

pytestmark = pytest.mark.slow


def run_to_end(sup: Supervisor, results: Results, req: RunRequest, timeout: float = 20.0) -> RunResult:
    sup.spawn_gated(req)
    sup.open_gates([req.run_id])
    return results.wait(req.run_id, timeout)


def wait_until(predicate: Callable[[], object], timeout: float, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def zombie_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


# --- status and output ---------------------------------------------------------


def test_exit_zero_is_success(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    result = run_to_end(supervisor, results, request(tmp_path, "exit 0"))
    assert (result.status, result.exit_code, result.signal, result.reason) == ("success", 0, None, None)
    assert result.duration >= 0 and result.ended_mono >= result.started_mono


def test_nonzero_exit_is_an_error_carrying_the_exit_code(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    result = run_to_end(supervisor, results, request(tmp_path, "exit 7"))
    assert (result.status, result.exit_code, result.reason) == ("error", 7, "exit_code_nonzero")


def test_death_by_a_signal_nobody_sent_is_an_error_with_that_signal(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    result = run_to_end(supervisor, results, request(tmp_path, "kill -KILL $$"))
    assert (result.status, result.exit_code, result.signal) == ("error", None, 9)


def test_stdout_and_stderr_are_captured_to_a_private_log(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "echo to-stdout; echo to-stderr >&2")
    result = run_to_end(supervisor, results, req)
    assert req.log_path.read_text() == "to-stdout\nto-stderr\n"
    assert stat.S_IMODE(req.log_path.stat().st_mode) == 0o600
    assert result.output_tail == "to-stdout\nto-stderr\n"
    assert not result.log_truncated


def test_log_is_capped_and_ends_with_a_truncation_note(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "head -c 300000 /dev/zero | tr '\\0' a; echo; echo the-end", log_cap=1000)
    result = run_to_end(supervisor, results, req)
    data = req.log_path.read_bytes()
    assert data[:1000] == b"a" * 1000
    assert data[1000:].startswith(b"\n[cronctl] output truncated") and data.endswith(b"\n")
    assert data.count(b"\n") == 2
    assert result.log_truncated and result.status == "success"
    # The tail still shows the end of the output, beyond the cap.
    assert result.output_tail.endswith("the-end\n") and len(result.output_tail) == 4096


def test_output_tail_is_decoded_without_failing_on_bad_bytes(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    result = run_to_end(supervisor, results, request(tmp_path, "printf 'ok \\377\\376 done'"))
    assert result.output_tail == "ok \ufffd\ufffd done"


def test_the_child_sees_cronctl_variables_job_env_and_inherited_env(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    command = 'echo "$CRONCTL_JOB|$CRONCTL_RUN_ID|$CRONCTL_ATTEMPT|$GREETING|${PATH:+has-path}"'
    req = request(tmp_path, command, env={"GREETING": "hello world"})
    result = run_to_end(supervisor, results, req)
    assert result.output_tail == f"job|{req.run_id}|1|hello world|has-path\n"


def test_an_argv_command_is_run_without_a_shell(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    result = run_to_end(supervisor, results, request(tmp_path, ("printf", "%s|", "two words", "$HOME", "*")))
    assert result.output_tail == "two words|$HOME|*|"


def test_the_command_runs_in_its_cwd(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    workdir = tmp_path / "a dir with spaces"
    workdir.mkdir()
    result = run_to_end(supervisor, results, request(tmp_path, "pwd", cwd=str(workdir)))
    assert result.output_tail == f"{workdir}\n"


def test_stdin_is_empty(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    result = run_to_end(supervisor, results, request(tmp_path, "wc -c"))
    assert result.output_tail.strip() == "0"


def test_sigpipe_has_its_default_action_in_the_child(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    # With SIGPIPE ignored (Python's own setting) `yes` would print errors instead of dying quietly.
    result = run_to_end(supervisor, results, request(tmp_path, "yes | head -n 1"))
    assert (result.status, result.output_tail) == ("success", "y\n")


# --- the gate --------------------------------------------------------------------------


def test_the_command_does_not_run_before_its_gate_opens(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    req = request(tmp_path, f"touch '{marker}'")
    spawned = supervisor.spawn_gated(req)
    assert procs.is_alive(procs.ProcIdentity(spawned.pid, spawned.start_time))
    time.sleep(0.5)
    assert not marker.exists()
    assert supervisor.running() == [req.run_id]
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).status == "success"
    assert marker.exists()


def test_exec_keeps_the_pid_and_start_time_known_before_the_gate(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, ("sleep", "30"))
    spawned = supervisor.spawn_gated(req)
    supervisor.open_gates([req.run_id])
    assert wait_until(lambda: psutil.Process(spawned.pid).name() == "sleep", 30)
    assert procs.identify(spawned.pid) == procs.ProcIdentity(spawned.pid, spawned.start_time)
    supervisor.kill(req.run_id, "test")
    results.wait(req.run_id)


def test_a_cancelled_gate_never_runs_the_command(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    req = request(tmp_path, f"touch '{marker}'")
    supervisor.spawn_gated(req)
    supervisor.cancel_gate(req.run_id)
    result = results.wait(req.run_id)
    assert (result.status, result.reason, result.exit_code, result.duration) == (
        "not_started", "gate_cancelled", None, 0.0)
    supervisor.open_gates([req.run_id])  # too late: nothing happens
    time.sleep(0.2)
    assert not marker.exists()


def test_killing_a_gated_run_reports_it_not_started_with_the_reason(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    req = request(tmp_path, f"touch '{marker}'")
    supervisor.spawn_gated(req)
    assert supervisor.kill(req.run_id, "shutdown")
    result = results.wait(req.run_id)
    assert (result.status, result.reason) == ("not_started", "shutdown")
    assert not marker.exists()


def test_the_timeout_clock_starts_when_the_gate_opens(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    req = request(tmp_path, "sleep 0.2", timeout=0.6)
    supervisor.spawn_gated(req)
    time.sleep(1.0)  # gated longer than the timeout: must not count
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).status == "success"


# --- timeouts, kills, leftovers ------------------------------------------------------


def test_timeout_kills_a_term_trapping_job_and_its_setsid_grandchild(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "trap '' TERM; setsid sleep 300 & sleep 300", timeout=1.0, kill_grace=1.0)
    supervisor.spawn_gated(req)
    opened = time.monotonic()
    supervisor.open_gates([req.run_id])
    assert wait_until(lambda: len(find_run_processes(req.run_id)) == 3, 30)
    result = results.wait(req.run_id)
    timed_out = opened + req.timeout
    assert wait_until(lambda: not find_run_processes(req.run_id), timed_out + 4 - time.monotonic())
    dead = time.monotonic() - timed_out
    # Observed: 1.03-1.10 s from the timeout to no process left (kill_grace 1 s).
    assert dead < 4.0
    assert (result.status, result.reason, result.signal) == ("timeout", "timeout", 9)
    assert 1.0 <= result.duration < 4.0


def test_a_background_child_holding_stdout_does_not_hold_the_run_open(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "sleep 30 & echo started; exit 0")
    supervisor.spawn_gated(req)
    opened = time.monotonic()
    supervisor.open_gates([req.run_id])
    result = results.wait(req.run_id)
    # The default drain bound is 2 s; the leftover dies on SIGTERM at once.
    assert results.arrived[req.run_id] - opened < 3.0
    assert (result.status, result.output_tail, result.leftovers_killed) == ("success", "started\n", 1)
    assert result.duration < 1.0  # the job's own time, not the drain
    assert find_run_processes(req.run_id) == []


def test_a_descendant_that_keeps_writing_cannot_hold_the_run_open(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    # The subshell ignores TERM and PIPE, so only SIGKILL ends it, after its grace.
    loop = "(trap '' TERM PIPE; while :; do echo spam; done) 2>/dev/null & exit 0"
    req = request(tmp_path, loop, drain_timeout=0.5, kill_grace=0.5, log_cap=10_000)
    opened = time.monotonic()
    result = run_to_end(supervisor, results, req)
    assert results.arrived[req.run_id] - opened < 5.0
    assert (result.status, result.log_truncated, result.leftovers_killed) == ("success", True, 1)
    # SIGKILL is sent before the result; on a busy machine the kernel may take a moment to end it.
    assert wait_until(lambda: find_run_processes(req.run_id) == [], 30)


def test_kill_reports_killed_with_its_reason_and_the_group_dies(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "sleep 300 & sleep 300 & wait", kill_grace=2.0)
    spawned = supervisor.spawn_gated(req)
    supervisor.open_gates([req.run_id])
    assert wait_until(lambda: len(find_run_processes(req.run_id)) == 3, 30)
    asked = time.monotonic()
    assert supervisor.kill(req.run_id, "replaced") is True
    assert time.monotonic() - asked < 0.5  # non-blocking: the supervisor thread does it
    result = results.wait(req.run_id)
    # Observed: about 0.01-0.05 s from kill() to the result, every process dead on SIGTERM.
    assert results.arrived[req.run_id] - asked < 2.0
    assert (result.status, result.reason, result.signal) == ("killed", "replaced", 15)
    assert live_group_members(spawned.pid) == []


def test_kill_of_an_unknown_run_returns_false(supervisor: Supervisor) -> None:
    assert supervisor.kill("no-such-run", "killed") is False


def test_a_disabled_runner_timer_leaves_an_overdue_run_alone(results: Results, tmp_path: Path) -> None:
    sup = Supervisor(on_result=results, timeouts_enabled=False)
    sup.start()
    try:
        result = run_to_end(sup, results, request(tmp_path, "sleep 0.8", timeout=0.2))
        assert result.status == "success"
    finally:
        sup.shutdown(wait=10)


def test_timers_follow_the_injected_monotonic_clock(results: Results, tmp_path: Path) -> None:
    # Real time plus a jump we control: an hour-long timeout passes without waiting an hour,
    # while the drain and leftover bounds, which follow the same clock, keep moving.
    jumped = [0.0]
    sup = Supervisor(on_result=results, monotonic=lambda: time.monotonic() + jumped[0])
    sup.start()
    try:
        req = request(tmp_path, "sleep 30", timeout=3600.0)
        sup.spawn_gated(req)
        sup.open_gates([req.run_id])
        assert wait_until(lambda: sup.gate_opened_at([req.run_id])[req.run_id] is not None, 10)
        jumped[0] = 3601.0
        sup.open_gates([])  # wakes the supervisor thread, which finds the deadline passed
        result = results.wait(req.run_id)
        assert (result.status, result.reason) == ("timeout", "timeout")
    finally:
        sup.shutdown(wait=10)


def test_shutdown_kills_every_run_and_delivers_every_result(results: Results, tmp_path: Path) -> None:
    sup = Supervisor(on_result=results)
    sup.start()
    running = [request(tmp_path, "sleep 300", kill_grace=1.0) for _ in range(3)]
    stubborn = request(tmp_path, "trap '' TERM; sleep 300", kill_grace=0.5)
    gated = request(tmp_path, "sleep 300")
    for req in [*running, stubborn, gated]:
        sup.spawn_gated(req)
    sup.open_gates(r.run_id for r in [*running, stubborn])
    time.sleep(0.3)
    began = time.monotonic()
    sup.shutdown("shutdown", wait=15)
    assert time.monotonic() - began < 5.0
    assert {results.by_id[r.run_id].status for r in [*running, stubborn]} == {"killed"}
    assert {results.by_id[r.run_id].reason for r in [*running, stubborn]} == {"shutdown"}
    assert (results.by_id[gated.run_id].status, results.by_id[gated.run_id].reason) == ("not_started", "shutdown")
    assert sup.running() == []
    assert all(find_run_processes(r.run_id) == [] for r in [*running, stubborn, gated])
    assert not any(t.name == "cronctl-supervisor" for t in threading.enumerate())
    with pytest.raises(RuntimeError):
        sup.spawn_gated(request(tmp_path, "true"))


def test_a_failing_on_result_callback_does_not_stop_the_supervisor(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    delivered: list[RunResult] = []

    def on_result(result: RunResult) -> None:
        delivered.append(result)
        raise RuntimeError("the store is on fire")

    sup = Supervisor(on_result=on_result)
    sup.start()
    try:
        for _ in range(2):
            req = request(tmp_path, "true")
            sup.spawn_gated(req)
            sup.open_gates([req.run_id])
            assert sup.wait_idle(10)
        assert [r.status for r in delivered] == ["success", "success"]
        assert "the store is on fire" in capfd.readouterr().err
    finally:
        sup.shutdown(wait=10)


# --- scale --------------------------------------------------------------------------------


def test_200_short_runs_all_deliver_results_leaving_no_zombie_and_no_extra_thread(
    results: Results, tmp_path: Path
) -> None:
    threads_before = threading.active_count()
    sup = Supervisor(on_result=results)
    sup.start()
    peak = 0
    reqs = [request(tmp_path, "echo $CRONCTL_RUN_ID") for _ in range(200)]
    try:
        for i in range(0, 200, 20):
            batch = reqs[i : i + 20]
            for req in batch:
                sup.spawn_gated(req)
            sup.open_gates(r.run_id for r in batch)
            peak = max(peak, threading.active_count())
            assert sup.wait_idle(30)
    finally:
        sup.shutdown(wait=10)
    assert len(results.by_id) == 200
    assert all(results.by_id[r.run_id].output_tail == f"{r.run_id}\n" for r in reqs)
    assert all(results.by_id[r.run_id].status == "success" for r in reqs)
    assert zombie_children() == []
    assert peak == threads_before + 1  # the one supervisor thread
    assert threading.active_count() == threads_before


def test_100_simultaneous_runs_use_one_supervisor_thread(results: Results, tmp_path: Path) -> None:
    threads_before = threading.active_count()
    sup = Supervisor(on_result=results)
    sup.start()
    reqs = [request(tmp_path, "sleep 1") for _ in range(100)]
    try:
        for req in reqs:
            sup.spawn_gated(req)
        sup.open_gates(r.run_id for r in reqs)
        time.sleep(0.5)
        assert len(sup.running()) == 100
        # Measured: 2 threads in the process at the peak (pytest's main thread + the supervisor).
        peak = threading.active_count()
        assert sup.wait_idle(30)
    finally:
        sup.shutdown(wait=10)
    assert peak == threads_before + 1
    assert all(results.by_id[r.run_id].status == "success" for r in reqs)
    assert zombie_children() == []


# --- subreaper mode (process-wide, so in a process of its own) ---------------------------

SUBREAPER_SCRIPT = textwrap.dedent(
    """
    import sys, threading, time, uuid
    from pathlib import Path
    import psutil
    from cronctl.proc.spawn import RunRequest
    from cronctl.proc.supervisor import Supervisor

    results = {}
    done = threading.Event()
    sup = Supervisor(on_result=lambda r: results.setdefault(r.run_id, r), subreaper=True)
    sup.start()
    reqs = []
    for command in ["exit 3", "(sleep 0.3; exit 0) & exit 4", "setsid sh -c 'sleep 0.2' & exit 5"] * 5:
        run_id = uuid.uuid4().hex
        reqs.append(RunRequest(run_id=run_id, job="j", command=command, cwd=None,
                               env={"CRONCTL_RUN_ID": run_id}, timeout=10, kill_grace=1,
                               log_path=Path(sys.argv[1]) / f"{run_id}.log", drain_timeout=1.0))
        sup.spawn_gated(reqs[-1])
    sup.open_gates(r.run_id for r in reqs)
    assert sup.wait_idle(20)
    time.sleep(1.0)  # orphans end on their own; the reaper must collect them
    codes = [results[r.run_id].exit_code for r in reqs]
    assert codes == [3, 4, 5] * 5, codes
    zombies = [c for c in psutil.Process().children() if c.status() == psutil.STATUS_ZOMBIE]
    assert zombies == [], zombies
    sup.shutdown(wait=10)
    print("ok")
    """
)


def test_subreaper_mode_reaps_orphans_without_losing_a_tracked_status(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SUBREAPER_SCRIPT, str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=50,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_supervisor_that_made_the_process_a_subreaper_undoes_it_at_shutdown() -> None:
    # In a fresh interpreter: a process that supervised runs once (force-run, a test) must
    # not go on adopting its other children's orphans with nobody left to reap them.
    script = (
        "from cronctl.proc.identity import is_child_subreaper\n"
        "from cronctl.proc.supervisor import Supervisor\n"
        "sup = Supervisor(on_result=lambda r: None, subreaper=True)\n"
        "sup.start()\n"
        "during = is_child_subreaper()\n"
        "sup.shutdown(wait=10)\n"
        "print(during, is_child_subreaper())\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["True", "False"], out.stderr
