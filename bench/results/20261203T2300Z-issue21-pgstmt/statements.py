"""Every statement of 100 rounds of claim + dispatch + finish, with its server and planning time per round.

On bench/pg_claim.py --keep's database of SIZE jobs (run that first), from the repository root, with
$CRONCTL_TEST_PG_URL a server that loads pg_stat_statements (track_planning on):

    python bench/results/20261203T2300Z-issue21-pgstmt/statements.py SIZE [PLAN_CACHE_MODE]

PLAN_CACHE_MODE (the experiment): the connection prepares every statement (prepare_threshold=0) and
plans with that mode (`auto`, `force_generic_plan`); cronctl itself prepares none (connect.py).
The rounds include bench/pg_claim.py's untimed `put_entry` and `db_now`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

import pg_claim  # noqa: E402

from cronctl.store.pg.connect import connect, parse_store_url  # noqa: E402
from cronctl.store.pg.leases import PgLeaseStore  # noqa: E402

ROUNDS = 100
BY_STATEMENT = """SELECT calls, total_plan_time + total_exec_time, total_plan_time, query FROM pg_stat_statements
                   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                     AND query NOT LIKE '%%pg_stat_statements%%' ORDER BY 2 DESC"""


def main() -> None:
    size = int(sys.argv[1])
    mode = sys.argv[2] if len(sys.argv) > 2 else None
    db = os.environ["CRONCTL_TEST_PG_URL"].rsplit("/", 1)[0] + f"/{pg_claim.KEPT_PREFIX}{size}_0"
    with connect(parse_store_url(db)) as conn:
        if mode is not None:
            conn.prepare_threshold = 0
            conn.execute(f"SET plan_cache_mode = {mode}")
            conn.commit()
        leases = PgLeaseStore(conn, "bench-host")
        for _ in range(10):
            pg_claim.one_lease_round(conn, leases)
        clock = pg_claim.ServerClock(db)
        clock.reset()
        for _ in range(ROUNDS):
            pg_claim.one_lease_round(conn, leases)
        rows = clock.conn.execute(BY_STATEMENT).fetchall()
    total, count = sum(row[1] for row in rows), sum(row[0] for row in rows)
    print(f"per round: {total / ROUNDS:.3f} ms, {count / ROUNDS:.1f} statements")
    for calls, ms, plan, query in rows:
        print(f"{calls / ROUNDS:5.1f} {ms / ROUNDS:7.3f} plan {plan / ROUNDS:6.3f} {' '.join(query.split())[:150]}")


if __name__ == "__main__":
    main()
