"""The run path's statements as server-side PL/pgSQL functions: planned once per server backend.

Why: a claim, a dispatch and a finish are about 37 statements, and no statement stays
prepared on the client (connect.py: a transaction-mode pooler such as PgBouncer 1.18 loses
protocol-level prepared statements), so each was planned at every call: 1.1 of the 1.8 ms
of server time of one run (issue 21, `bench/pg_claim.py --server-time`). The statements of a
PL/pgSQL function are prepared by PostgreSQL itself, inside the backend, and their plans
cached there: nothing of it is session state a pooler must carry (the next transaction on
another backend plans them once there). The client sends `SELECT cronctl_x(...)`, which
plans in a few microseconds.

What stays the same, and why it does:
- each function is VOLATILE (the default), so under READ COMMITTED every statement in it
  takes a fresh snapshot, as the separate client statements did: the live runs read after
  the job rows are locked see the runs the previous holder of those locks committed (one
  statement with a sub-select would not: issue 21's third pass);
- the statements are the ones the client sent (the same locks in the same order: FOR
  UPDATE in name order, SKIP LOCKED on the claim paths), with the live states written as
  constants, so a cached generic plan still matches the partial indexes on live runs;
- the due scan's bound (`wake_at <= now`) decides between a few rows and every row, and a
  generic plan cannot see it (V8's single statement, ordered by name, read every row at a
  million jobs in a generic plan, 270-512 ms), so V8 planned it at each call with the value
  (`force_custom_plan`); V9 (`_LOCK_DUE_V9`) reads the due names by a range of the wake
  index in a statement of their own, whose generic plan is that range for any bound;
- the other plans are generic, made once (`SET plan_cache_mode = force_generic_plan` on each
  function, for its calls only): in the default mode PostgreSQL compares a generic plan's
  estimate with the custom plans' and, an array parameter being guessed at 10 elements, kept
  planning each call anyway (measured: no gain). Each statement's generic plan is an index
  scan of the rows it names (EXPLAIN at a million jobs: bench/results, issue 21's fourth pass);
- errors are the server's, raised through the call unchanged (a lock or statement timeout
  is the same SQLSTATE), so the caller maps them as before.

`MIGRATION` creates them (schema.py's version after the partial indexes); a later change
to one is a new version that replaces it (CREATE OR REPLACE): `MIGRATION_V9`. The role that migrates needs
CREATE on the schema, as it does for the tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from cronctl.store.pg.connect import Connection


# The due rows of a lease unit, bounded by `bound`: the caller's instant, or the statement's own
# (`statement_timestamp()`, the database clock when the statement arrived): both are values the
# planner sees, so it range-scans the index on wake_at for the few rows due. (A sub-select of
# clock_timestamp() hid the bound: the planner guessed a third of the rows due and walked the
# name index over all of them, 0.25 s at a million jobs.) `_LOCK_DUE` runs it; `DUE` is the
# same predicate as a client statement writes it (the tests EXPLAIN it).
def _due_rows(bound: str) -> str:
    return f"NOT paused AND wake_at <= coalesce({bound}, statement_timestamp())"


DUE = _due_rows("%(now)s::timestamptz")

# The live runs of the jobs a unit locked, oldest fence first, as `_lock_rows` reads them: one
# row per claim, the job columns NULL but the name. Its own statement, so its own snapshot,
# taken after the job rows were locked (see the module doc).
def _live_claims(live: str, settings: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION cronctl_live_claims(locked text[])
RETURNS TABLE (job_name text, job_spec jsonb, job_state jsonb, live_run text, live_claim jsonb, live_host text)
LANGUAGE plpgsql {settings} AS $$
BEGIN
    RETURN QUERY
        SELECT r.job, NULL::jsonb, NULL::jsonb, r.run_id, r.claim, r.host_id FROM cronctl_runs AS r
         WHERE r.job = ANY(locked) AND {live} AND r.claim IS NOT NULL ORDER BY r.fence;
END $$"""


