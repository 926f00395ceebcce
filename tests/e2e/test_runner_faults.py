"""The runner when things go wrong: spawn failures, blocked config, stubborn jobs."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from tests.helpers.runnerhelp import Results, request  # the results and supervisor fixtures live in conftest.py

from cronctl.proc import identity as procs
from cronctl.proc.find import find_run_processes
from cronctl.proc.spawn import BlockedConfig, SpawnError, spawn_session
from cronctl.proc.supervisor import Supervisor

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def open_fds() -> list[str]:
    return sorted(os.listdir("/proc/self/fd"))


def live_children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


# --- spawn failures -----------------------------------------------------------------


def test_an_injected_eagain_is_a_spawn_error_leaving_nothing_behind(results: Results, tmp_path: Path) -> None:
    def no_more_processes(*_args: Any) -> int:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    sup = Supervisor(on_result=results, spawn=no_more_processes)
    sup.start()
    try:
        (tmp_path / "runs").mkdir()
        fds_before = open_fds()
        children_before = live_children()
        with pytest.raises(SpawnError) as caught:
            sup.spawn_gated(request(tmp_path, "echo never"))
        assert caught.value.errno == errno.EAGAIN
        assert open_fds() == fds_before
        assert sup.running() == []
        assert live_children() == children_before
    finally:
        sup.shutdown(wait=10)
    assert results.by_id == {}


def test_a_seam_failing_with_a_non_os_error_leaks_no_fd(results: Results, tmp_path: Path) -> None:
    def broken(*_args: Any) -> int:
        raise RuntimeError("bug in the seam")

    sup = Supervisor(on_result=results, spawn=broken)
    sup.start()
    try:
        (tmp_path / "runs").mkdir()
        fds_before = open_fds()
        with pytest.raises(RuntimeError):
            sup.spawn_gated(request(tmp_path, "echo never"))
        assert open_fds() == fds_before
        assert sup.running() == []
    finally:
        sup.shutdown(wait=10)


def test_losing_the_pidfd_after_spawn_kills_the_gated_child_and_leaks_nothing(
    results: Results, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[int] = []

    def recording_spawn(*args: Any) -> int:
        pid = spawn_session(*args)
        spawned.append(pid)
        return pid

    def out_of_fds(_pid: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    sup = Supervisor(on_result=results, spawn=recording_spawn)
    sup.start()
    try:
        marker = tmp_path / "ran"
        (tmp_path / "runs").mkdir()
        fds_before = open_fds()
        monkeypatch.setattr(os, "pidfd_open", out_of_fds)
        with pytest.raises(SpawnError) as caught:
            sup.spawn_gated(request(tmp_path, f"touch '{marker}'"))
        monkeypatch.undo()
        assert caught.value.errno == errno.EMFILE
        assert open_fds() == fds_before
        assert sup.running() == []
        assert len(spawned) == 1 and not psutil.pid_exists(spawned[0])  # killed and reaped
        assert not marker.exists()
    finally:
        monkeypatch.undo()
        sup.shutdown(wait=10)


def test_an_unwritable_log_is_a_spawn_error(supervisor: Supervisor, tmp_path: Path) -> None:
    (tmp_path / "not-a-dir").write_text("")
    fds_before = open_fds()
    with pytest.raises(SpawnError) as caught:
        supervisor.spawn_gated(request(tmp_path, "true", log_path=tmp_path / "not-a-dir" / "run.log"))
    assert caught.value.errno in (errno.EEXIST, errno.ENOTDIR)
    assert open_fds() == fds_before
    assert supervisor.running() == []


EMFILE_SCRIPT = textwrap.dedent(
    """
    import errno, os, resource, sys, uuid
    from pathlib import Path
    import psutil
    from cronctl.proc.spawn import RunRequest, SpawnError
    from cronctl.proc.supervisor import Supervisor

    sup = Supervisor(on_result=print)
    sup.start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)

    def limit_leaving(free):
        # The lowest limit under which exactly `free` fd numbers are unused.
        # fstat probes, because listing /proc/self/fd would itself hold an fd.
        n, left = 0, free
        while True:
            try:
                os.fstat(n)
            except OSError:
                if left == 0:
                    return n
                left -= 1
            n += 1

    # 0: the log cannot be opened; 1, 2: the gate pipe cannot; 3, 4: the output pipe
    # cannot, after the gate pipe was made (that one must be closed again).
    for free in (0, 1, 2, 3, 4):
        run_id = uuid.uuid4().hex
        req = RunRequest(run_id=run_id, job="j", command="echo never", cwd=None,
                         env={"CRONCTL_RUN_ID": run_id}, timeout=0, kill_grace=1,
                         log_path=Path(sys.argv[1]) / f"{run_id}.log")
        fds_before = sorted(os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit_leaving(free), hard))
        try:
            sup.spawn_gated(req)
            outcome = "spawned"
        except SpawnError as exc:
            outcome = errno.errorcode[exc.errno]
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert sorted(os.listdir("/proc/self/fd")) == fds_before, free
        assert sup.running() == [] and psutil.Process().children() == [], free
        print(free, outcome)
    sup.shutdown(wait=10)
    """
)


def test_a_real_emfile_is_a_spawn_error_leaving_nothing_behind(tmp_path: Path) -> None:
    script = [sys.executable, "-c", EMFILE_SCRIPT, str(tmp_path)]
    out = subprocess.run(script, check=False, capture_output=True, text=True, timeout=50, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:5] == ["0 EMFILE", "1 EMFILE", "2 EMFILE", "3 EMFILE", "4 EMFILE"]


NPROC_SCRIPT = textwrap.dedent(
    """
    import errno, os, resource, sys, uuid
    from pathlib import Path
    import psutil
    from cronctl.proc.spawn import RunRequest, SpawnError
    from cronctl.proc.supervisor import Supervisor

    sup = Supervisor(on_result=print)
    sup.start()
    run_id = uuid.uuid4().hex
    req = RunRequest(run_id=run_id, job="j", command="echo never", cwd=None,
                     env={"CRONCTL_RUN_ID": run_id}, timeout=0, kill_grace=1,
                     log_path=Path(sys.argv[1]) / f"{run_id}.log")
    fds_before = sorted(os.listdir("/proc/self/fd"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    # This uid already runs two threads here, so no process can be added.
    resource.setrlimit(resource.RLIMIT_NPROC, (1, hard))
    try:
        sup.spawn_gated(req)
        print("spawned")
    except SpawnError as exc:
        print(errno.errorcode[exc.errno])
    resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
    assert sorted(os.listdir("/proc/self/fd")) == fds_before
    assert sup.running() == [] and psutil.Process().children() == []
    sup.shutdown(wait=10)
    """
)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to switch to an unused uid")
def test_a_real_eagain_from_rlimit_nproc_is_a_spawn_error() -> None:
    # RLIMIT_NPROC never binds uid 0, so the script runs as an unused uid; it
    # keeps CAP_DAC_READ_SEARCH only to read the interpreter and the checkout.
    logs = Path(tempfile.mkdtemp(prefix="cronctl-nproc-"))
    try:
        logs.chmod(0o777)
        uid = "54321"
        setpriv = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
        keep = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
        script = [*setpriv, *keep, sys.executable, "-c", NPROC_SCRIPT, str(logs)]
        out = subprocess.run(script, check=False, capture_output=True, text=True, timeout=50, cwd=REPO)
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    if "setpriv:" in out.stderr:
        pytest.skip(f"setpriv cannot switch users here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "EAGAIN"


# --- blocked config -------------------------------------------------------------------


def test_a_missing_cwd_is_blocked_config(supervisor: Supervisor, tmp_path: Path) -> None:
    commands: list[str | tuple[str, ...]] = ["true", ("true",)]
    for command in commands:
        with pytest.raises(BlockedConfig) as caught:
            supervisor.spawn_gated(request(tmp_path, command, cwd=str(tmp_path / "gone")))
        assert caught.value.field == "cwd" and "gone" in caught.value.message
    assert supervisor.running() == []


def test_a_cwd_that_is_a_file_is_blocked_config(supervisor: Supervisor, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(BlockedConfig) as caught:
        supervisor.spawn_gated(request(tmp_path, "true", cwd=str(tmp_path / "file")))
    assert caught.value.field == "cwd"


def test_a_missing_executable_is_blocked_config(supervisor: Supervisor, tmp_path: Path) -> None:
    fds_before = open_fds()
    with pytest.raises(BlockedConfig) as caught:
        supervisor.spawn_gated(request(tmp_path, ("no-such-program-cronctl", "--flag")))
    assert caught.value.field == "command" and "no-such-program-cronctl" in caught.value.message
    assert open_fds() == fds_before
    assert supervisor.running() == []


def test_a_path_to_a_missing_or_non_executable_file_is_blocked_config(supervisor: Supervisor, tmp_path: Path) -> None:
    (tmp_path / "script.sh").write_text("#!/bin/sh\necho hi\n")
    for program in ["./script.sh", str(tmp_path / "script.sh"), str(tmp_path / "missing")]:
        with pytest.raises(BlockedConfig):
            supervisor.spawn_gated(request(tmp_path, (program,), cwd=str(tmp_path)))


def test_the_executable_is_looked_up_in_the_jobs_path_relative_to_its_cwd(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "my-tool"
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    with pytest.raises(BlockedConfig):
        supervisor.spawn_gated(request(tmp_path, ("my-tool",)))
    req = request(tmp_path, ("my-tool",), env={"PATH": f"{bindir}:/usr/bin:/bin"})
    supervisor.spawn_gated(req)
    supervisor.open_gates([req.run_id])
    assert results.wait(req.run_id).output_tail == "tool ran\n"
    relative = request(tmp_path, ("bin/my-tool",), cwd=str(tmp_path))
    supervisor.spawn_gated(relative)
    supervisor.open_gates([relative.run_id])
    assert results.wait(relative.run_id).status == "success"


def test_a_string_command_naming_a_missing_program_runs_and_fails(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "no-such-program-cronctl")
    supervisor.spawn_gated(req)
    supervisor.open_gates([req.run_id])
    result = results.wait(req.run_id)
    assert (result.status, result.exit_code) == ("error", 127)


def test_an_empty_argv_is_blocked_config(supervisor: Supervisor, tmp_path: Path) -> None:
    with pytest.raises(BlockedConfig) as caught:
        supervisor.spawn_gated(request(tmp_path, ()))
    assert caught.value.field == "command"


def test_a_cwd_removed_after_the_check_ends_the_run_not_started(results: Results, tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    marker = tmp_path / "ran"

    def remove_then_spawn(*args: Any) -> int:
        workdir.rmdir()  # the directory vanishes between the check and the cd
        return spawn_session(*args)

    sup = Supervisor(on_result=results, spawn=remove_then_spawn)
    sup.start()
    try:
        req = request(tmp_path, f"touch '{marker}'", cwd=str(workdir))
        sup.spawn_gated(req)
        time.sleep(0.3)  # the gate shell fails its cd before anyone opens the gate
        sup.open_gates([req.run_id])
        result = results.wait(req.run_id)
        assert (result.status, result.reason) == ("not_started", "blocked_config")
        assert not marker.exists()
    finally:
        sup.shutdown(wait=10)


# --- stubborn jobs ---------------------------------------------------------------------


def test_a_descendant_holding_the_pipe_cannot_cause_a_false_timeout(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "sleep 30 & exit 0", timeout=0.5, drain_timeout=2.0)
    supervisor.spawn_gated(req)
    supervisor.open_gates([req.run_id])
    result = results.wait(req.run_id)
    assert (result.status, result.leftovers_killed) == ("success", 1)


def test_killing_a_job_that_ignores_sigterm_takes_its_grace_then_sigkill(
    supervisor: Supervisor, results: Results, tmp_path: Path
) -> None:
    req = request(tmp_path, "trap '' TERM; sleep 300", kill_grace=0.5)
    spawned = supervisor.spawn_gated(req)
    supervisor.open_gates([req.run_id])
    assert procs.is_alive(procs.ProcIdentity(spawned.pid, spawned.start_time))
    time.sleep(0.2)
    asked = time.monotonic()
    supervisor.kill(req.run_id, "killed")
    result = results.wait(req.run_id)
    took = time.monotonic() - asked
    # Observed: about 0.55 s from kill() to the result for a 0.5 s grace.
    assert 0.5 <= took < 3.0
    assert (result.status, result.reason, result.signal) == ("killed", "killed", 9)
    assert find_run_processes(req.run_id) == []


def test_a_slow_kill_does_not_delay_other_runs(supervisor: Supervisor, results: Results, tmp_path: Path) -> None:
    stubborn = request(tmp_path, "trap '' TERM; sleep 300", kill_grace=3.0)
    supervisor.spawn_gated(stubborn)
    supervisor.open_gates([stubborn.run_id])
    time.sleep(0.2)
    supervisor.kill(stubborn.run_id, "killed")
    quick = request(tmp_path, "echo quick")
    began = time.monotonic()
    supervisor.spawn_gated(quick)
    supervisor.open_gates([quick.run_id])
    assert results.wait(quick.run_id).status == "success"
    assert time.monotonic() - began < 2.0  # not after the other run's 3 s grace
    assert results.wait(stubborn.run_id).status == "killed"
