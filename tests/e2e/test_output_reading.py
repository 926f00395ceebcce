"""Reading run output (SPEC §13): logs -n/--since/--until/--run, logs --all -f, history
--since/--status, and `run --echo-output` with its bounds, against real runs."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import cronctl_bin, subprocess_env
from tests.helpers.loophelp import stop, wait_until

from cronctl.proc import echo as echo_mod
from cronctl.proc.echo import EchoSink


def _cronctl(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cronctl_bin(), *args], env=subprocess_env(home), capture_output=True, text=True,
                          timeout=90)


def _apply(home: Path, tmp_path: Path, body: str) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n" + body)
    done = _cronctl(home, "apply", "-f", str(jobs))
    assert done.returncode == 0, done.stderr


class _Lines:
    """A child's stdout read on a thread: each line with the monotonic time it arrived."""

    def __init__(self, stream: io.BufferedReader) -> None:
        self.lines: list[tuple[float, bytes]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: io.BufferedReader) -> None:
        for line in stream:
            with self._lock:
                self.lines.append((time.monotonic(), line))

    def matching(self, pattern: bytes) -> list[tuple[float, bytes]]:
        with self._lock:
            return [(when, line) for when, line in self.lines if pattern in line]


def _popen(home: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*cronctl_bin(), *args], env=subprocess_env(home), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


# --- logs of one job -----------------------------------------------------------------


@pytest.mark.slow
def test_logs_lines_window_and_run_select_what_was_asked(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: counter\n    every: 1h\n    command: 'seq 1 50'\n"
                           "  - name: quiet\n    every: 1h\n    command: 'true'\n")
    for _ in range(2):
        assert _cronctl(home, "force-run", "counter", "--wait").returncode == 0
    first = json.loads(_cronctl(home, "history", "counter", "--json").stdout)["runs"][0]["run_id"]
    assert _cronctl(home, "logs", "counter", "-n", "3").stdout == "48\n49\n50\n"
    assert _cronctl(home, "logs", "counter", "--run", first, "-n", "1").stdout == "50\n"
    window = _cronctl(home, "logs", "counter", "--since", "1h").stdout
    assert window.count("==> run ") == 2 and window.count("\n50\n") == 2
    assert _cronctl(home, "logs", "counter", "--until", "2000-01-01T00:00:00Z").stdout == ""
    # Issue 26 item 3: a run with no output says so, with its id and where its output went.
    assert _cronctl(home, "force-run", "quiet", "--wait").returncode == 0
    quiet = _cronctl(home, "logs", "quiet")
    run_id = json.loads(_cronctl(home, "history", "quiet", "--json").stdout)["runs"][-1]["run_id"]
    assert quiet.returncode == 0 and quiet.stdout == ""
    assert f"run {run_id} of 'quiet' had no output" in quiet.stderr
    assert str(home / "runs" / "quiet" / f"{run_id}.log") in quiet.stderr


@pytest.mark.slow
def test_history_filters_by_time_and_status(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: good\n    every: 1h\n    command: 'true'\n"
                           "  - name: bad\n    every: 1h\n    command: 'exit 3'\n")
    _cronctl(home, "force-run", "good", "--wait")
    _cronctl(home, "force-run", "bad", "--wait")
    failed = json.loads(_cronctl(home, "history", "--status", "failed", "--json").stdout)["runs"]
    assert [(r["job"], r["status"]) for r in failed] == [("bad", "error")]
    recent = json.loads(_cronctl(home, "history", "--since", "10m", "--json").stdout)["runs"]
    assert {r["job"] for r in recent} == {"good", "bad"}
    assert json.loads(_cronctl(home, "history", "--since", "2999-01-01T00:00:00Z", "--json").stdout)["runs"] == []
    wrong = _cronctl(home, "history", "--status", "broken")
    assert wrong.returncode == 1 and "not a run status" in wrong.stderr


# --- following every job -------------------------------------------------------------


