"""Every job's view, or one job's, for the read commands (`list`, `show`, `next`).

On the JSON store these are one document read: the same views the JSON lease store
builds (store/leases.py `jobs` and `job`), without importing the lease machinery (the
run path's writes, chains, the outbox: about 12 ms of a 100 ms `list`). On PostgreSQL
the lease store keeps the jobs: asked there (and so is a lease store already open).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cronctl.jobs.state import JobView, get_entry

if TYPE_CHECKING:
    from cronctl.context import Context


def job_views(ctx: Context, prefix: str | None = None) -> list[JobView]:
    """Every job with its state, by name; only those whose name starts with `prefix` when given
    (on PostgreSQL the store reads only those rows)."""
    if ctx.on_postgres or ctx.lease_store is not None:
        return ctx.leases.jobs(prefix)
    jobs = ctx.store.read()["jobs"]
    return [JobView.from_entry(jobs[name]) for name in sorted(jobs) if name.startswith(prefix or "")]


def job_view(ctx: Context, name: str) -> JobView:
    """One job; JobNotFoundError names it when there is none."""
    if ctx.on_postgres or ctx.lease_store is not None:
        return ctx.leases.job(name)
    return JobView.from_entry(get_entry(ctx.store.read(), name))
