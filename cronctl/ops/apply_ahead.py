"""What a big `apply -f` makes before its write's transaction opens (issue 21).

The write holds the rows it locked until it commits, and the loops on the host wait for a
core while it works: so everything CPU-heavy a new job needs is made first, where the caller
says (`Runner`: the `apply` command runs it on an idle thread, cli/yield_cpu.in_idle_thread):
each new job's entry (its first slot worked out at the apply's `now`), its `job.added` audit
row, and whatever the store encodes of both ahead (`Definitions.prepare`: PostgreSQL's COPY
lines). The transaction then plans as always and takes these very objects for the jobs it
creates; a job another writer added meanwhile is simply planned as an update, and a prepared
entry nobody takes is dropped.

Which jobs are new is read first (`Definitions.names`, outside any transaction), so a file
that mostly changes stored jobs prepares only its new ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from cronctl.context import Context
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import AuditEvent, JobSpec
from cronctl.schedule.slots import first_slot

T = TypeVar("T")
AuditRow = tuple[str, dict[str, Any]]


class Runner(Protocol):
    """Where work runs before the write (`in_idle_thread`), the caller waiting for its result."""

    def __call__(self, work: Callable[[], T]) -> T: ...


@dataclass
class Fresh:
    """New jobs' entries and `job.added` rows made ahead, by name; made now for any other job."""

    now: datetime
    source: str
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    added_rows: dict[str, AuditRow] = field(default_factory=dict)

    def entry(self, spec: JobSpec) -> dict[str, Any]:
        made = self.entries.get(spec.name)
        return made if made is not None else new_entry(spec, self.now)

    def added_row(self, name: str, schedule: str | None) -> AuditRow:
        made = self.added_rows.get(name)
        return made if made is not None else added_row(name, self.source, schedule)


def new_entry(spec: JobSpec, now: datetime) -> dict[str, Any]:
    """A job created at `now`: its spec and a new state at its first slot."""
    return entry_from(spec, new_state(now, first_slot(spec, now)))


def added_row(name: str, source: str, schedule: str | None) -> AuditRow:
    return (AuditEvent.JOB_ADDED, {"job": name, "source": source, "schedule": schedule})


def prepare_new_jobs(ctx: Context, specs: list[JobSpec], now: datetime, source: str, ahead: Runner) -> Fresh:
    """The file's jobs not stored now, made on `ahead` (see the module doc)."""
    stored = ctx.definitions.names()  # here: a read must not wait on an idle thread

    def make() -> Fresh:
        fresh = Fresh(now, source)
        for spec in specs:
            if spec.name not in stored:
                fresh.entries[spec.name] = new_entry(spec, now)
                fresh.added_rows[spec.name] = added_row(spec.name, source, spec.schedule_text)
        ctx.definitions.prepare(fresh.entries, list(fresh.added_rows.values()))
        return fresh

    return ahead(make)
