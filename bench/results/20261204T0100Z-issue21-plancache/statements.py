"""Every statement of claim + dispatch + finish (the timed window of bench/pg_claim.py --server-time),
with its calls, planning and execution milliseconds per round, from pg_stat_statements.

On bench/pg_claim.py --keep's database of SIZE jobs (run that first), from the repository root, with
$CRONCTL_TEST_PG_URL a server that loads pg_stat_statements (track_planning on):

    python bench/results/20261204T0100Z-issue21-plancache/statements.py SIZE [ROUNDS]

The statements are counted from the claim to the end of the finish of each round (the round's
untimed re-arm of the job and its `db_now` are not in it), as bench/pg_claim.py's server time.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

import pg_claim  # noqa: E402

from cronctl.store.pg.connect import connect, parse_store_url  # noqa: E402
from cronctl.store.pg.leases import PgLeaseStore  # noqa: E402

BY_STATEMENT = """SELECT query, calls, total_plan_time, total_exec_time FROM pg_stat_statements
                   WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                     AND query NOT LIKE '%%pg_stat_statements%%'"""


def main() -> None:
    size = int(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    db = os.environ["CRONCTL_TEST_PG_URL"].rsplit("/", 1)[0] + f"/{pg_claim.KEPT_PREFIX}{size}_0"
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    with connect(parse_store_url(db)) as conn:
        leases = PgLeaseStore(conn, "bench-host")
        for _ in range(10):
            pg_claim.one_lease_round(conn, leases)
        clock = pg_claim.ServerClock(db)
        for _ in range(rounds):
            pg_claim.one_lease_round(conn, leases, clock.reset)
            for query, calls, plan, execute in clock.conn.execute(BY_STATEMENT).fetchall():
                row = totals[" ".join(query.split())]
                row[0] += calls
                row[1] += plan
                row[2] += execute
    calls = sum(row[0] for row in totals.values()) / rounds
    plan = sum(row[1] for row in totals.values()) / rounds
    execute = sum(row[2] for row in totals.values()) / rounds
    print(f"{size} jobs, per round: {plan + execute:.3f} ms (plan {plan:.3f}, exec {execute:.3f}), "
          f"{calls:.1f} statements")
    print(f"{'calls':>5} {'plan':>6} {'exec':>6}  statement")
    for query, (n, p, e) in sorted(totals.items(), key=lambda item: -(item[1][1] + item[1][2])):
        print(f"{n / rounds:5.1f} {p / rounds:6.3f} {e / rounds:6.3f}  {query[:140]}")


if __name__ == "__main__":
    main()
