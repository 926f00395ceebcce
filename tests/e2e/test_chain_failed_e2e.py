"""A failed chain is visible through a real `cronctl run` (SPEC §10, issue 22 item 5): b
ended by an operator's `cronctl kill`, and b whose child cannot be spawned (fork fails
with EAGAIN, injected into the loop's engine), each fail the chain; b reads
`failing`, `status --stale` exits 3, `history --chain` ends `failed`, metrics count it."""

from __future__ import annotations

import errno
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from tests.helpers.enginehelp import running_engine, tick_until
from tests.helpers.loophelp import audit_rows, cli, start_loop, stop, wait_ticking, wait_until

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.proc.spawn import spawn_session

pytestmark = pytest.mark.slow


def chain_yaml(tmp_path: Path, b_command: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(f"""\
jobs:
  - {{name: a, every: 1h, command: 'true'}}
  - {{name: b, after: a, command: '{b_command}'}}
  - {{name: d, after: b, command: 'true'}}
""")
    return path


def check_failed_by_b(home: Path, status_word: str) -> None:
    chain = audit_rows(home, "chain.finished")[0]["chain"]
    listed = json.loads(cli(home, "history", "--chain", chain, "--json").stdout)
    assert listed["outcome"] == "failed"
    assert [(node["job"], node["status"]) for node in listed["nodes"]] == \
        [("a", "success"), ("b", status_word), ("d", "skipped")]
    stale = cli(home, "status", "--stale", "--json")
    assert stale.returncode == 3, stale.stdout + stale.stderr
    (b,) = json.loads(stale.stdout)["jobs"]
    assert (b["name"], b["state"], b["last_status"]) == ("b", "failing", status_word)
    assert f"chain {chain} failed" in b["reason"]
    assert 'cronctl_job_state{job="b",state="failing"} 1.0' in cli(home, "metrics").stdout


def test_b_killed_by_an_operator_fails_its_chain_visibly(home: Path, tmp_path: Path) -> None:
    assert cli(home, "apply", "-f", str(chain_yaml(tmp_path, "sleep 60"))).returncode == 0
    loop = start_loop(home)
    try:
        wait_ticking(home, loop)
        assert cli(home, "force-run", "a").returncode == 0  # a root starts its chain
        wait_until(lambda: audit_rows(home, "run.started", "b"), 60)
        killed = cli(home, "kill", "b")
        assert killed.returncode == 0, killed.stderr
        wait_until(lambda: audit_rows(home, "chain.finished"), 60)
    finally:
        assert stop(loop) == 0
    check_failed_by_b(home, "killed")


def test_b_whose_child_cannot_be_spawned_fails_its_chain_once(home: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's own engine, with a spawn that fails for b (fork: EAGAIN) and works otherwise.
    No warm children (loop/warm_hops.py): b's hop would adopt one, spawned before b was known."""
    monkeypatch.setenv("CRONCTL_WARM_CHILDREN", "0")
    assert cli(home, "apply", "-f", str(chain_yaml(tmp_path, "true"))).returncode == 0
    clock = FakeClock(datetime.now(timezone.utc).replace(microsecond=0))
    ctx = Context.open(home, clock=clock)

    def spawn(path: str, argv: Any, env: Any, actions: Any) -> int:
        if dict(env).get("CRONCTL_JOB") == "b":
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        return spawn_session(path, argv, env, actions)

    with running_engine(ctx, spawn=spawn) as engine:
        ctx.leases.force_chain("a", clock.now())  # what `force-run a` records for the loop
        tick_until(engine, lambda: audit_rows(home, "chain.finished"), 60)
        for _ in range(3):  # a released node would be claimed (and refused) again here
            engine.tick()
    assert len(audit_rows(home, "run.spawn_failed", "b")) == 1, "refused once, not claimed again every tick"
    check_failed_by_b(home, "not_started")
