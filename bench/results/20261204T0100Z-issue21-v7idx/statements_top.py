"""pg_stat_statements of $CRONCTL_TEST_PG_URL's server: reset (`reset`), or the statements by max time (`show [N]`)."""

from __future__ import annotations

import os
import sys

import psycopg

SHOW = """SELECT calls, round(max_exec_time::numeric, 1), round(mean_exec_time::numeric, 2),
                 round(total_exec_time::numeric, 0), round(mean_plan_time::numeric, 2),
                 regexp_replace(left(query, 150), '\\s+', ' ', 'g')
            FROM pg_stat_statements WHERE query NOT LIKE '%%pg_stat_statements%%'
           ORDER BY max_exec_time DESC LIMIT %s"""


def main() -> int:
    with psycopg.connect(os.environ["CRONCTL_TEST_PG_URL"], autocommit=True) as conn:
        if sys.argv[1] == "reset":
            conn.execute("SELECT pg_stat_statements_reset()")
            return 0
        print("calls | max ms | mean ms | total ms | mean plan ms | statement")
        for row in conn.execute(SHOW, (int(sys.argv[2]) if len(sys.argv) > 2 else 25,)):
            print(" | ".join(str(value) for value in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
