"""The job options `add` and `edit` share, as one object: `JobOptions` holds what the command
line gave (None: not given), whoever parsed it (typer through cli/job_commands.py, or the
fast path, cli/fastpath.py), and turns it into the YAML-shaped fields build_spec validates.

Framework-free, like cli/job_actions.py: the fast path imports it without typer.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from cronctl.errors import UsageError

# The job options of add and edit, in the order their problems are reported (`command`
# is the positional argument, not an option, and is reported in its place).
JOB_OPTIONS = ("cron", "every", "at", "timezone", "cwd", "env", "timeout", "kill_grace", "overlap", "catchup",
               "starting_deadline", "retries", "retry_delay", "repeat", "jitter", "grace", "on_failure", "paused",
               "command", "after", "requires",
               "user", "env_file", "limits", "keep_runs", "keep_log",  # these five: SPEC §13
               "alert_after", "notify", "notify_on")


@dataclass(frozen=True)
class JobOptions:
    """What `add` or `edit` was given of the job options (cli/app.py's, by parameter name)."""

    cron: str | None = None
    every: str | None = None
    at: str | None = None
    timezone: str | None = None
    cwd: str | None = None
    env: list[str] | None = None
    timeout: str | None = None
    kill_grace: str | None = None
    overlap: str | None = None
    catchup: str | None = None
    starting_deadline: str | None = None
    retries: int | None = None
    retry_delay: str | None = None
    repeat: int | None = None
    jitter: str | None = None
    grace: str | None = None
    on_failure: str | None = None
    paused: bool | None = None
    after: list[str] | None = None
    requires: str | None = None
    user: str | None = None
    env_file: str | None = None
    limits: list[str] | None = None
    keep_runs: int | None = None
    keep_log: str | None = None
    alert_after: int | None = None
    notify: list[str] | None = None
    notify_on: str | None = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in fields(cls))

    @classmethod
    def gather(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Parsed values by parameter name, with the job options folded into `options`."""
        names = cls.names()
        rest = {name: value for name, value in values.items() if name not in names}
        return {**rest, "options": cls(**{name: value for name, value in values.items() if name in names})}

    def fields(self, command: str | list[str] | None) -> dict[str, Any]:
        """The YAML-shaped fields build_spec validates: what was given, in JOB_OPTIONS order."""
        given = {**{name: getattr(self, name) for name in self.names()}, "command": command}
        options: dict[str, Any] = {}
        for key in JOB_OPTIONS:
            value = given[key]
            if value is None or value == [] or value == ():
                continue
            if key == "env":
                options["env"] = _parse_env_pairs(value)
            elif key == "limits":
                options["limits"] = _parse_limit_pairs(value)
            elif key in ("notify", "notify_on"):
                continue  # one field of the two options, below
            else:
                options[key] = list(value) if isinstance(value, tuple) else value
        from cronctl.cli.notifyopts import notify_field

        notify = notify_field(self.notify, self.notify_on)
        if notify is not None:
            options["notify"] = notify
        return options


def _parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[key] = value
    return env


def _parse_limit_pairs(pairs: list[str]) -> dict[str, str | int]:
    """`--limit nofile=16` as the YAML `limits: {nofile: 16}` (numbers as numbers)."""
    limits: dict[str, str | int] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--limit expects NAME=VALUE (nice, memory, cpu, nofile, nproc), got {pair!r}")
        text = value.strip()
        limits[key.strip()] = int(text) if text.lstrip("-").isdigit() else text
    return limits
