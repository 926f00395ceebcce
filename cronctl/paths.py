"""Every path under the home directory, resolved in one place."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Mapping

from cronctl.errors import HomeError


@dataclass(frozen=True)
class Paths:
    home: Path

    @cached_property
    def store(self) -> Path:
        return self.home / "jobs.json"

    @cached_property
    def store_backup(self) -> Path:
        """The last good copy of the store, kept beside it."""
        return self.home / "jobs.json.bak"

    @cached_property
    def store_lock(self) -> Path:
        return self.home / "jobs.lock"

    @cached_property
    def scheduler_lock(self) -> Path:
        return self.home / "scheduler.lock"

    @cached_property
    def heartbeat(self) -> Path:
        return self.home / "scheduler.json"

    @cached_property
    def control_dir(self) -> Path:
        """Requests from CLI commands to the running loop (force-run, kill)."""
        return self.home / "control"

    @cached_property
    def audit(self) -> Path:
        return self.home / "audit.jsonl"

    @cached_property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    def job_runs_dir(self, job: str) -> Path:
        return self.runs_dir / job

    def run_log(self, job: str, run_id: str) -> Path:
        return self.job_runs_dir(job) / f"{run_id}.log"

    def history(self, job: str) -> Path:
        return self.job_runs_dir(job) / "history.jsonl"


def resolve_home(cli_home: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> Path:
    """--home, else $CRONCTL_HOME, else $XDG_STATE_HOME/cronctl, else ~/.local/state/cronctl."""
    env = os.environ if env is None else env
    if cli_home:
        return Path(cli_home).expanduser().absolute()
    if env.get("CRONCTL_HOME"):
        return Path(env["CRONCTL_HOME"]).expanduser().absolute()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser().absolute() / "cronctl"
    return Path("~/.local/state/cronctl").expanduser().absolute()


def open_home(home: Path, create: bool = True) -> Paths:
    """Create the home (0700) on first use and refuse one that others could tamper with."""
    if not home.exists():
        if not create:
            raise HomeError(f"cronctl home {home} does not exist")
        try:
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise HomeError(f"cannot create cronctl home {home}: {exc.strerror}") from exc
    check_home_safety(home)
    return Paths(home)


def check_home_safety(home: Path) -> None:
    try:
        info = home.stat()
    except OSError as exc:
        raise HomeError(f"cannot read cronctl home {home}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise HomeError(f"cronctl home {home} is not a directory")
    if info.st_uid != os.geteuid():
        raise HomeError(
            f"cronctl home {home} is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}); "
            f"use your own directory with --home or fix it with: chown {os.geteuid()} {home}"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise HomeError(
            f"cronctl home {home} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"fix it with: chmod 700 {home}"
        )
