"""Loops on a PostgreSQL store playing several hosts on this machine (SPEC §9: $CRONCTL_HOST_ID
and $CRONCTL_BOOT_ID), and what the tests read back from the database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg

CRONCTL = [sys.executable, "-m", "cronctl"]


def host_env(store_url: str, host: str, boot: str | None = None) -> dict[str, str]:
    env = {**os.environ, "CRONCTL_STORE": store_url, "CRONCTL_HOST_ID": host, "CRONCTL_BOOT_ID": boot or f"boot-{host}"}
    env.pop("CRONCTL_FAULT_LOOP_CRASH", None)
    return env


def start_host_loop(home: Path, store_url: str, host: str, *args: str, boot: str | None = None,
                    log: Path | None = None) -> subprocess.Popen[bytes]:
    """`cronctl run` on the store as `host`, its output to `log` (default: home/loop.log)."""
    home.mkdir(parents=True, exist_ok=True)
    out = open(log or home / "loop.log", "ab")  # noqa: SIM115 - the child keeps it
    return subprocess.Popen([*CRONCTL, "--home", str(home), "run", *args], env=host_env(store_url, host, boot),
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def seed(store_url: str, tmp: Path, yaml_text: str) -> None:
    """Define jobs on the store, as a user would: `apply -f` of a file."""
    jobs = tmp / "jobs.yaml"
    jobs.write_text(yaml_text)
    home = tmp / "seed-home"
    done = subprocess.run([*CRONCTL, "--home", str(home), "apply", "-f", str(jobs)], env=host_env(store_url, "seed"),
                          capture_output=True, text=True, timeout=60)
    if done.returncode != 0:  # until `apply` works on PostgreSQL: define in a JSON home, then import it
        env = {k: v for k, v in host_env(store_url, "seed").items() if k != "CRONCTL_STORE"}
        subprocess.run([*CRONCTL, "--home", str(home), "apply", "-f", str(jobs)], env=env, check=True,
                       capture_output=True, timeout=60)
        subprocess.run([*CRONCTL, "--store", store_url, "--home", str(home), "store", "import-json", "--replace"],
                       env=env, check=True, capture_output=True, timeout=60)


def rows(store_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(store_url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


def one(store_url: str, query: str, *params: Any) -> Any:
    found = rows(store_url, query, *params)
    return found[0][0] if found else None


def run_cli(home: Path, store_url: str, host: str, *args: str,
            timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """One `cronctl` command on the store, from `host`."""
    return subprocess.run([*CRONCTL, "--home", str(home), *args], env=host_env(store_url, host), capture_output=True,
                          text=True, timeout=timeout)
