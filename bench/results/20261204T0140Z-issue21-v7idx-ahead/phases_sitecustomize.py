"""With PYTHONPATH=<this directory, as sitecustomize.py> and V7IDX_PHASES=<file>, a `cronctl apply`
process (as bench/pg_apply_loops.py starts it) appends the wall-clock instant of each phase to the
file: start, the parse, the new rows made ahead, the rows locked, the COPY of the jobs and of the
audit rows, exit. Compared with the bench's slots (seconds from the apply's start)."""
import sys, time, os
if "apply" in sys.argv and os.environ.get("V7IDX_PHASES"):
    _out = open(os.environ["V7IDX_PHASES"], "a")
    def mark(what):
        _out.write(f"{time.time():.3f} {what}\n"); _out.flush()
    mark("start")
    import atexit; atexit.register(lambda: mark("exit"))
    class _Hook:
        def find_module(self, *a): return None
    import builtins
    _imp = builtins.__import__
    done = set()
    def patch():
        try:
            import cronctl.ops.definitions as od, cronctl.store.pg.definitions as pgd, cronctl.ops.apply_ahead as aa
        except Exception:
            return False
        def wrap(mod, name):
            f = getattr(mod, name)
            def w(*a, **k):
                mark(name + " begin")
                try: return f(*a, **k)
                finally: mark(name + " end")
            setattr(mod, name, w)
        wrap(od, "load_checked"); wrap(od, "_execute_apply")
        wrap(od, "prepare_new_jobs")
        wrap(pgd.PgEdit, "write"); wrap(pgd, "insert_audit_rows"); wrap(pgd, "load_jobs")
        return True
    def imp(name, *a, **k):
        m = _imp(name, *a, **k)
        if not done and name == "cronctl.cli.yield_cpu":
            done.add(1); patch()
        return m
    builtins.__import__ = imp
