"""The jobs `status --stale` must judge, found by index: never every row of the store.

A job is stale when jobs/health.py finds it late, wedged or failing past its alert_after,
or jobs/chain_health.py finds it wedged waiting in a chain. Each of those needs one of:

- its next instant passed, unpaused (`late`): `next_run_at` at or before now, on
  `cronctl_jobs_due`;
- a live run (a claim whose owner died or whose lease ran out: `wedged`), on the runs'
  partial indexes of live states;
- a last run that failed or failed its chain (`failing`, and the `wedged` of a failure
  never re-armed), or an attempt refused for its cwd or executable (`wedged`): the partial
  index `cronctl_jobs_odd` (the column `odd`, schema.ODD_JOB);
- a node of an open chain (`wedged` while waiting), from `cronctl_chains_open`.

So these rows are read, and health.py judges them exactly as it judges every job in
`status`: at 100,000 healthy jobs this reads none of them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from cronctl.store.pg.connect import Connection
from cronctl.store.pg.document import load_jobs
from cronctl.store.pg.schema import LIVE_RUN, ODD_ROW

MAY_BE_STALE = f"""name = ANY(ARRAY(
    SELECT name FROM cronctl_jobs WHERE NOT paused AND next_run_at <= %(now)s
    UNION SELECT job FROM cronctl_runs WHERE {LIVE_RUN}
    UNION SELECT name FROM cronctl_jobs WHERE {ODD_ROW}
    UNION SELECT unnest(jobs) FROM cronctl_chains WHERE ended_at IS NULL))"""


def may_be_stale(conn: Connection, now: datetime) -> tuple[dict[str, Any], bool]:
    """The entries of the jobs that may be stale at `now` (as `load_jobs` reads them), and
    whether the store holds any job at all (a silent loop makes a store with jobs stale)."""
    entries = load_jobs(conn, MAY_BE_STALE, {"now": now}, lock=None)
    any_jobs = bool(entries) or conn.execute("SELECT EXISTS (SELECT 1 FROM cronctl_jobs)").fetchone() == (True,)
    return entries, any_jobs
