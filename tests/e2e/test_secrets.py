"""Secrets stay with cronctl (SPEC §9) on the JSON store: libpq's variables of the loop's
environment reach no job, hook or chain node, nor any output, log or audit row."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from cronctl.proc.childenv import inherited_env, is_withheld
from tests.conftest import cronctl_bin, subprocess_env
from tests.helpers.loophelp import wait_until
from tests.helpers.secrethelp import PASSWORD, PLANTED, files_with, texts_with

JOBS = """
jobs:
  - name: root
    every: 1s
    env: {PGHOST: job-own-host}
    command: "env; exit 3"
    on_failure: "env"
  - name: node
    after: [root]
    requires: done
    command: "env"
"""


def test_what_opens_the_store_is_withheld_and_the_rest_inherited() -> None:
    environ = {"CRONCTL_STORE": "postgresql://u:pw@h/d", "PGPASSWORD": "pw", "PGSSLFUTURE": "x",
               "PGTZ": "UTC", "PATH": "/bin", "CRONCTL_HOME": "/h"}
    assert inherited_env(environ) == {"PGTZ": "UTC", "PATH": "/bin", "CRONCTL_HOME": "/h"}
    assert all(is_withheld(name) for name in ("PGHOST", "PGSERVICEFILE", "PGOAUTHISSUER", "PGGSSLIB"))


@pytest.mark.slow
def test_no_job_hook_or_chain_node_sees_the_password_and_nothing_shows_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**subprocess_env(home), **PLANTED}
    env.pop("CRONCTL_STORE", None)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(JOBS)
    outputs: list[tuple[str, str]] = []

    def cli(*args: str) -> str:
        done = subprocess.run([*cronctl_bin(), *args], env=env, capture_output=True, text=True, timeout=60)
        outputs.append((" ".join(args), done.stdout + done.stderr))
        return done.stdout

    cli("apply", "-f", str(jobs))
    loop = subprocess.Popen([*cronctl_bin(), "run"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        logs = home / "runs"
        wait_until(lambda: len(list(logs.glob("root/*.on_failure.log"))) >= 1
                   and any(p.stat().st_size for p in logs.glob("node/*.log")), 60, 0.2)
    finally:
        loop.send_signal(signal.SIGTERM)
        out, _ = loop.communicate(timeout=60)
    outputs.append(("run", out.decode(errors="replace")))
    for args in (["status"], ["status", "--json"], ["history"], ["history", "--json"], ["logs", "root"],
                 ["logs", "node"], ["audit", "-n", "1000"], ["show", "root"], ["list", "--json"], ["doctor"]):
        cli(*args)

    child_envs = [path.read_text() for path in logs.rglob("*.log")]
    assert any("CRONCTL_FENCE=" in text or "CRONCTL_RUN_ID=" in text for text in child_envs)
    root_logs = [text for path in logs.glob("root/*.log") if ".on_failure" not in path.name
                 for text in [path.read_text()] if text]
    assert root_logs and all("PGHOST=job-own-host" in text for text in root_logs)  # the job's own env: kept
    for text in child_envs:
        assert not [name for name in PLANTED if f"\n{name}=" in f"\n{text}"], text
    assert files_with(home) == []
    assert texts_with(outputs) == []
    assert os.environ.get("PGPASSWORD") != PASSWORD  # the test's own process was never the carrier
