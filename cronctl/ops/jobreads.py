"""Every job's view, or one job's, for the read commands (`list`, `show`, `next`).

The backend answers (store/backend.py): on the JSON store one document read, the same
views the JSON lease store builds (store/leases.py `jobs` and `job`), without importing
the lease machinery (the run path's writes, chains, the outbox: about 12 ms of a 100 ms
`list`); on PostgreSQL the lease store, which keeps the jobs (and so is one already open).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cronctl.jobs.state import JobView

if TYPE_CHECKING:
    from cronctl.context import Context


def job_views(ctx: Context, prefix: str | None = None) -> list[JobView]:
    """Every job with its state, by name; only those whose name starts with `prefix` when given
    (on PostgreSQL the store reads only those rows)."""
    return ctx.backend.job_views(prefix)


def job_view(ctx: Context, name: str) -> JobView:
    """One job; JobNotFoundError names it when there is none."""
    return ctx.backend.job_view(name)
