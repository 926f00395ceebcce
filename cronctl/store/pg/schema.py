"""The PostgreSQL store's schema, versioned, created and upgraded by cronctl itself (SPEC §9).

`MIGRATIONS[i]` takes a database from version i to i + 1. `ensure_schema` applies what is
missing in one transaction under a transaction-scoped advisory lock: concurrent cronctl
processes serialise on the lock, the later ones find the work done, and a failed upgrade
leaves nothing behind (PostgreSQL's DDL is transactional). The lock ends with the
transaction, so a transaction-mode pooler cannot strand it. A database already at a
version this code does not know is refused, never written to.

Tables (MULTIHOST §2): jobs with their spec and the high-water mark `last_slot`; loops;
runs, where `cronctl_runs_once` lets a (job, slot, attempt) be claimed once and
`cronctl_runs_alone` allows one live run of an `overlap: skip` job; the fence sequence;
the audit table; the kill/force-run requests. Indexes serve the hot queries: due jobs,
expired leases, a loop's live runs, a job's history, the open requests.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from cronctl.errors import StoreError
from cronctl.store.pg import functions
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.deadline import migration_deadline

# pg_advisory_xact_lock key of schema changes: "cronctl" in ASCII, so it reads in pg_locks.
MIGRATION_LOCK_KEY = 0x63726F6E63746C

LIVE_STATES = ("claimed", "running")
RUN_STATES = ("claimed", "running", "success", "error", "timeout", "killed", "lost", "not_started")

_V1 = (
    """CREATE TABLE cronctl_jobs (
        name text PRIMARY KEY,
        spec jsonb NOT NULL,
        spec_version bigint NOT NULL DEFAULT 1,
        overlap text NOT NULL CHECK (overlap IN ('skip', 'allow', 'replace')),
        paused boolean NOT NULL DEFAULT false,
        next_run_at timestamptz,
        last_slot timestamptz,          -- high-water mark: a slot at or before it never fires again
        state jsonb NOT NULL DEFAULT '{}'::jsonb,  -- last run, counters: what status shows
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        updated_at timestamptz NOT NULL DEFAULT clock_timestamp())""",
    "CREATE INDEX cronctl_jobs_due ON cronctl_jobs (next_run_at) WHERE NOT paused AND next_run_at IS NOT NULL",
    "CREATE SEQUENCE cronctl_fence AS bigint",
    """CREATE TABLE cronctl_loops (
        loop_id uuid PRIMARY KEY,       -- fresh at every start, never a hostname
        host_id text NOT NULL,
        boot_id text NOT NULL,
        pid integer NOT NULL,
        pid_start double precision NOT NULL,
        started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        stopped_at timestamptz)""",
    "CREATE INDEX cronctl_loops_live ON cronctl_loops (heartbeat_at) WHERE stopped_at IS NULL",
    f"""CREATE TABLE cronctl_runs (
        run_id text PRIMARY KEY,
        job text NOT NULL,
        slot timestamptz,               -- NULL for a force-run: only cronctl_runs_alone binds it
        trigger text NOT NULL CHECK (trigger IN ('schedule', 'retry', 'force')),
        attempt integer NOT NULL DEFAULT 1,
        fence bigint NOT NULL UNIQUE DEFAULT nextval('cronctl_fence'),
        exclusive boolean NOT NULL,     -- overlap: skip
        state text NOT NULL CHECK (state IN ({", ".join(f"'{s}'" for s in RUN_STATES)})),
        reason text,
        fault text CHECK (fault IN ('job', 'platform')),
        late boolean NOT NULL DEFAULT false,
        loop_id uuid,
        host_id text,
        boot_id text,
        pid integer,
        pid_start double precision,
        claimed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        due_at timestamptz,
        dispatched_at timestamptz,
        ended_at timestamptz,
        lease_expires_at timestamptz,   -- on the database clock
        kill_requested boolean NOT NULL DEFAULT false,
        exit_code integer,
        signal integer,
        duration_s double precision,
        output_tail text)""",
    "CREATE UNIQUE INDEX cronctl_runs_once ON cronctl_runs (job, slot, attempt)",
    "CREATE UNIQUE INDEX cronctl_runs_alone ON cronctl_runs (job) WHERE exclusive AND state IN ('claimed', 'running')",
    "CREATE INDEX cronctl_runs_lease ON cronctl_runs (lease_expires_at) WHERE state IN ('claimed', 'running')",
    "CREATE INDEX cronctl_runs_by_loop ON cronctl_runs (loop_id) WHERE state IN ('claimed', 'running')",
    "CREATE INDEX cronctl_runs_history ON cronctl_runs (job, claimed_at DESC)",
    """CREATE TABLE cronctl_audit (
        id bigserial PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT clock_timestamp(),
        event text NOT NULL,
        job text,
        run_id text,
        slot timestamptz,
        fence bigint,
        loop_id uuid,
        host_id text,
        reason text,
        details jsonb NOT NULL DEFAULT '{}'::jsonb)""",
    "CREATE INDEX cronctl_audit_job ON cronctl_audit (job, id)",
    "CREATE INDEX cronctl_audit_event ON cronctl_audit (event, id)",
    "CREATE INDEX cronctl_audit_at ON cronctl_audit (at)",
    """CREATE TABLE cronctl_requests (
        id bigserial PRIMARY KEY,
        kind text NOT NULL CHECK (kind IN ('kill', 'force_run')),
        job text NOT NULL,
        run_id text,
        requested_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        requested_by text,
        served_at timestamptz,
        served_by uuid,
        outcome text)""",
    "CREATE INDEX cronctl_requests_open ON cronctl_requests (id) WHERE served_at IS NULL",
)

# V2: the lease store's run path (store/pg/leases.py) keeps each live claim's record as
# the JSON store writes it (`claim`) and each ended run's history record (`record`); the
# recovery counters and the lateness histogram live in `cronctl_meta`, one row each;
# `wake_at` (below) is what it claims by.
_V2 = (
    "ALTER TABLE cronctl_runs ADD COLUMN claim jsonb, ADD COLUMN record jsonb",
    """CREATE TABLE cronctl_meta (
        key text PRIMARY KEY,
        value jsonb NOT NULL DEFAULT '{}'::jsonb)""",
    "INSERT INTO cronctl_meta (key) VALUES ('counters'), ('metrics')",
    "CREATE INDEX cronctl_runs_ended ON cronctl_runs (job, ended_at, fence) WHERE record IS NOT NULL",
    # The earliest instant a job has something due, its next slot or its pending retry:
    # what the lease store's claim scans, on an index instead of every row's state.
    "ALTER TABLE cronctl_jobs ADD COLUMN wake_at timestamptz",
    "CREATE INDEX cronctl_jobs_wake ON cronctl_jobs (wake_at) WHERE NOT paused AND wake_at IS NOT NULL",
)

# V3: the leaderless loop (store/pg/loops.py, loop/cluster.py) records its measured skew to
# the database clock and the home it runs in, which `status` shows.
_V3 = ("ALTER TABLE cronctl_loops ADD COLUMN skew_s double precision, ADD COLUMN home text",)

# V4: a definitions write locks and reads only the rows it names (store/pg/definitions.py);
# what else it must read is found by index: the jobs in a chain (`after` is a key of a spec
# only then) for the chain rules, and the jobs one file defined for `apply --prune`.
_V4 = (
    "CREATE INDEX cronctl_jobs_chained ON cronctl_jobs (name) WHERE spec ? 'after'",
    "CREATE INDEX cronctl_jobs_source ON cronctl_jobs ((spec->>'source'))",
)

_RUN_STATES_V5 = ", ".join(f"'{state}'" for state in (*RUN_STATES, "skipped"))

# V5: job chains (SPEC §10, store/pg/chain_rows.py). A chain node's run has the trigger
# `chain`, and a node its chain skipped is a run of its own (status `skipped`, with its
# history record); each chain is one row, locked by the writes that decide it.
_V5 = (
    "ALTER TABLE cronctl_runs DROP CONSTRAINT cronctl_runs_trigger_check,"
    " ADD CONSTRAINT cronctl_runs_trigger_check CHECK (trigger IN ('schedule', 'retry', 'force', 'chain'))",
    "ALTER TABLE cronctl_runs DROP CONSTRAINT cronctl_runs_state_check,"
    " ADD CONSTRAINT cronctl_runs_state_check CHECK (state IN (" + _RUN_STATES_V5 + "))",
    """CREATE TABLE cronctl_chains (
        chain_id text PRIMARY KEY,      -- the root run's id
        root text NOT NULL,
        jobs text[] NOT NULL,           -- its nodes: what a write deciding it locks
        chain jsonb NOT NULL,           -- as the JSON store keeps doc["chains"][chain_id]
        started_at timestamptz,
        ended_at timestamptz)""",
    "CREATE INDEX cronctl_chains_open ON cronctl_chains (chain_id) WHERE ended_at IS NULL",
    # The dependants of given jobs (`spec->'after' ?| names`), without reading every chained job.
    "CREATE INDEX cronctl_jobs_after ON cronctl_jobs USING gin ((spec->'after')) WHERE spec ? 'after'",
    "CREATE INDEX cronctl_chains_ended ON cronctl_chains (ended_at) WHERE ended_at IS NOT NULL",
)

# A job whose state may make it stale beside being late or holding a live run (jobs/health.py):
# its last run failed or failed its chain, or its latest attempt was refused for its cwd or
# executable. The same text is the index's predicate and `status --stale`'s (store/pg/stale.py),
# so the planner matches them; the statuses are models.FAILED_STATUSES (tests/pg check it).
ODD_JOB = ("(state->>'last_status' IN ('error', 'timeout', 'lost') OR state ? 'chain_failed'"
           " OR state->'last_not_started'->>'reason' = 'blocked_config')")

# V6 (issue 21): the reads at 100,000 jobs read only their rows. `list NAME-PREFIX` ranges over
# the names by LIKE 'prefix%' (text_pattern_ops: a range in any collation, the primary key's is
# one only in "C"); `status --stale` finds its odd jobs on a partial index, the late ones on
# cronctl_jobs_due and those with live runs on the runs' partial indexes (store/pg/stale.py).
_V6 = (
    "CREATE INDEX cronctl_jobs_prefix ON cronctl_jobs (name text_pattern_ops)",
    f"CREATE INDEX cronctl_jobs_odd ON cronctl_jobs (name) WHERE {ODD_JOB}",
)

# A job owing a notification (store/notify_owed.py): what every loop's notify worker asks for
# every 2 s. The same text is the index's predicate and the read's (store/pg/unit.py), so the
# planner matches them.
OWES_NOTIFY = "state ? 'notify_owed'"

# V7 (issue 21): the loops' periodic reads read only the rows that can match, never every job:
# not the committed ones at 100,000 jobs (35 ms a read), nor, while an `apply -f` of 100,000 jobs
# is open, its uncommitted ones (each a heap visit to find it invisible). The healer's suspects
# use cronctl_jobs_odd (V6) for the failed last runs. Built in the migration's transaction: a
# plain CREATE INDEX holds the jobs' SHARE lock (writers wait, readers do not) for the scan of
# the table, 0.1 s at 100,000 jobs; CONCURRENTLY cannot run in a transaction, so a failed
# upgrade would leave an invalid index behind (see ensure_schema for the lock's wait).
_V7 = (f"CREATE INDEX cronctl_jobs_owed ON cronctl_jobs (name) WHERE {OWES_NOTIFY}",)

# V8 (issue 21): the run path's statements as server-side PL/pgSQL functions, whose plans each
# backend caches (no client-side prepared statement: poolers); store/pg/functions.py says which and why.
_V8 = functions.MIGRATION

# What the readers write for the flags V9 keeps in columns of their own (their indexes' predicates,
# so the planner matches them): a live run, an odd job, a job owing a notification.
LIVE_RUN = "live"
ODD_ROW = "odd"
OWING_ROW = "owes"

# V9 (issue 21): the updates of the run path are HOT (PostgreSQL writes no index entry for a row
# version when no indexed column changes value and the version fits on its page). Before, none
# was: the partial indexes read `state` (a run's text, a job's jsonb), which every claim,
# dispatch, lease renewal and finish changes, so each update wrote every index of its table again.
# - A run's liveness is the stored column `live`, computed by PostgreSQL from `state` (so no
#   writer can let them disagree), and the partial indexes on live runs read it: claimed ->
#   running keeps it true. `cronctl_runs_lease` goes (a lease renewal and a dispatch move the
#   lease: they were never HOT): the expired-lease scans read the few live runs on
#   `cronctl_runs_live`, keyed by job (V1's `cronctl_runs_by_loop` indexed `loop_id`, which no
#   writer sets: every live read by job visited each live version left since the last VACUUM,
#   of every job). `cronctl_runs_alone` keeps its rule: one live run of an exclusive job.
# - A job's oddness and owed notifications are the stored columns `odd` and `owes` (V6's and
#   V7's predicates, computed from `state`), so a state change that leaves them as they were
#   (a dispatch, a success after a success) writes no index.
# - fillfactor leaves room on each page for the next versions of its rows (80% jobs, 90% runs:
#   a job row is rewritten at every run, a run row a few times in its life). Adding the stored
#   columns rewrites both tables in this transaction, at these fillfactors, with their indexes
#   (ACCESS EXCLUSIVE for the rewrite: seconds at a million jobs, docs/postgres.md).
_V9 = (
    "DROP INDEX cronctl_runs_alone, cronctl_runs_lease, cronctl_runs_by_loop",
    f"ALTER TABLE cronctl_runs ADD COLUMN live boolean GENERATED ALWAYS AS (state IN {LIVE_STATES!r}) STORED,"
    " SET (fillfactor = 90)",
    "CREATE UNIQUE INDEX cronctl_runs_alone ON cronctl_runs (job) WHERE exclusive AND live",
    "CREATE INDEX cronctl_runs_live ON cronctl_runs (job) WHERE live",
    "DROP INDEX cronctl_jobs_odd, cronctl_jobs_owed",
    f"ALTER TABLE cronctl_jobs ADD COLUMN odd boolean GENERATED ALWAYS AS ({ODD_JOB}) STORED,"
    f" ADD COLUMN owes boolean GENERATED ALWAYS AS ({OWES_NOTIFY}) STORED, SET (fillfactor = 80)",
    "CREATE INDEX cronctl_jobs_odd ON cronctl_jobs (name) WHERE odd",
    "CREATE INDEX cronctl_jobs_owed ON cronctl_jobs (name) WHERE owes",
    *functions.MIGRATION_V9,
    # The new columns have no statistics until autovacuum's next ANALYZE (at a million rows,
    # after 100,000 changes): meanwhile the planner guessed at `live`, and the run path's reads
    # of live runs walked a job's whole history (0.1 ms a read at 440 runs, growing with them).
    # Only a table with rows: statistics of an empty one (a new store) would say so until the
    # first ANALYZE after it fills, and the planner trust them for its first rows.
    """DO $$ BEGIN
        IF EXISTS (SELECT 1 FROM cronctl_runs) THEN ANALYZE cronctl_runs; END IF;
        IF EXISTS (SELECT 1 FROM cronctl_jobs) THEN ANALYZE cronctl_jobs; END IF;
    END $$""",
)

# V10 (issue 21): a unit's opening in one call (store/pg/functions.py, `_OPEN_NAMED`).
_V10 = functions.MIGRATION_V10

MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8, _V9, _V10)
SCHEMA_VERSION = len(MIGRATIONS)

_SCHEMA_TABLE = """CREATE TABLE IF NOT EXISTS cronctl_schema (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"""


class SchemaTooNewError(StoreError):
    """The database was upgraded by a newer cronctl; this one must not write to it."""


class MigrationError(StoreError):
    pass


def schema_version(conn: Connection) -> int:
    """The database's schema version; 0 for a database cronctl has never used."""
    row = conn.execute("SELECT to_regclass('cronctl_schema') IS NOT NULL").fetchone()
    if not row or not row[0]:
        return 0
    found = conn.execute("SELECT coalesce(max(version), 0) FROM cronctl_schema").fetchone()
    return int(found[0]) if found else 0


def ensure_schema(conn: Connection, migrations: Sequence[Sequence[str]] = MIGRATIONS) -> int:
    """Bring the database to `len(migrations)`; returns that version. Safe to call on every start."""
    target = len(migrations)
    with conn.transaction():
        current = schema_version(conn)  # the common case, up to date, takes no lock
    _refuse_newer(current, target)
    if current == target:
        return target
    try:
        with migration_deadline(conn), conn.transaction():  # a rewrite of a table takes seconds
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
            conn.execute(_SCHEMA_TABLE)
            current = schema_version(conn)  # another process may have migrated while we waited
            _refuse_newer(current, target)
            for version in range(current + 1, target + 1):
                for statement in migrations[version - 1]:
                    conn.execute(statement)  # our own constant DDL, never user text
                conn.execute("INSERT INTO cronctl_schema (version) VALUES (%s)", (version,))
    except psycopg.Error as exc:
        raise MigrationError(f"upgrading the PostgreSQL store's schema from version {current} to {target} "
                             f"failed, nothing was changed: {str(exc).strip()}") from None
    return target


def _refuse_newer(current: int, known: int) -> None:
    if current > known:
        raise SchemaTooNewError(
            f"the PostgreSQL store's schema is version {current}, newer than this cronctl knows ({known}): "
            "upgrade cronctl on this host before using it with this database")