# V8's live runs (their states), and V9's (the column `live`, which its partial indexes read).
_V8_LIVE = "r.state IN ('claimed', 'running')"
_V8_SETTINGS = "SET plan_cache_mode = force_generic_plan"
_V9_LIVE = "r.live"
# A read of a job's live runs is a plain index scan of cronctl_runs_live, never a bitmap scan: the
# index keeps an entry for each run version that was live until VACUUM removes it, and only a
# plain scan marks those of ended runs dead in the index as it passes them (the next reads skip
# them, without visiting the table). A generic plan's guess for `= ANY(array)` is 10 names, for
# which the planner picks a bitmap scan, which visited every such version at each read: the
# reads slowed with every run ended since the last VACUUM (issue 21).
_V9_SETTINGS = "SET plan_cache_mode = force_generic_plan SET enable_bitmapscan = off"
# V10's: nor a whole-table read. A generic plan of a small runs table (hundreds of rows, a few
# live by its statistics) read it whole, every version of every row since the last VACUUM:
# 80-120 us a read at 550 runs on 184 pages (issue 21), and more with every run.
_V10_SETTINGS = f"{_V9_SETTINGS} SET enable_seqscan = off"
# V9's lock functions read the live runs of the rows they locked themselves, a statement of its
# own (its own snapshot, taken after the locks, as `cronctl_live_claims` did): a nested function
# call cost each unit 15-25 us more (cronctl_live_claims stays, reading `live`, but is not called).
_V9_LIVE_ROWS = """
    RETURN QUERY
        SELECT r.job, NULL::jsonb, NULL::jsonb, r.run_id, r.claim, r.host_id FROM cronctl_runs AS r
         WHERE r.job = ANY(locked) AND r.live AND r.claim IS NOT NULL ORDER BY r.fence;"""

# A named unit's job rows, locked in name order (one row per job, the run columns NULL), then
# their live runs (`cronctl_live_claims`).
_LOCK_NAMED = """
CREATE OR REPLACE FUNCTION cronctl_lock_named(names text[])
RETURNS TABLE (job_name text, job_spec jsonb, job_state jsonb, live_run text, live_claim jsonb, live_host text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    locked text[] := '{}';
BEGIN
    FOR job_name, job_spec, job_state IN
        SELECT j.name, j.spec, j.state FROM cronctl_jobs AS j WHERE j.name = ANY(names) ORDER BY j.name FOR UPDATE
    LOOP
        locked := array_append(locked, job_name);
        RETURN NEXT;
    END LOOP;
    RETURN QUERY SELECT * FROM cronctl_live_claims(locked);
END $$"""

# The claim write's due rows (SKIP LOCKED: rows another loop is deciding on stay its own), then
# their live runs, as `cronctl_lock_named`. The scan is planned at each call with its instant
# (force_custom_plan: a range on cronctl_jobs_wake), never a cached generic plan, which cannot
# see the bound and walks the name index over every row (270 ms at a million jobs: EXPLAIN in
# issue 21's fourth pass). NULL `due_by`: the database clock when the client's statement
# arrived (statement_timestamp()).
_LOCK_DUE = f"""
CREATE OR REPLACE FUNCTION cronctl_lock_due(due_by timestamptz)
RETURNS TABLE (job_name text, job_spec jsonb, job_state jsonb, live_run text, live_claim jsonb, live_host text)
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $$
DECLARE
    locked text[] := '{{}}';
BEGIN
    FOR job_name, job_spec, job_state IN
        SELECT j.name, j.spec, j.state FROM cronctl_jobs AS j
         WHERE {_due_rows("due_by")} ORDER BY j.name
           FOR UPDATE SKIP LOCKED
    LOOP
        locked := array_append(locked, job_name);
        RETURN NEXT;
    END LOOP;
    RETURN QUERY SELECT * FROM cronctl_live_claims(locked);
END $$"""

# V9's due rows: first their names, by a range of cronctl_jobs_wake to the bound (a statement
# without ORDER BY: its generic plan, made once, has nothing to gain from the name index, and
# enable_seqscan = off leaves it no whole-table read to prefer for a bound it cannot see); then
# those rows locked in name order (SKIP LOCKED), the due condition checked again on each locked
# row, as the single statement did. V8 planned its scan at every claim (force_custom_plan: 50 us,
# a twentieth of a run's server time). Both read one bound: statement_timestamp() is the call's.
_LOCK_DUE_V9 = f"""
CREATE OR REPLACE FUNCTION cronctl_lock_due(due_by timestamptz)
RETURNS TABLE (job_name text, job_spec jsonb, job_state jsonb, live_run text, live_claim jsonb, live_host text)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    locked text[] := '{{}}';
    due text[];
BEGIN
    due := ARRAY(SELECT j.name FROM cronctl_jobs AS j WHERE {_due_rows("due_by")});
    FOR job_name, job_spec, job_state IN
        SELECT j.name, j.spec, j.state FROM cronctl_jobs AS j
         WHERE j.name = ANY(due) AND {_due_rows("due_by")} ORDER BY j.name
           FOR UPDATE SKIP LOCKED
    LOOP
        locked := array_append(locked, job_name);
        RETURN NEXT;
    END LOOP;{_V9_LIVE_ROWS}
END $$"""

