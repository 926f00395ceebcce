"""`force-run` of chains (SPEC §10): a root starts a chain (`--alone`: by itself), the chain's
id is the root run's id and every run is told it, `--chain --wait` waits for the chain and
exits with the first failed node's status, and with no loop the chain runs in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.helpers.loophelp import audit_rows, cli, start_loop, stop, wait_ticking
from tests.cli.test_json_schemas import check

pytestmark = pytest.mark.slow


def chain_jobs(home: Path, out: Path, b_exit: int = 0) -> None:
    """a -> b -> c, and e after a whatever b does; each writes its chain id to out/NAME."""
    out.mkdir()

    def note(name: str) -> str:
        return f'echo "$CRONCTL_CHAIN_ID" >> {out / name}'

    jobs = out.parent / "jobs.yaml"
    jobs.write_text(f"""jobs:
  - {{name: a, every: 1h, command: '{note("a")}'}}
  - {{name: b, after: a, command: '{note("b")}; exit {b_exit}'}}
  - {{name: c, after: b, command: '{note("c")}'}}
  - {{name: e, after: a, requires: done, command: '{note("e")}'}}
""")
    assert cli(home, "apply", "-f", str(jobs)).returncode == 0


def ids(out: Path, name: str) -> list[str]:
    return (out / name).read_text().splitlines() if (out / name).exists() else []


def test_force_run_of_a_root_runs_its_chain_here_and_exits_with_the_first_failure(home: Path,
                                                                                     tmp_path: Path) -> None:
    out = tmp_path / "out"
    chain_jobs(home, out, b_exit=4)
    done = cli(home, "force-run", "a", "--wait")
    assert done.returncode == 4, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines[:4]] == [["a", "success"], ["b", "error"], ["c", "skipped"],
                                                        ["e", "success"]], done.stdout
    assert "(upstream_failed: b)" in lines[2] and " failed (ended " in lines[-1]
    (root,) = [r for r in audit_rows(home, "run.finished", "a")]
    chain = root["run_id"]
    assert lines[-1].startswith(f"chain {chain}:"), "the chain's id is the root run's id"
    assert ids(out, "a") == ids(out, "b") == ids(out, "e") == [chain], "every run of the chain is told it"
    assert ids(out, "c") == []
    check("history", json.loads(cli(home, "history", "c", "--json").stdout))  # a skipped run, as documented


def test_alone_runs_the_root_by_itself_and_contradicts_chain(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    chain_jobs(home, out)
    done = cli(home, "force-run", "a", "--alone", "--wait")
    assert done.returncode == 0 and done.stdout.startswith("a run "), done.stdout
    assert ids(out, "a") == [""] and ids(out, "b") == [] and audit_rows(home, "chain.started") == []
    both = cli(home, "force-run", "a", "--alone", "--chain")
    assert both.returncode == 2 and "--alone" in both.stderr


def test_chain_wait_through_the_loop_prints_each_node_and_exits_0_when_all_succeed(home: Path,
                                                                                 tmp_path: Path) -> None:
    out = tmp_path / "out"
    chain_jobs(home, out)
    loop = start_loop(home)
    try:
        wait_ticking(home, loop)
        done = cli(home, "force-run", "b", "--chain", "--wait", "--json", timeout=90)
        assert done.returncode == 0, done.stdout + done.stderr
        data = json.loads(done.stdout)
        assert data["via_loop"] is True and data["outcome"] == "success"
        assert data["run_id"] == data["chain"] and data["run"]["job"] == "b", "force-run's keys, for the first run"
        check("force-run", data)
        check("history", json.loads(cli(home, "history", "--chain", data["chain"], "--json").stdout))
        assert [(n["job"], n["status"]) for n in data["nodes"]] == [("b", "success"), ("c", "success")]
        assert ids(out, "b") == ids(out, "c") == [data["chain"]] and ids(out, "a") == []
        (b_run,) = audit_rows(home, "run.finished", "b")
        assert b_run["run_id"] == data["chain"]
    finally:
        assert stop(loop) == 0
