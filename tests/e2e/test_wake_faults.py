"""A wait with no end (issue 26, item 11): whatever fails after a child was spawned, the
child is ended or released and every wait is bounded."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.engine import Engine, build_engine, run_one
from cronctl.ops import definitions as ops
from cronctl.proc.find import find_run_processes
from cronctl.proc.spawn import RunRequest
from cronctl.proc.supervisor import Supervisor
from cronctl.store.claims import Owner
from tests.conftest import cronctl_bin, subprocess_env

pytestmark = pytest.mark.slow
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def test_a_lost_wake_up_delays_the_supervisor_thread_by_a_bounded_moment(tmp_path: Path) -> None:
    results: list[object] = []
    supervisor = Supervisor(on_result=results.append)
    supervisor.start()
    shared = supervisor._shared  # noqa: SLF001 - the fault is in its wake pipe
    real_wake = shared._wake_w  # noqa: SLF001
    full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC
    shared._wake_w = full  # noqa: SLF001
    try:
        request = RunRequest(run_id="r1", job="j", command=("true",), cwd=None, env={}, timeout=30.0,
                             kill_grace=1.0, log_path=tmp_path / "r1.log", log_cap=1 << 20, drain_timeout=5.0)
        supervisor.spawn_gated(request)  # the wake-up after the spawn fails: not the spawn
        supervisor.open_gates(["r1"])
        assert supervisor.wait_idle(30.0), "the run's result never came"
        assert shared.wakes_lost >= 1
    finally:
        shared._wake_w = real_wake  # noqa: SLF001
        os.close(full)
        supervisor.shutdown(wait=20)
    assert len(results) == 1


@pytest.fixture
def engine(home: Path) -> Iterator[Engine]:
    ctx = Context.open(home, clock=FakeClock(T0))
    engine = build_engine(ctx, Owner("cli-test", os.getpid(), 1.0, "boot"))
    engine.supervisor.start()
    yield engine
    engine.supervisor.shutdown("shutdown", wait=20)


def test_a_failure_after_the_spawn_closes_the_childs_gate(engine: Engine, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    ops.add_job(engine.ctx, ops.spec_from_options("j", {"every": "1h", "command": f"touch {marker}"}))
    spawned: list[str] = []
    real = Supervisor.spawn_gated

    def spawn_then_fail(self: Supervisor, req: RunRequest, wake: bool = True,  # type: ignore[no-untyped-def]
                        warm: bool = False):
        real(self, req, wake, warm)
        spawned.append(req.run_id)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Supervisor, "spawn_gated", spawn_then_fail)
    ran = run_one(engine, "j")
    assert ran is not None
    from cronctl.ops.runs import run_history

    assert [r["status"] for r in run_history(engine.ctx, "j", 5)] == ["not_started"]
    assert engine.supervisor.wait_idle(30.0), "the gated child was left alive"
    assert spawned and find_run_processes(spawned[0]) == []
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed (.ci/run installs it)")
def test_force_run_returns_when_the_wake_up_write_fails(home: Path, tmp_path: Path) -> None:
    env = subprocess_env(home)
    marker = tmp_path / "ran"
    assert subprocess.run([*cronctl_bin(), "add", "j", "--every", "1h", "--", f"sleep 1; touch {marker}"],
                          env=env, capture_output=True, timeout=60).returncode == 0
    started = time.monotonic()
    done = subprocess.run(["strace", "-f", "-o", os.devnull, "-e", "trace=write",
                           "-e", "inject=write:error=ENOSPC:when=4", *cronctl_bin(), "force-run", "j"],
                          env=env, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 60
    assert "Traceback" not in done.stderr
    runs = subprocess.run([*cronctl_bin(), "history", "j", "--json"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert "success" in runs.stdout and marker.exists(), runs.stdout