# V9's named unit: as V8's, the live runs read in the function itself (one call fewer a unit).
_LOCK_NAMED_V9 = f"""
CREATE OR REPLACE FUNCTION cronctl_lock_named(names text[])
RETURNS TABLE (job_name text, job_spec jsonb, job_state jsonb, live_run text, live_claim jsonb, live_host text)
LANGUAGE plpgsql {_V9_SETTINGS} AS $$
DECLARE
    locked text[] := '{{}}';
BEGIN
    FOR job_name, job_spec, job_state IN
        SELECT j.name, j.spec, j.state FROM cronctl_jobs AS j WHERE j.name = ANY(names) ORDER BY j.name FOR UPDATE
    LOOP
        locked := array_append(locked, job_name);
        RETURN NEXT;
    END LOOP;{_V9_LIVE_ROWS}
END $$"""

# chain_rows._NAMED_FIRST: the chains of the named jobs' live runs, and whether any job runs after them.
def _named_first(live: str, settings: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION cronctl_named_first(names text[], OUT chain_ids text[], OUT has_below boolean)
LANGUAGE plpgsql {settings} AS $$
BEGIN
    SELECT coalesce(array_agg(DISTINCT r.claim->>'chain'), '{{}}') INTO chain_ids FROM cronctl_runs AS r
     WHERE r.job = ANY(names) AND {live} AND r.claim->>'chain' IS NOT NULL;
    has_below := EXISTS (SELECT 1 FROM cronctl_jobs AS j WHERE j.spec ? 'after' AND j.spec->'after' ?| names);
END $$"""

# chain_rows.dependants_of: the jobs after any of `names` (the GIN index on `after`).
_DEPENDANTS = """
CREATE OR REPLACE FUNCTION cronctl_dependants(names text[]) RETURNS SETOF text
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN QUERY SELECT j.name FROM cronctl_jobs AS j
                  WHERE j.spec ? 'after' AND j.spec->'after' ?| names ORDER BY j.name;
END $$"""

# chain_rows._OPEN_CHAINS.
_OPEN_CHAINS = """
CREATE OR REPLACE FUNCTION cronctl_open_chains() RETURNS TABLE (open_id text, open_chain jsonb)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN QUERY SELECT c.chain_id, c.chain FROM cronctl_chains AS c WHERE c.ended_at IS NULL ORDER BY c.chain_id;
END $$"""

# The SQL V8's unit end and fired keys share with V9's (whose one-row paths come first): a released
# migration's text never changes, so V8's is built of these byte for byte as it was written.
_END_UNIT_HEAD = """CREATE OR REPLACE FUNCTION cronctl_end_unit(
    states jsonb[], next_runs timestamptz[], wakes timestamptz[], paused_now boolean[], names text[],
    fired_jobs text[], fired_slots timestamptz[], marked_jobs text[], marked_slots timestamptz[],
    meta_keys text[], meta_values jsonb[],
    host text, events text[], jobs text[], run_ids text[], slots timestamptz[], fences bigint[], reasons text[],
    details jsonb[]) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$"""
_END_JOBS = """        UPDATE cronctl_jobs AS j SET state = u.state, next_run_at = u.next_run_at, wake_at = u.wake_at,
               paused = u.paused, updated_at = clock_timestamp(), last_slot = greatest(j.last_slot, k.slot)
          FROM unnest(states, next_runs, wakes, paused_now, names) AS u(state, next_run_at, wake_at, paused, name)
               LEFT JOIN (SELECT f.name, max(f.slot) AS slot FROM unnest(fired_jobs, fired_slots) AS f(name, slot)
                           GROUP BY f.name) AS k ON k.name = u.name
         WHERE j.name = u.name;"""
_END_MARKS = """    IF cardinality(marked_jobs) > 0 THEN  -- the marks of jobs whose row is not otherwise written
        UPDATE cronctl_jobs AS j SET last_slot = greatest(j.last_slot, k.slot)
          FROM (SELECT m.name, max(m.slot) AS slot FROM unnest(marked_jobs, marked_slots) AS m(name, slot)
                 GROUP BY m.name) AS k
         WHERE j.name = k.name;
    END IF;"""
_END_META = """        UPDATE cronctl_meta AS m SET value = u.value FROM unnest(meta_keys, meta_values) AS u(key, value)
         WHERE m.key = u.key;"""
_END_AUDIT = """        INSERT INTO cronctl_audit (event, job, run_id, slot, fence, reason, details, loop_id, host_id)
        SELECT u.event, u.job, u.run_id, u.slot, u.fence, u.reason, u.details, NULL, host
          FROM unnest(events, jobs, run_ids, slots, fences, reasons, details)
               WITH ORDINALITY AS u(event, job, run_id, slot, fence, reason, details, n)
         ORDER BY u.n;"""
_FIRED_HEAD = """CREATE OR REPLACE FUNCTION cronctl_fired(jobs text[], slots timestamptz[], attempts integer[])
RETURNS TABLE (fired_job text, fired_slot timestamptz, fired_attempt integer, mark timestamptz)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$"""
_FIRED_JOIN = """            SELECT r.job, r.slot, r.attempt, NULL::timestamptz
              FROM unnest(jobs, slots, attempts) AS k(job, slot, attempt)
              JOIN cronctl_runs AS r ON r.job = k.job AND r.slot = k.slot AND r.attempt = k.attempt;"""
_FIRED_MARKS = """    RETURN QUERY
        SELECT j.name, NULL::timestamptz, NULL::integer, j.last_slot FROM cronctl_jobs AS j
         WHERE j.name = ANY(jobs) AND j.last_slot IS NOT NULL;"""

# fired.py: the claimed keys that already have their run (rows with an attempt), then the
# high-water marks of the claimed jobs (rows with a mark): a scheduled slot at or before its
# job's mark was dispatched already, whatever next_run_at says. The keys by a join, one probe
# of cronctl_runs_once per claim (three `= ANY` would probe every combination of the arrays: a
# burst of 500 claims over several slots, a quarter million).
_FIRED = f"""
{_FIRED_HEAD}
BEGIN
    RETURN QUERY
        SELECT r.job, r.slot, r.attempt, NULL::timestamptz
          FROM unnest(jobs, slots, attempts) AS k(job, slot, attempt)
          JOIN cronctl_runs AS r ON r.job = k.job AND r.slot = k.slot AND r.attempt = k.attempt;
{_FIRED_MARKS}
END $$"""

# V9's: one claim's key (the run path's case) probes cronctl_runs_once by its three values; the
# join stays for many. The join's generic plan, guessing 10 keys, hashed the whole runs table
# while it was small (until a few thousand runs: 40 us a claim, as much as the rest of the call).
_FIRED_V9 = f"""
{_FIRED_HEAD}
BEGIN
    IF cardinality(jobs) = 1 THEN
        RETURN QUERY
            SELECT r.job, r.slot, r.attempt, NULL::timestamptz FROM cronctl_runs AS r
             WHERE r.job = jobs[1] AND r.slot = slots[1] AND r.attempt = attempts[1];
    ELSE
        RETURN QUERY
{_FIRED_JOIN}
    END IF;
{_FIRED_MARKS}
END $$"""

# The end of a unit (document.doc_transaction), one call: the changed job rows (arrays, one
# statement: never a pipeline, whose gaps PostgreSQL does not time, issue 20), the high-water
# marks raised by the scheduled runs dispatched (only ever forward; `fired_*` of rows written
# here, `marked_*` of the others), this host's changed
# counters and metrics rows (locked when the unit began) and the unit's audit rows, in their
# order (ids rise as the arrays go). Their rows were all locked before, so the order of these
# writes against each other and the runs rows changes nothing.
_END_UNIT = f"""
{_END_UNIT_HEAD}
BEGIN
    IF cardinality(names) > 0 THEN
        -- A job whose run was dispatched gets its mark in the same row version (greatest() skips
        -- the NULL of a job without one): a second UPDATE would write every index of the row again.
{_END_JOBS}
    END IF;
{_END_MARKS}
    IF cardinality(meta_keys) > 0 THEN
{_END_META}
    END IF;
    IF cardinality(events) > 0 THEN
{_END_AUDIT}
    END IF;
END $$"""

# V9's unit end: the same writes, with a path of its own for one row, the run path's case (a
# claim, a dispatch, a finish: one job row, one meta row, one audit row). The general path's
# unnest, join and aggregate cost each write 50-65 us more than the row by its name, a sixth of
# the server's time of a run (issue 21); the general path stays for the writes of many rows.
_END_UNIT_V9 = f"""
{_END_UNIT_HEAD}
BEGIN
    IF cardinality(names) = 1 THEN
        UPDATE cronctl_jobs AS j SET state = states[1], next_run_at = next_runs[1], wake_at = wakes[1],
               paused = paused_now[1], updated_at = clock_timestamp(),
               last_slot = greatest(j.last_slot, (SELECT max(f.slot)
                                                    FROM unnest(fired_jobs, fired_slots) AS f(name, slot)
                                                   WHERE f.name = names[1]))
         WHERE j.name = names[1];
    ELSIF cardinality(names) > 1 THEN
{_END_JOBS}
    END IF;
{_END_MARKS}
    IF cardinality(meta_keys) = 1 THEN
        UPDATE cronctl_meta AS m SET value = meta_values[1] WHERE m.key = meta_keys[1];
    ELSIF cardinality(meta_keys) > 1 THEN
{_END_META}
    END IF;
    IF cardinality(events) = 1 THEN
        INSERT INTO cronctl_audit (event, job, run_id, slot, fence, reason, details, loop_id, host_id)
        VALUES (events[1], jobs[1], run_ids[1], slots[1], fences[1], reasons[1], details[1], NULL, host);
    ELSIF cardinality(events) > 1 THEN
{_END_AUDIT}
    END IF;
END $$"""

# document._save_claims: a new claim's run row; a claim changed (dispatched, its lease moved);
# an ended run (its history record). One row each, by its key (`run_id`, the primary key).
_INSERT_RUN = """
CREATE OR REPLACE FUNCTION cronctl_insert_run(
    new_run text, new_job text, new_slot timestamptz, new_trigger text, new_attempt integer, new_exclusive boolean,
    new_state text, new_late boolean, new_host text, new_boot text, new_pid integer, new_pid_start double precision,
    new_claimed_at timestamptz, new_due_at timestamptz, new_dispatched_at timestamptz, new_lease timestamptz,
    new_claim jsonb) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    INSERT INTO cronctl_runs (run_id, job, slot, trigger, attempt, exclusive, state, late, host_id, boot_id, pid,
                              pid_start, claimed_at, due_at, dispatched_at, lease_expires_at, claim)
    VALUES (new_run, new_job, new_slot, new_trigger, new_attempt, new_exclusive, new_state, new_late, new_host,
            new_boot, new_pid, new_pid_start, new_claimed_at, new_due_at, new_dispatched_at, new_lease, new_claim);
END $$"""

_UPDATE_CLAIM = """
CREATE OR REPLACE FUNCTION cronctl_update_claim(
    run text, new_claim jsonb, new_state text, new_pid integer, new_pid_start double precision,
    new_dispatched_at timestamptz, new_lease timestamptz) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    UPDATE cronctl_runs AS r SET claim = new_claim, state = new_state, pid = new_pid, pid_start = new_pid_start,
           dispatched_at = new_dispatched_at, lease_expires_at = new_lease
     WHERE r.run_id = run;
END $$"""

_END_RUN = """
CREATE OR REPLACE FUNCTION cronctl_end_run(
    run text, new_state text, new_reason text, new_fault text, new_exit_code integer, new_signal integer,
    new_duration double precision, new_tail text, new_ended_at timestamptz, new_record jsonb) RETURNS void
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    UPDATE cronctl_runs AS r SET state = new_state, reason = new_reason, fault = new_fault, exit_code = new_exit_code,
           signal = new_signal, duration_s = new_duration, output_tail = new_tail, ended_at = new_ended_at,
           lease_expires_at = NULL, claim = NULL, record = new_record
     WHERE r.run_id = run;
END $$"""

# document.load_meta: this host's counters and metrics rows, locked in key order.
_LOCK_META = """
CREATE OR REPLACE FUNCTION cronctl_lock_meta(keys text[]) RETURNS TABLE (meta_key text, meta_value jsonb)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
BEGIN
    RETURN QUERY SELECT m.key, m.value FROM cronctl_meta AS m WHERE m.key = ANY(keys) ORDER BY m.key FOR UPDATE;
END $$"""

# V10: a unit's opening in one call (issue 21: each call of a function costs the server 15-25 us
# around its own statements, and a run's three units made thirteen). A named unit (a dispatch, a
# finish) whose jobs have no chain run and no job after them (`cronctl_named_first`'s two
# questions, asked first as before) locks its job rows, reads their live runs, locks this
# host's meta rows and reads the clock; otherwise it does nothing and says `plan`, and the
# client plans the unit's chains first (chain_rows.plan_named), as V9 did for every unit. The
# claim write does the same when no chain is open, and reads the dependants of the rows it
# locked (`cronctl_dependants`). One row per thing found, its kind first: `job` (name, spec,
# state), `run` (job, run_id, claim, host), `meta` (key, value in the state column), `after`
# (a dependant's name), then `now` (the clock once every lock is held).
_OPENED = """RETURNS TABLE (kind text, row_name text, row_spec jsonb, row_state jsonb, row_run text, row_claim jsonb,
               row_host text, row_at timestamptz)"""
_PLAN = "RETURN QUERY SELECT 'plan'::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::text, NULL::jsonb, NULL::text," \
        " NULL::timestamptz;\n        RETURN;"
_OPENED_RUNS = """
    RETURN QUERY
        SELECT 'run'::text, r.job, NULL::jsonb, NULL::jsonb, r.run_id, r.claim, r.host_id, NULL::timestamptz
          FROM cronctl_runs AS r WHERE r.job = ANY(locked) AND r.live AND r.claim IS NOT NULL ORDER BY r.fence;"""
_OPENED_NOW = """
    RETURN QUERY SELECT 'now'::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::text, NULL::jsonb, NULL::text,
                        clock_timestamp();"""
_OPENED_JOBS = """
    LOOP
        kind := 'job';
        locked := array_append(locked, row_name);
        RETURN NEXT;
    END LOOP;"""

_OPEN_NAMED = f"""
CREATE OR REPLACE FUNCTION cronctl_open_named(names text[], meta_keys text[])
{_OPENED}
LANGUAGE plpgsql {_V10_SETTINGS} AS $$
DECLARE
    locked text[] := '{{}}';
BEGIN
    IF EXISTS (SELECT 1 FROM cronctl_runs AS r WHERE r.job = ANY(names) AND r.live AND r.claim->>'chain' IS NOT NULL)
       OR EXISTS (SELECT 1 FROM cronctl_jobs AS j WHERE j.spec ? 'after' AND j.spec->'after' ?| names) THEN
        {_PLAN}
    END IF;
    FOR row_name, row_spec, row_state IN
        SELECT j.name, j.spec, j.state FROM cronctl_jobs AS j WHERE j.name = ANY(names) ORDER BY j.name
           FOR UPDATE{_OPENED_JOBS}{_OPENED_RUNS}
    IF cardinality(meta_keys) > 0 THEN
        RETURN QUERY
            SELECT 'meta'::text, m.key, NULL::jsonb, m.value, NULL::text, NULL::jsonb, NULL::text, NULL::timestamptz
              FROM cronctl_meta AS m WHERE m.key = ANY(meta_keys) ORDER BY m.key FOR UPDATE;
    END IF;{_OPENED_NOW}
END $$"""

# The claim write's: as V9's `cronctl_lock_due` (the same settings: the due names by a range of
# the wake index), once no chain is open (cronctl_chains_open); the dependants of the rows locked
# by the GIN index on `after` (disabled plans are still chosen when they are the only ones).
_OPEN_DUE = f"""
CREATE OR REPLACE FUNCTION cronctl_open_due(due_by timestamptz)
{_OPENED}
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    locked text[] := '{{}}';
    due text[];
BEGIN
    IF EXISTS (SELECT 1 FROM cronctl_chains AS c WHERE c.ended_at IS NULL) THEN
        {_PLAN}
    END IF;
    due := ARRAY(SELECT j.name FROM cronctl_jobs AS j WHERE {_due_rows("due_by")});
    FOR row_name, row_spec, row_state IN
        SELECT j.name, j.spec, j.state FROM cronctl_jobs AS j
         WHERE j.name = ANY(due) AND {_due_rows("due_by")} ORDER BY j.name
           FOR UPDATE SKIP LOCKED{_OPENED_JOBS}{_OPENED_RUNS}
    IF cardinality(locked) > 0 THEN
        RETURN QUERY
            SELECT 'after'::text, j.name, NULL::jsonb, NULL::jsonb, NULL::text, NULL::jsonb, NULL::text,
                   NULL::timestamptz FROM cronctl_jobs AS j
             WHERE j.spec ? 'after' AND j.spec->'after' ?| locked ORDER BY j.name;
    END IF;{_OPENED_NOW}
END $$"""

MIGRATION: tuple[str, ...] = (_live_claims(_V8_LIVE, _V8_SETTINGS), _LOCK_NAMED, _LOCK_DUE,
                              _named_first(_V8_LIVE, _V8_SETTINGS), _DEPENDANTS, _OPEN_CHAINS,
                              _FIRED, _LOCK_META, _END_UNIT, _INSERT_RUN, _UPDATE_CLAIM, _END_RUN)
# Schema V9 (schema.py): the two functions that read live runs, replaced to read them by `live`;
# the unit's end and the fired keys, each with its one-row path.
MIGRATION_V9: tuple[str, ...] = (_live_claims(_V9_LIVE, _V9_SETTINGS), _named_first(_V9_LIVE, _V9_SETTINGS),
                                 _END_UNIT_V9, _FIRED_V9, _LOCK_DUE_V9, _LOCK_NAMED_V9)
# Schema V10: a unit's opening in one call. (V9's step-by-step readers keep their settings: with
# `enable_seqscan = off` the generic plan of `cronctl_lock_named` read 51 of 90 pages under the
# full test suite, tests/pg/test_pg_hot.py; they serve only units with chains to plan.)
MIGRATION_V10: tuple[str, ...] = (_OPEN_NAMED, _OPEN_DUE)

LIVE_ROWS = tuple[str, Any, Any, str | None, Any, str | None]

_CONTEXT = "\nCONTEXT:  "


def call(conn: Connection, sql: str, params: tuple[Any, ...] = ()) -> psycopg.Cursor[TupleRow]:
    """`conn.execute` of a call of one of these functions. An error raised inside it is raised as
    the client's own statement raised it: the same class (so the same SQLSTATE, mapped the same
    way: a lock timeout, a unique violation), and the same text, without the CONTEXT lines
    libpq adds for a function (a store error stays the one line the user saw before)."""
    try:
        return conn.execute(sql, params)
    except psycopg.Error as exc:
        text = str(exc)
        if _CONTEXT not in text:
            raise
        raise type(exc)(text.split(_CONTEXT, 1)[0]) from None


def lock_named(conn: Connection, names: list[str]) -> list[LIVE_ROWS]:
    """The named job rows locked (FOR UPDATE, name order) and their live runs: see `_LOCK_NAMED`."""
    return call(conn, "SELECT * FROM cronctl_lock_named(%s::text[])", (names,)).fetchall()


def lock_due(conn: Connection, due_by: datetime | None) -> list[LIVE_ROWS]:
    """The due job rows locked (SKIP LOCKED) and their live runs: see `_LOCK_DUE`."""
    return call(conn, "SELECT * FROM cronctl_lock_due(%s::timestamptz)", (due_by,)).fetchall()


def named_first(conn: Connection, names: list[str]) -> tuple[list[str], bool]:
    """The chains of the named jobs' live runs, and whether any job runs after one of them."""
    row = call(conn, "SELECT * FROM cronctl_named_first(%s::text[])", (names,)).fetchone()
    assert row is not None
    return [str(chain_id) for chain_id in row[0]], bool(row[1])


