"""The README's first transcript happens: the demo of jobs.example.yaml, run as the README
says for about 30 s and stopped with Ctrl-C, shows the jobs and verbs the README shows."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import cronctl_bin, subprocess_env

REPO = Path(__file__).resolve().parents[2]
DECISION = re.compile(r"^\d\d:\d\d:\d\d (\S+)\s+(\w+)")


def first_transcript() -> list[str]:
    """The lines of the README's first transcript (the block after 'In the first 30 seconds')."""
    text = (REPO / "README.md").read_text()
    after = text[text.index("In the first 30 seconds"):]
    block = after[after.index("```\n") + 4:]
    return block[:block.index("```")].splitlines()


# disk-report runs at each :x0 and :x5 minute: it shows up in the first 30 s only when they
# straddle one, which is why the README's transcript leaves it out (and says when it fires).
ON_THE_WALL_CLOCK = {"disk-report"}


def decisions(lines: list[str]) -> set[tuple[str, str]]:
    return {(m.group(1), m.group(2)) for m in map(DECISION.match, lines)
            if m and m.group(1) not in ON_THE_WALL_CLOCK}


def test_the_transcript_shows_a_stop_and_the_jobs_of_the_first_30_seconds() -> None:
    shown = decisions(first_transcript())
    assert ("slow-sync", "started") in shown and ("slow-sync", "finished") in shown
    assert {job for job, _ in shown} == {"heartbeat", "countdown", "slow-sync"}


def _read_lines(stream: object, into: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.append(line.rstrip("\n"))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_demo_shows_what_the_readme_shows(tmp_path: Path) -> None:
    home = tmp_path / "demo-home"
    proc = subprocess.Popen([*cronctl_bin(), "--home", str(home), "run", "-f", str(REPO / "jobs.example.yaml")],
                            env=subprocess_env(home), cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    try:
        # About 30 s on an idle machine; a generous bound on a busy one. Ctrl-C as the
        # README says: once slow-sync has started.
        deadline = time.monotonic() + 150
        while not any(re.search(r"slow-sync\s+started", line) for line in lines):
            assert time.monotonic() < deadline, "\n".join(lines)
            assert proc.poll() is None, "\n".join(lines)
            time.sleep(0.2)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0, "\n".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    out = "\n".join(lines)
    assert "Traceback" not in out
    assert decisions(lines) == decisions(first_transcript()), out
    assert re.search(r"slow-sync\s+finished\s+killed in [\d.]+s — shutdown", out), out
    readme_last = first_transcript()[-1]
    assert lines[-1].startswith(readme_last), out
    assert "cancelled_before_slot" not in out and "run(s)" not in out, out
    # The README says what the time in a run id is: the claim, at or before the start.
    for clock, claimed in re.findall(r"^(\d\d:\d\d:\d\d) \S+\s+started\s+run \d{8}T(\d{6})-", out, re.M):
        assert claimed <= clock.replace(":", "") or clock < "00:01", (claimed, clock)


def test_the_readme_says_what_the_time_in_a_run_id_is() -> None:
    readme = (REPO / "README.md").read_text()
    assert "The time in a run id is when the loop *claimed* the run" in readme


def test_ctrl_c_says_once_what_it_did_and_no_skip_lines() -> None:
    from cronctl.cli.render import loop_line
    from cronctl.loop.scheduler import stopped_words

    held = {"event": "run.skipped", "job": "heartbeat", "ts": "2026-12-03T14:37:44Z", "slot": "2026-12-03T14:37:45Z",
            "reason": "cancelled_before_slot", "why": "shutdown"}
    assert loop_line(held) is None
    edited = loop_line({**held, "why": "edited"})
    assert edited is not None and "cancelled_before_slot" not in edited and "edited" in edited
    assert stopped_words(0, 0) == "cronctl: loop stopped; nothing was running"
    assert stopped_words(1, 0) == "cronctl: loop stopped; it ended the run still going"
    assert stopped_words(2, 1) == ("cronctl: loop stopped; it ended the 2 runs still going; "
                                   "1 run due in a moment was not started and keeps its slot")
    assert "run(s)" not in stopped_words(3, 2)
