"""`apply_file` of N new jobs on PostgreSQL ($CRONCTL_TEST_PG_URL, a fresh database), made ahead as the
`apply` command makes a big file (the idle thread): wall and CPU time of each phase, those before the
write's transaction (load, prepare) and those in it. Usage: python write_phases.py [N] (from the
repository's root)."""
import os, sys, time, tempfile, uuid
from pathlib import Path
import psycopg
sys.path.insert(0, "bench")
from pg_apply_loops import big_file
from cronctl.store.pg import definitions as pgd
from cronctl.store.pg import audit as pga

url = os.environ["CRONCTL_TEST_PG_URL"]
name = f"prof_{uuid.uuid4().hex[:6]}"
with psycopg.connect(url, autocommit=True) as a:
    a.execute(f'CREATE DATABASE "{name}"')
db = url.rsplit("/", 1)[0] + "/" + name
work = Path(tempfile.mkdtemp())
f = big_file(work / "big.yaml", int(sys.argv[1]) if len(sys.argv) > 1 else 100000)
os.environ["CRONCTL_STORE"] = db
os.environ["CRONCTL_HOME"] = str(work / "home")
T = {}
def timed(label, fn):
    def w(*a, **k):
        t = time.perf_counter(); c = time.process_time()
        try:
            return fn(*a, **k)
        finally:
            T[label] = (time.perf_counter() - t, time.process_time() - c)
    return w
import cronctl.ops.definitions as od
od._execute_apply = timed("execute_apply", od._execute_apply)
od._audit_rows = timed("audit_rows", od._audit_rows)
pgd.PgEdit._copy = timed("copy_jobs", pgd.PgEdit._copy)
pgd.insert_audit_rows = timed("copy_audit", pga.insert_audit_rows)
pgd.load_jobs = timed("load_jobs_lock", pgd.load_jobs)
from cronctl.store.pg.auditlog import PgAuditLog
PgAuditLog.prepare = timed("audit_prepare", PgAuditLog.prepare)
import cronctl.ops.apply_ahead as aa
aa.prepare_new_jobs = timed("prepare", aa.prepare_new_jobs); od.prepare_new_jobs = aa.prepare_new_jobs
od.load_checked = timed("load", od.load_checked)
from cronctl.cli.session import open_context
ctx = open_context()
t = time.perf_counter()
from cronctl.cli.yield_cpu import in_idle_thread
plan = od.apply_file(ctx, str(f), ahead=in_idle_thread)
T["total"] = (time.perf_counter() - t, 0)
for k, v in T.items():
    print(f"{k:15} wall {v[0]*1000:8.0f} ms  cpu {v[1]*1000:8.0f} ms")
with psycopg.connect(url, autocommit=True) as a:
    a.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