def dependants(conn: Connection, names: list[str]) -> list[str]:
    return [str(row[0]) for row in call(conn, "SELECT * FROM cronctl_dependants(%s::text[])", (names,)).fetchall()]


def open_chains(conn: Connection) -> list[tuple[str, dict[str, Any]]]:
    return [(str(chain_id), chain) for chain_id, chain in call(conn, "SELECT * FROM cronctl_open_chains()").fetchall()]


def fired(conn: Connection, keys: list[tuple[str, datetime | None, int]]
          ) -> tuple[set[tuple[str, datetime, int]], dict[str, datetime]]:
    """The keys that already have their run, and the claimed jobs' high-water marks (fired.py)."""
    found: set[tuple[str, datetime, int]] = set()
    marks: dict[str, datetime] = {}
    for job, slot, attempt, mark in call(
            conn, "SELECT * FROM cronctl_fired(%s::text[], %s::timestamptz[], %s::integer[])",
            ([k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys])).fetchall():
        if attempt is None:
            marks[job] = mark
        else:
            found.add((job, slot, attempt))
    return found, marks


def end_unit(conn: Connection, updates: list[tuple[Any, ...]], fired_slots: list[tuple[str, datetime]],
             meta: dict[str, Any], host_id: str, audit: list[list[Any]]) -> None:
    """The changed job rows (state, next_run_at, wake_at, paused, name), the raised high-water
    marks, the changed meta rows (key: value as Jsonb) and the audit rows as columns (event,
    job, run_id, slot, fence, reason, details): `_END_UNIT`."""
    jobs = [list(column) for column in zip(*updates, strict=True)] if updates else [[]] * 5
    written = set(jobs[4])
    fired = [(job, slot) for job, slot in fired_slots if job in written]  # raised in the row's own update
    marked = [(job, slot) for job, slot in fired_slots if job not in written]
    call(conn, "SELECT cronctl_end_unit(%s::jsonb[], %s::timestamptz[], %s::timestamptz[], %s::boolean[], %s::text[],"
         " %s::text[], %s::timestamptz[], %s::text[], %s::timestamptz[], %s::text[], %s::jsonb[], %s::text,"
         " %s::text[], %s::text[], %s::text[], %s::timestamptz[], %s::bigint[], %s::text[], %s::jsonb[])",
         (*jobs, [job for job, _ in fired], [slot for _, slot in fired], [job for job, _ in marked],
          [slot for _, slot in marked], list(meta), list(meta.values()), host_id, *(audit or [[]] * 7)))


