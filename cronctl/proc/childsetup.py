"""What a job's run needs set up around its child (SPEC §13): its user, its env_file and
its limits, prepared by the loop before the spawn.

The loop resolves everything it can here, so that a run that cannot start as configured
ends `not_started` `blocked_config` with the reason before anything is spawned: a user
that does not exist, a loop that is not root, an env_file that is missing. What must
happen inside the child (limits, the user switch) is done by proc/become.py, which the
child runs before its gate and which then execs the gate shell (same pid, same start
time). A run without user and limits is spawned exactly as before.
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cronctl.models import JobSpec
from cronctl.proc.envfile import EnvFileError, read_env_file

BECOME_SCRIPT = str(Path(__file__).with_name("become.py"))
# The kernel's names for the limits of SPEC §13 (nice is a priority, not an rlimit).
RLIMIT_OF = {"memory": "AS", "cpu": "CPU", "nofile": "NOFILE", "nproc": "NPROC"}
# Reserved: the run's own variables are cronctl's, whatever a file says.
_RESERVED_PREFIX = "CRONCTL_"


class SetupBlocked(Exception):
    """The run cannot start as configured; `field` is the job field to fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class ChildSetup:
    """A job's user, env_file and limits, as the run request carries them."""

    user: str | None = None
    env_file: str | None = None
    limits: Mapping[str, int] = field(default_factory=dict)

    @property
    def needs_helper(self) -> bool:
        return self.user is not None or bool(self.limits)


def child_setup_of(spec: JobSpec) -> ChildSetup | None:
    """The setup a job's runs need; None for a job without user, env_file and limits."""
    if spec.user is None and spec.env_file is None and not spec.limits:
        return None
    return ChildSetup(spec.user, spec.env_file, dict(spec.limits))


@dataclass(frozen=True)
class Prepared:
    env: dict[str, str]  # the child's whole environment
    argv: list[str]  # what to spawn: the helper around the gate's argv, or the gate's argv


def prepare(setup: ChildSetup | None, base_env: Mapping[str, str], job_env: Mapping[str, str],
            gate_argv: list[str]) -> Prepared:
    """The child's environment (loop's < user's identity < env_file < the job's env) and argv."""
    if setup is None:
        return Prepared({**base_env, **job_env}, gate_argv)
    env = dict(base_env)
    items: list[str] = []
    if setup.user is not None:
        entry = _user_entry(setup.user)
        env.update(identity_env(entry))
        items += _switch_items(entry)
    if setup.env_file is not None:
        env.update(env_file_values(setup.env_file))
    env.update(job_env)
    items = _limit_items(setup.limits) + items
    if not setup.needs_helper or not items:
        return Prepared(env, gate_argv)
    return Prepared(env, [sys.executable, "-I", "-S", BECOME_SCRIPT, ",".join(items), "--", *gate_argv])


def env_file_values(path: str) -> dict[str, str]:
    try:
        values = read_env_file(os.path.expanduser(path))
    except EnvFileError as exc:
        raise SetupBlocked("env_file", str(exc)) from None
    return {key: value for key, value in values.items() if not key.startswith(_RESERVED_PREFIX)}


def _user_entry(user: str) -> pwd.struct_passwd:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise SetupBlocked("user", f"user {user!r} does not exist on this host") from None
    euid = os.geteuid()
    if euid != 0 and entry.pw_uid != euid:
        me = _name_of(euid)
        raise SetupBlocked("user", f"cannot run as user {user!r}: the loop runs as {me} (uid {euid}), not root; "
                                   "run the loop as root, or remove 'user' from the job")
    return entry


def identity_env(entry: pwd.struct_passwd) -> dict[str, str]:
    """As cron sets them for a crontab's owner: HOME, LOGNAME (and USER) from the user
    database; SHELL is /bin/sh, the shell that runs the job's command line."""
    return {"HOME": entry.pw_dir or "/", "USER": entry.pw_name, "LOGNAME": entry.pw_name, "SHELL": "/bin/sh"}


def _switch_items(entry: pwd.struct_passwd) -> list[str]:
    if entry.pw_uid == os.geteuid() and entry.pw_gid == os.getegid():
        return []  # already that user: nothing to switch
    groups = os.getgrouplist(entry.pw_name, entry.pw_gid)
    return [f"groups={':'.join(str(g) for g in groups)}", f"gid={entry.pw_gid}", f"uid={entry.pw_uid}"]


def _limit_items(limits: Mapping[str, int]) -> list[str]:
    items: list[str] = []
    nice = limits.get("nice")
    if nice is not None:
        if nice < os.getpriority(os.PRIO_PROCESS, 0) and os.geteuid() != 0:
            raise SetupBlocked("limits", f"nice {nice} is below the loop's own priority, which only root may set")
        items.append(f"nice={nice}")
    for name, kernel_name in RLIMIT_OF.items():
        value = limits.get(name)
        if value is None:
            continue
        # CPU: the soft limit sends SIGXCPU (which a run's result names); the hard one, a
        # second later, SIGKILL for a job that ignores it.
        hard = value + 1 if name == "cpu" else value
        items.append(f"{kernel_name}={value}:{hard}")
    return items


def _name_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"
