"""Job chains through a real `cronctl run` (SPEC §10): a diamond, skips, retries, a kill -9."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cronctl.context import Context
from tests.helpers.loophelp import audit_rows, cli, start_loop, stop, wait_ticking, wait_until

pytestmark = pytest.mark.slow


def write_jobs(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return path


def note(out: Path, name: str) -> str:
    """A command that appends the job's chain and upstream runs to out/NAME."""
    return f'echo "$CRONCTL_CHAIN_ID $CRONCTL_UPSTREAM" >> {out / name}'


def finished(home: Path, job: str) -> list[dict[str, Any]]:
    return audit_rows(home, "run.finished", job)


def diamond_yaml(out: Path, b_command: str, b_fields: str = "") -> str:
    return f"""\
jobs:
  - {{name: a, every: 1s, repeat: 1, command: '{note(out, "a")}'}}
  - {{name: b, after: a, command: '{note(out, "b")}; {b_command}'{b_fields}}}
  - {{name: c, after: [a], command: '{note(out, "c")}'}}
  - {{name: d, after: [b, c], command: '{note(out, "d")}'}}
  - {{name: e, after: [b, c], requires: done, command: '{note(out, "e")}'}}
"""


def test_a_diamond_fires_d_once_after_b_and_c_with_the_chain_in_the_environment(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert cli(home, "apply", "-f", str(write_jobs(tmp_path, diamond_yaml(out, "true")))).returncode == 0
    loop = start_loop(home)
    try:
        wait_until(lambda: audit_rows(home, "chain.finished"), 60)
    finally:
        assert stop(loop) == 0
    (root,) = finished(home, "a")
    chain = root["run_id"]
    b_run, c_run = finished(home, "b")[0]["run_id"], finished(home, "c")[0]["run_id"]
    assert (out / "a").read_text() == f"{chain} \n", "the scheduled root is told the chain it starts"
    assert (out / "b").read_text() == f"{chain} {chain}\n"
    assert (out / "c").read_text() == f"{chain} {chain}\n"
    assert (out / "d").read_text() == f"{chain} {b_run},{c_run}\n", "d once, after both"
    assert audit_rows(home, "chain.finished")[0]["outcome"] == "success"
    history = cli(home, "history", "d", "--json")
    assert history.returncode == 0 and chain in history.stdout


def test_a_failing_b_skips_d_and_requires_done_runs_e_anyway(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert cli(home, "apply", "-f", str(write_jobs(tmp_path, diamond_yaml(out, "exit 3")))).returncode == 0
    loop = start_loop(home)
    try:
        wait_until(lambda: audit_rows(home, "chain.finished"), 60)
    finally:
        assert stop(loop) == 0
    assert [r["status"] for r in finished(home, "b")] == ["error"]
    skipped = audit_rows(home, "run.skipped", "d")
    assert len(skipped) == 1 and skipped[0]["reason"] == "upstream_failed" and skipped[0]["upstream"] == "b"
    assert not (out / "d").exists()
    assert len((out / "e").read_text().splitlines()) == 1
    assert audit_rows(home, "chain.finished")[0]["outcome"] == "failed"
    chain = finished(home, "a")[0]["run_id"]
    # The skip is a run of d: in its history, in the chain's, in status, show and metrics.
    (record,) = json.loads(cli(home, "history", "d", "--json").stdout)["runs"]
    assert (record["status"], record["reason"], record["upstream"], record["chain"]) == \
        ("skipped", "upstream_failed", "b", chain)
    assert record["run_id"] == skipped[0]["run_id"]
    assert "upstream_failed: b error" in cli(home, "history", "d").stdout
    listed = json.loads(cli(home, "history", "--chain", chain, "--json").stdout)
    assert [node["job"] for node in listed["nodes"]][:1] == ["a"] and listed["outcome"] == "failed"
    assert {run["job"]: run["status"] for run in listed["runs"]} == \
        {"a": "success", "b": "error", "c": "success", "d": "skipped", "e": "success"}
    text = cli(home, "history", "--chain", chain).stdout
    assert text.rstrip().splitlines()[-1].startswith(f"chain {chain}: failed"), text
    jobs = {job["name"]: job for job in json.loads(cli(home, "status", "--json").stdout)["jobs"]}
    assert jobs["d"]["last_status"] == "skipped" and jobs["d"]["state"] == "ok", jobs["d"]
    assert jobs["d"]["reason"] == f"skipped in chain {chain} (upstream b ended error)"
    shown = cli(home, "show", "a").stdout
    assert "d  [skipped: upstream b error]" in shown and f"last chain {chain}: failed" in shown, shown
    nodes = json.loads(cli(home, "show", "d", "--json").stdout)["chains"][0]["nodes"]
    assert nodes["d"]["status"] == "skipped" and nodes["d"]["upstream"] == "b"
    assert 'cronctl_runs_total{job="d",status="skipped"} 1.0' in cli(home, "metrics").stdout


def test_retries_of_b_delay_d_and_do_not_rerun_a(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    flaky = f"test -e {out / 'b.tried'} || {{ touch {out / 'b.tried'}; exit 1; }}"
    text = diamond_yaml(out, flaky, ", retries: 2, retry_delay: 1s")
    assert cli(home, "apply", "-f", str(write_jobs(tmp_path, text))).returncode == 0
    loop = start_loop(home)
    try:
        wait_until(lambda: audit_rows(home, "chain.finished"), 60)
    finally:
        assert stop(loop) == 0
    assert [(r["status"], r["attempt"]) for r in finished(home, "b")] == [("error", 1), ("success", 2)]
    assert len(finished(home, "a")) == 1
    (d_end,) = finished(home, "d")
    assert d_end["ts"] > finished(home, "b")[1]["ts"]
    chain = finished(home, "a")[0]["run_id"]
    assert (out / "b").read_text() == f"{chain} {chain}\n" * 2, "the retry runs in the same chain"


def test_kill_9_after_a_finishes_still_fires_b_and_c_exactly_once(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert cli(home, "apply", "-f", str(write_jobs(tmp_path, diamond_yaml(out, "true")))).returncode == 0
    crashing = start_loop(home, env={"CRONCTL_FAULT_LOOP_CRASH": "after_finish"})
    assert crashing.wait(timeout=60) == -9, "the seam killed the loop after a's finish write"
    [chain] = Context.open(home).store.read()["chains"].values()
    nodes = {name: node["status"] for name, node in chain["nodes"].items()}
    assert {name: nodes[name] for name in "abcd"} == {"a": "success", "b": "ready", "c": "ready", "d": "waiting"}, \
        "a's end and b's and c's triggers were in a's finish write"
    # Its rows wait in the store's outbox for the hop's claim write (the loop's finish defers
    # them and its directory fsync to it): the next loop delivers them, once.
    assert not audit_rows(home, "run.finished") and not audit_rows(home, "chain.triggered")
    assert not audit_rows(home, "run.claimed", "b") and not audit_rows(home, "run.claimed", "c")
    loop = start_loop(home)
    try:
        wait_ticking(home, loop)
        wait_until(lambda: audit_rows(home, "chain.finished"), 60)
    finally:
        assert stop(loop) == 0
    assert len(finished(home, "b")) == 1 and len(finished(home, "c")) == 1 and len(finished(home, "d")) == 1
    assert len((out / "b").read_text().splitlines()) == 1 and len((out / "c").read_text().splitlines()) == 1
    triggered = sorted(row["job"] for row in audit_rows(home, "chain.triggered") if row["after"] == ["a"])
    assert len(finished(home, "a")) == 1 and triggered == ["b", "c"], \
        "a's rows, left in the outbox by the crash, delivered once by the next loop"


def test_fifty_chains_back_to_back_with_overlap_skip_leave_no_duplicate(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    text = f"""\
jobs:
  - {{name: a, every: 200ms, repeat: 50, command: 'true'}}
  - {{name: b, after: a, command: '{note(out, "b")}; sleep 0.3'}}
  - {{name: d, after: b, command: '{note(out, "d")}'}}
"""
    assert cli(home, "apply", "-f", str(write_jobs(tmp_path, text))).returncode == 0
    loop = start_loop(home)
    try:
        wait_until(lambda: len(audit_rows(home, "chain.finished")) >= 50, 120, interval=0.2)
    finally:
        assert stop(loop) == 0
    for job in ("b", "d"):
        chains = [line.split()[0] for line in (out / job).read_text().splitlines()]
        assert len(chains) == len(set(chains)), f"{job} ran twice in one chain"
    assert len({row["chain"] for row in audit_rows(home, "chain.finished")}) == 50
    skipped = audit_rows(home, "run.skipped", "b")
    assert all(row["reason"] == "overlap" for row in skipped)


def test_the_operator_sees_waiting_the_graph_the_chain_history_and_metrics(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    gate = tmp_path / "open"
    slow_b = f"while [ ! -e {gate} ]; do sleep 0.05; done"
    assert cli(home, "apply", "-f", str(write_jobs(tmp_path, diamond_yaml(out, slow_b)))).returncode == 0
    loop = start_loop(home)
    try:
        wait_until(lambda: audit_rows(home, "run.started", "b") or audit_rows(home, "run.claimed", "b"), 60)
        status = cli(home, "status", "--json")
        states = {job["name"]: job["state"] for job in json.loads(status.stdout)["jobs"]}
        assert states["d"] == "waiting" and states["e"] == "waiting", status.stdout
        shown = cli(home, "show", "a")
        assert shown.returncode == 0
        assert "  a  [success]  every 1s\n  ├── b  [running]  after a\n" in shown.stdout, shown.stdout
        assert "chain:\n  last chain " in shown.stdout
        gate.touch()
        wait_until(lambda: audit_rows(home, "chain.finished"), 60)
        chain = finished(home, "a")[0]["run_id"]
        listed = cli(home, "history", "--chain", chain, "--json")
        jobs = [run["job"] for run in json.loads(listed.stdout)["runs"]]
        assert jobs[0] == "a" and sorted(jobs[1:3]) == ["b", "c"] and sorted(jobs[3:]) == ["d", "e"]
        forced = cli(home, "force-run", "c", "--chain", "--json")
        assert forced.returncode == 0, forced.stderr
        forced_id = json.loads(forced.stdout)["chain"]
        wait_until(lambda: len(audit_rows(home, "chain.finished")) == 2, 60)
        again = json.loads(cli(home, "history", "--chain", forced_id, "--json").stdout)["runs"]
        assert [run["job"] for run in again] in (["c", "d", "e"], ["c", "e", "d"]), "c alone, then what is after it"
        metrics = cli(home, "metrics").stdout
        assert 'cronctl_chains_total{outcome="success"} 2.0' in metrics
    finally:
        gate.touch()
        assert stop(loop) == 0