def insert_run(conn: Connection, values: tuple[Any, ...]) -> None:
    """One run row: (run_id, job, slot, trigger, attempt, exclusive, state, late, host_id, boot_id,
    pid, pid_start, claimed_at, due_at, dispatched_at, lease_expires_at, claim)."""
    call(conn, "SELECT cronctl_insert_run(%s::text, %s::text, %s::timestamptz, %s::text, %s::integer, %s::boolean,"
         " %s::text, %s::boolean, %s::text, %s::text, %s::integer, %s::double precision, %s::timestamptz,"
         " %s::timestamptz, %s::timestamptz, %s::timestamptz, %s::jsonb)", values)


def update_claim(conn: Connection, values: tuple[Any, ...]) -> None:
    """(run_id, claim, state, pid, pid_start, dispatched_at, lease_expires_at)."""
    call(conn, "SELECT cronctl_update_claim(%s::text, %s::jsonb, %s::text, %s::integer, %s::double precision,"
         " %s::timestamptz, %s::timestamptz)", values)


def end_run(conn: Connection, values: tuple[Any, ...]) -> None:
    """(run_id, state, reason, fault, exit_code, signal, duration_s, output_tail, ended_at, record)."""
    call(conn, "SELECT cronctl_end_run(%s::text, %s::text, %s::text, %s::text, %s::integer, %s::integer,"
         " %s::double precision, %s::text, %s::timestamptz, %s::jsonb)", values)