@pytest.mark.slow
def test_logs_all_follow_prints_each_new_line_with_its_job_and_run(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: ticker\n    every: 1s\n    command: 'echo tick'\n"
                           "  - name: other\n    every: 1s\n    command: 'printf \"two\\\\nlines\\\\n\"'\n")
    loop = subprocess.Popen([*cronctl_bin(), "run"], env=subprocess_env(home), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    follower = _popen(home, "logs", "--all", "-f")
    try:
        assert follower.stdout is not None
        seen = _Lines(follower.stdout)  # type: ignore[arg-type]
        wait_until(lambda: len(seen.matching(b"ticker ")) >= 2 and seen.matching(b"| lines"), 40)
        line = seen.matching(b"ticker ")[0][1].decode()
        assert re.fullmatch(r"ticker \d{8}T\d{6}-[0-9a-f]+ \| tick\n", line), line
        run_of_two = seen.matching(b"| two")[0][1].split(b" | ")[0]
        assert any(text.startswith(run_of_two) for _, text in seen.matching(b"| lines"))
    finally:
        os.killpg(follower.pid, signal.SIGINT)
        follower.wait(timeout=10)
        stop(loop)


# --- run --echo-output -----------------------------------------------------------------


class _SlowOut(io.RawIOBase):
    """A stdout that takes 20 ms per write, as a busy log collector might."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.writes: list[tuple[float, bytes]] = []

    def writable(self) -> bool:
        return True

    def write(self, chunk: bytes) -> int:  # type: ignore[override]
        time.sleep(0.02)
        self.data += chunk
        self.writes.append((time.monotonic(), bytes(chunk)))
        return len(chunk)


@pytest.mark.slow  # its stdout sleeps 20 ms per write
def test_a_flood_never_blocks_the_feeder_nor_delays_another_runs_line() -> None:
    out = _SlowOut()
    sink = EchoSink(out)  # type: ignore[arg-type]
    chunk = b"y" * 99 + b"\n"
    flood = chunk * 655  # 64 KiB of 100-byte lines, as the supervisor reads them
    began = time.monotonic()
    for _ in range(160):  # 10 MiB
        sink.feed("flood", "r1", flood)
    fed = time.monotonic() - began
    sent = time.monotonic()
    sink.feed("quiet", "r2", b"hello\n")
    wait_until(lambda: b"quiet r2 | hello\n" in out.data, 5)
    arrived = next(when for when, data in out.writes if b"quiet r2 | hello" in data)
    sink.end("r1")
    sink.end("r2")
    wait_until(lambda: b"not echoed in all" in out.data, 10)
    sink.close()
    assert fed < 2.0, f"feeding 10 MiB took {fed:.2f}s: the feeder waited for stdout"
    assert arrived - sent < 1.0  # behind at most one turn of the flood (20 ms per write here)
    echoed = out.data.count(b"flood r1 | " + b"y" * 99 + b"\n")
    report = re.search(rb"flood r1 \| \[cronctl\] (\d+) line\(s\) \((\d+) bytes\) of this run not echoed in all",
                       bytes(out.data))
    assert report is not None
    assert echoed + int(report.group(1)) == 160 * 655  # every line echoed or counted as dropped
    assert sink.dropped_lines == int(report.group(1))


def test_a_partial_last_line_is_echoed_when_the_run_ends() -> None:
    out = io.BytesIO()
    sink = EchoSink(out)
    sink.feed("job", "r", b"one\ntw")
    sink.feed("job", "r", b"o")
    sink.end("r")
    wait_until(lambda: out.getvalue().count(b"\n") == 2, 5)
    sink.close()
    assert out.getvalue() == b"job r | one\njob r | two\n"
    assert echo_mod.RUN_BUDGET > echo_mod.TURN_BYTES


@pytest.mark.slow
def test_echo_output_keeps_a_quiet_jobs_lines_flowing_beside_a_100_mib_flood(home: Path, tmp_path: Path) -> None:
    _apply(home, tmp_path, "  - name: flood\n    every: 1h\n"
                           "    command: 'head -c 104857600 /dev/zero | tr \"\\\\0\" y | fold -w 99'\n"
                           "  - name: ticker\n    every: 1s\n    command: 'echo tick'\n")
    loop = _popen(home, "run", "--echo-output")
    try:
        assert loop.stdout is not None
        seen = _Lines(loop.stdout)  # type: ignore[arg-type]
        wait_until(lambda: seen.matching(b"ticker "), 30)
        assert _cronctl(home, "force-run", "flood").returncode == 0
        wait_until(lambda: len(seen.matching(b"flood ")) > 1000, 30)
        flood_began = time.monotonic()
        # While the flood runs, the ticker's line of every second still comes through.
        wait_until(lambda: len([w for w, _ in seen.matching(b"ticker ") if w > flood_began]) >= 5, 40)
        ticks = [when for when, _ in seen.matching(b"ticker ")]
        gaps = [later - earlier for earlier, later in zip(ticks, ticks[1:], strict=False) if earlier > flood_began]
        assert max(gaps) < 5.0, gaps  # generous: one a second is what the job prints
        wait_until(lambda: _cronctl(home, "history", "flood", "--json").stdout.count('"status": "success"'), 90)
        wait_until(lambda: seen.matching(b"flood ") and (
            seen.matching(b"not echoed in all") or len(seen.matching(b"flood ")) >= 1_059_073 - 5), 30)
    finally:
        stop(loop)
    total_lines = 104857600 // 99 + 1  # fold -w 99 of one line of 100 MiB
    echoed = len([line for _, line in seen.matching(b"flood ") if b"[cronctl]" not in line])
    report = seen.matching(b"not echoed in all")
    dropped = int(re.search(rb"\] (\d+) line", report[0][1]).group(1)) if report else 0  # type: ignore[union-attr]
    assert echoed + dropped == total_lines


def test_the_follower_shows_only_new_output_and_holds_a_partial_line(tmp_path: Path) -> None:
    from cronctl.ops.logread import LogFollower

    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    old = runs / "a" / "20261203T000000-aaaa.log"
    old.write_bytes(b"before the follower\n")
    follower = LogFollower(runs)
    assert follower.poll() == []  # what was there before is not new
    with old.open("ab") as handle:
        handle.write(b"new line\npart")
    (runs / "b").mkdir()
    (runs / "b" / "20261203T000001-bbbb.log").write_bytes(b"first\n")
    (runs / "b" / "20261203T000001-bbbb.on_failure.log").write_bytes(b"a hook's\n")
    got = follower.poll()
    assert sorted(got) == [("a", "20261203T000000-aaaa", b"new line\n"), ("b", "20261203T000001-bbbb", b"first\n")]
    with old.open("ab") as handle:
        handle.write(b"ial")
    assert follower.poll() == []  # the line is not over yet
    quiet = [follower.poll() for _ in range(3)]
    assert [("a", "20261203T000000-aaaa", b"partial\n")] in quiet  # printed once the log stays quiet
