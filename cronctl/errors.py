"""One exception hierarchy; cli.py maps each class to its exit code."""

from __future__ import annotations


class CronctlError(Exception):
    """A failure the user can act on; its message names the thing and the fix."""

    exit_code = 1


class UsageError(CronctlError):
    exit_code = 2


class ConfigError(CronctlError):
    """Bad job definitions: one message per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class DurationError(CronctlError):
    pass


class ScheduleError(CronctlError):
    pass


class HomeError(CronctlError):
    pass


class StoreError(CronctlError):
    pass


class StoreCorruptError(StoreError):
    """The store does not parse; it is never overwritten."""


class StoreWriteError(StoreError):
    """A write or fsync failed; the old store is still in place."""


class LockTimeoutError(StoreError):
    pass


class JobNotFoundError(CronctlError):
    pass


def no_job_named(*names: str) -> JobNotFoundError:
    """The one error for jobs that are not defined, whatever the command and the store:
    `no job named 'a' (see 'cronctl list')` (several: `'a', 'b'`)."""
    return JobNotFoundError(f"no job named {', '.join(repr(str(name)) for name in names)} (see 'cronctl list')")


class ConflictError(CronctlError):
    """The action would break a guarantee (e.g. removing a running job)."""


class SchedulerRunningError(CronctlError):
    pass