def lock_meta(conn: Connection, keys: list[str]) -> list[tuple[Any, ...]]:
    return call(conn, "SELECT * FROM cronctl_lock_meta(%s::text[])", (keys,)).fetchall()


@dataclass
class Opened:
    """What a unit's opening call found (`_OPEN_NAMED`, `_OPEN_DUE`)."""

    rows: list[LIVE_ROWS]  # the job rows locked, then their live runs: as `lock_named` returns them
    meta: list[tuple[str, Any]]  # the meta rows locked: (key, value)
    after: list[str]  # the dependants of the jobs locked (the claim write's)
    at: datetime  # the database clock once every lock was held


def open_named(conn: Connection, names: list[str], meta_keys: list[str]) -> Opened | None:
    """A named unit opened (`_OPEN_NAMED`); None: nothing done, its chains are to plan first."""
    return _opened(call(conn, "SELECT * FROM cronctl_open_named(%s::text[], %s::text[])",
                        (names, meta_keys)).fetchall())


def open_due(conn: Connection, due_by: datetime | None) -> Opened | None:
    """The claim write opened (`_OPEN_DUE`); None: nothing done, a chain is open."""
    return _opened(call(conn, "SELECT * FROM cronctl_open_due(%s::timestamptz)", (due_by,)).fetchall())


def _opened(rows: list[tuple[Any, ...]]) -> Opened | None:
    if rows[0][0] == "plan":
        return None
    opened = Opened([], [], [], rows[-1][7])
    for kind, name, spec, state, run_id, claim, host, _ in rows:
        if kind == "job":
            opened.rows.append((name, spec, state, None, None, None))
        elif kind == "run":
            opened.rows.append((name, None, None, run_id, claim, host))
        elif kind == "meta":
            opened.meta.append((name, state))
        elif kind == "after":
            opened.after.append(name)
    return opened
