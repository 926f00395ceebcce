"""A big `apply -f` lowers its own CPU priority (cli/yield_cpu.py); a small one, `validate`
and the loop's `run -f` never do. The niceness itself is checked in a child process: a
lowered priority cannot be raised again by an unprivileged process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cronctl.cli import yield_cpu
from cronctl.errors import ConfigError


def jobs_text(count: int) -> str:
    return "jobs:\n" + "".join(f"  - name: job-{i}\n    cron: \"0 3 1 1 *\"\n    command: /bin/true {i}\n"
                               for i in range(count))


@pytest.fixture
def nice_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []

    def record(increment: int) -> int:
        calls.append(increment)
        return increment

    monkeypatch.setattr(yield_cpu.os, "nice", record)
    return calls


def test_a_big_apply_yields_and_applies_as_before(cli: Any, home: Path, tmp_path: Path,
                                                  nice_calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yield_cpu, "BIG_FILE_BYTES", 200)
    path = tmp_path / "jobs.yaml"
    path.write_text(jobs_text(5))
    result = cli("apply", "-f", str(path))
    assert result.code == 0, result.err
    assert nice_calls == [yield_cpu.NICENESS]
    assert cli("apply", "-f", str(path), "--dry-run").code == 0  # the parse is the same work: it yields too
    assert nice_calls == [yield_cpu.NICENESS] * 2


def test_a_small_apply_and_validate_keep_their_priority(cli: Any, home: Path, tmp_path: Path,
                                                        nice_calls: list[int]) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(jobs_text(5))
    assert cli("apply", "-f", str(path)).code == 0
    assert cli("validate", "-f", str(path)).code == 0
    assert nice_calls == []


def test_a_missing_file_is_reported_by_the_apply_not_by_the_yield(cli: Any, home: Path, tmp_path: Path,
                                                                  nice_calls: list[int]) -> None:
    result = cli("apply", "-f", str(tmp_path / "absent.yaml"))
    assert result.code == 1 and "absent.yaml" in result.err
    assert nice_calls == []


def test_the_loops_file_reload_never_yields(home: Path, tmp_path: Path, nice_calls: list[int],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`run -f` applies its watched file through ops.apply_file: that path must not lower the loop."""
    from cronctl.cli.session import open_context
    from cronctl.ops.definitions import apply_file

    monkeypatch.setattr(yield_cpu, "BIG_FILE_BYTES", 1)
    path = tmp_path / "jobs.yaml"
    path.write_text(jobs_text(3))
    apply_file(open_context(), str(path), watched=True)
    assert nice_calls == []


@pytest.mark.parametrize(("size", "lowered"), [(yield_cpu.BIG_FILE_BYTES, 10), (yield_cpu.BIG_FILE_BYTES - 1, 0)])
def test_the_process_priority_really_drops_for_a_big_file(tmp_path: Path, size: int, lowered: int) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_bytes(b"#" * size)
    code = ("import os, sys; from cronctl.cli.yield_cpu import yield_cpu_for; before = os.nice(0); "
            "did = yield_cpu_for(sys.argv[1]); print(did, os.nice(0) - before)")
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    expected_change = min(lowered, 19 - _current_niceness()) if lowered else 0
    assert done.stdout.split() == [str(bool(lowered)), str(expected_change)]


def _current_niceness() -> int:
    return os.nice(0)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_work_in_an_idle_thread_runs_under_sched_idle_and_the_caller_keeps_its_policy() -> None:
    before = os.sched_getscheduler(0)
    assert yield_cpu.in_idle_thread(lambda: os.sched_getscheduler(0)) == os.SCHED_IDLE
    assert os.sched_getscheduler(0) == before != os.SCHED_IDLE


def test_an_idle_threads_error_is_raised_to_the_caller() -> None:
    def broken() -> None:
        raise ConfigError(["jobs.yaml:3: job 'x': field 'every': bad"])

    with pytest.raises(ConfigError, match="field 'every'"):
        yield_cpu.in_idle_thread(broken)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_a_big_apply_parses_on_an_idle_thread_and_writes_on_its_own(cli: Any, home: Path, tmp_path: Path,
                                                                    nice_calls: list[int],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The write holds rows in a transaction: it keeps the process's priority (niced +10), never
    idle; the new jobs' entries are made before it, on the idle thread too (ops/apply_ahead.py)."""
    from cronctl.ops import apply_ahead, definitions

    policies: dict[str, int] = {}
    load, execute, make = definitions.check_spawnable, definitions._execute_apply, apply_ahead.new_entry

    def parse(*args: Any) -> Any:  # the last step of the parse
        policies["parse"] = os.sched_getscheduler(0)
        return load(*args)

    def write(*args: Any) -> Any:
        policies["write"] = os.sched_getscheduler(0)
        return execute(*args)

    def new_entry(*args: Any) -> Any:
        policies["new entry"] = os.sched_getscheduler(0)
        return make(*args)

    monkeypatch.setattr(definitions, "check_spawnable", parse)
    monkeypatch.setattr(definitions, "_execute_apply", write)
    monkeypatch.setattr(apply_ahead, "new_entry", new_entry)
    path = tmp_path / "jobs.yaml"
    path.write_text(jobs_text(5))
    monkeypatch.setattr(yield_cpu, "BIG_FILE_BYTES", 1 << 30)
    assert cli("apply", "-f", str(path)).code == 0
    assert policies == {"parse": os.SCHED_OTHER, "write": os.SCHED_OTHER,  # a small file: as it was
                        "new entry": os.SCHED_OTHER}
    monkeypatch.setattr(yield_cpu, "BIG_FILE_BYTES", 200)
    path.write_text(jobs_text(6))
    result = cli("apply", "-f", str(path))
    assert result.code == 0, result.err
    assert policies == {"parse": os.SCHED_IDLE, "write": os.SCHED_OTHER, "new entry": os.SCHED_IDLE}
    assert nice_calls == [yield_cpu.NICENESS]
