"""SPEC §13 on PostgreSQL: user, env_file, limits and keep_runs apply on the host that runs
the job; the env_file's values never reach the database; `logs --all -f` says it follows
this host's runs."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cronctl.store.pg.connect import connect, parse_store_url
from tests.conftest import cronctl_bin, subprocess_env


@pytest.mark.slow
def test_operator_fields_run_on_this_host_and_the_secret_stays_out_of_the_database(
        cli: Any, store_url: str, tmp_path: Path) -> None:
    env_file = tmp_path / "job.env"
    env_file.write_text("TOKEN='pg-s3cr3t'\n")
    user = "    user: nobody\n" if os.geteuid() == 0 else ""
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n  - name: op\n    every: 1h\n{user}    env_file: {env_file}\n"
                    "    limits: {nofile: 16}\n    keep_runs: 2\n    command: 'echo $TOKEN $(ulimit -n) $USER'\n"
                    "  - name: busy\n    every: 1h\n    limits: {cpu: 1s}\n    command: 'while :; do :; done'\n")
    assert cli("--store", store_url, "apply", "-f", str(jobs)).code == 0
    for _ in range(3):
        assert cli("--store", store_url, "force-run", "op", "--wait").code == 0
    out = cli("--store", store_url, "logs", "op").out
    assert out.startswith("pg-s3cr3t 16") and (not user or out.strip().endswith("nobody"))
    assert cli("--store", store_url, "force-run", "busy", "--wait").code != 0
    runs = cli("--store", store_url, "history", "busy", "--json").json()["runs"]
    assert runs[-1]["reason"] == "cpu_limit"
    with connect(parse_store_url(store_url)) as conn:
        dumped = conn.execute("SELECT string_agg(t::text, ' ') FROM cronctl_jobs t").fetchone()[0]
        audit_text = conn.execute("SELECT coalesce(string_agg(t::text, ' '), '') FROM cronctl_audit t").fetchone()[0]
    assert str(env_file) in dumped and "pg-s3cr3t" not in dumped + audit_text
    # (The runs' output tails hold what the job printed, its own choice: here it echoes the token.)
    home = Path(os.environ["CRONCTL_HOME"])
    assert len(list((home / "runs" / "op").glob("*.log"))) == 2  # keep_runs on this host's logs


@pytest.mark.slow
def test_logs_all_follow_on_postgres_says_it_follows_this_host(cli: Any, store_url: str, home: Path) -> None:
    assert cli("--store", store_url, "add", "tick", "--every", "1h", "--", "true").code == 0
    env = {**subprocess_env(home), "CRONCTL_STORE": store_url}
    follower = subprocess.Popen([*cronctl_bin(), "logs", "--all", "-f"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert follower.stderr is not None
        line = follower.stderr.readline().decode()
    finally:
        os.killpg(follower.pid, signal.SIGINT)
        follower.wait(timeout=10)
    assert "following the runs of this host" in line and "other hosts" in line
