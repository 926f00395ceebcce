"""The fast paths of issue 5 keep their guarantees: store bytes and caching, the shell gate, timed gates."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronctl.proc import identity as procs
from cronctl.paths import Paths, open_home
from cronctl.proc.run import RunResult
from cronctl.proc.spawn import RunRequest
from cronctl.proc.supervisor import Supervisor
from cronctl.store.jsonstore import Store, serialize


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return open_home(tmp_path / "home")


# --- the store -------------------------------------------------------------------------------


def test_the_store_has_one_job_per_line_and_reads_back_equal(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction() as doc:
        doc["jobs"]["b"] = {"x": [1, 2.5, None, True], "name": "b", "state": {"é": "ü\n"}}
        doc["jobs"]["a"] = {"name": "a"}
        doc["counters"]["k"] = 3
    raw = paths.store.read_bytes()
    lines = raw.decode().splitlines()
    assert lines[0] == "{" and lines[-1] == "}"
    assert [line for line in lines if line.startswith('  "')] == [
        '  "a": {"name": "a"},', '  "b": {"name": "b", "state": {"é": "ü\\n"}, "x": [1, 2.5, null, true]}']
    assert json.loads(raw) == store.read()
    assert raw == serialize(json.loads(raw))


def test_replacing_a_job_by_an_equal_copy_writes_nothing(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction() as doc:
        doc["jobs"]["a"] = {"name": "a", "state": {"next_run_at": "2026-01-01T00:00:00.000+00:00"}}
    before = paths.store.stat()
    with store.transaction() as doc:
        doc["jobs"]["a"] = json.loads(json.dumps(doc["jobs"]["a"]))  # equal, but other objects
    after = paths.store.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert store.read()["rev"] == 1


def test_a_store_changed_by_another_writer_is_never_read_from_the_cache(paths: Paths) -> None:
    mine, other = Store(paths), Store(paths)
    with mine.transaction() as doc:
        doc["jobs"]["a"] = {"v": 1}
    with other.transaction() as doc:
        doc["jobs"]["a"] = {"v": 2}
    with mine.transaction() as doc:
        assert doc["jobs"]["a"] == {"v": 2} and doc["rev"] == 2
        doc["jobs"]["a"]["v"] = 3
    assert other.read()["jobs"]["a"] == {"v": 3} and other.read()["rev"] == 3


def test_a_cached_document_is_a_copy_its_reader_may_change(paths: Paths) -> None:
    store = Store(paths)
    with store.transaction() as doc:
        doc["jobs"]["a"] = {"v": [1]}
    first = store.read()
    first["jobs"]["a"]["v"].append(2)
    assert store.read()["jobs"]["a"] == {"v": [1]}


# --- process identity without psutil ------------------------------------------------------------


def test_identify_agrees_with_psutil() -> None:
    for pid in (os.getpid(), os.getppid(), 1):
        ident = procs.identify(pid)
        assert ident is not None and ident.start_time == psutil.Process(pid).create_time()
    assert procs.identify(2**22 + 12345) is None


# --- the gate ----------------------------------------------------------------------------------


class Results:
    def __init__(self) -> None:
        self.by_id: dict[str, RunResult] = {}

    def __call__(self, result: RunResult) -> None:
        self.by_id[result.run_id] = result


@pytest.fixture
def supervisor_and_results():  # type: ignore[no-untyped-def]
    results = Results()
    sup = Supervisor(on_result=results)
    sup.start()
    yield sup, results
    sup.shutdown(wait=20)


def request(tmp_path: Path, command: str | tuple[str, ...], run_id: str = "r1") -> RunRequest:
    return RunRequest(run_id=run_id, job="j", command=command, cwd=None, env={"CRONCTL_RUN_ID": run_id},
                      timeout=30, kill_grace=1, log_path=tmp_path / f"{run_id}.log")


@pytest.mark.slow
def test_a_shell_command_run_by_the_gate_sees_what_sh_c_would(supervisor_and_results, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sup, results = supervisor_and_results
    req = request(tmp_path, 'echo "args=$# line=[$line]"; exit 7')
    sup.spawn_gated(req)
    sup.open_gates([req.run_id])
    assert sup.wait_idle(20)
    result = results.by_id[req.run_id]
    assert (result.status, result.exit_code) == ("error", 7)
    assert result.output_tail == "args=0 line=[]\n"


@pytest.mark.slow
def test_gates_opened_later_wait_for_their_instant_and_a_cancelled_one_never_runs(
        supervisor_and_results, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    sup, results = supervisor_and_results
    go, stay = request(tmp_path, "date +%s.%N", "go"), request(tmp_path, f"touch {tmp_path}/ran", "stay")
    for req in (go, stay):
        sup.spawn_gated(req)
    asked = time.time()
    sup.open_gates_after(["go", "stay"], 0.3)
    assert sup.gate_opened_at(["go", "stay"]) == {"go": None, "stay": None}
    assert sup.cancel_gate("stay") is True
    assert sup.wait_idle(20)
    assert float(results.by_id["go"].output_tail) >= asked + 0.3 - 0.005
    assert (results.by_id["stay"].status, results.by_id["stay"].reason) == ("not_started", "gate_cancelled")
    assert not (tmp_path / "ran").exists()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                    max_leaves=20))
def test_json_on_a_terminal_is_json_dumps_with_an_indent_byte_for_byte(data: Any) -> None:
    from cronctl.cli import render

    out = _Terminal()
    with contextlib.redirect_stdout(out):
        render.print_json(data)
    assert out.getvalue() == json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=False) + "\n"
