"""Per-statement server time of one claim+dispatch+finish round (pg_stat_statements), on bench/pg_claim.py --keep's database of SIZE jobs: python statements.py SIZE (CRONCTL_TEST_PG_URL set)."""
import sys, os
sys.path.insert(0, 'bench'); sys.path.insert(0, '.')
import pg_claim, psycopg
from cronctl.store.pg.connect import connect, parse_store_url
from cronctl.store.pg.leases import PgLeaseStore
url = os.environ["CRONCTL_TEST_PG_URL"]; size = int(sys.argv[1]); rounds = 100
db = url.rsplit("/", 1)[0] + f"/{pg_claim.KEPT_PREFIX}{size}_0"
with connect(parse_store_url(db)) as conn:
    leases = PgLeaseStore(conn, "bench-host")
    for _ in range(10): pg_claim.one_lease_round(conn, leases)
    clock = pg_claim.ServerClock(db)
    clock.reset()
    for _ in range(rounds):
        pg_claim.one_lease_round(conn, leases)
    rows = clock.conn.execute("""SELECT calls, total_plan_time + total_exec_time, query, total_plan_time FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%%pg_stat_statements%%'
        ORDER BY 2 DESC""").fetchall()
    tot = sum(r[1] for r in rows); n = sum(r[0] for r in rows)
    print(f"per round: {tot/rounds:.3f} ms, {n/rounds:.1f} statements (incl. the untimed put_entry and db_now)")
    for calls, ms, q, plan in rows:
        print(f"{calls/rounds:5.1f} {ms/rounds:7.3f} plan {plan/rounds:6.3f} {' '.join(q.split())[:150]}")
