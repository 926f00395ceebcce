"""Loaded by a loop started by bench/hop_profile.py (this directory first on PYTHONPATH):
wraps the steps of a chain hop to append `wall-clock seconds, event, detail` lines to
$CRONCTL_HOP_TRACE, so a hop's time can be cut at each step. Does nothing without it."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

_PATH = os.environ.get("CRONCTL_HOP_TRACE")
_FD = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600) if _PATH else -1


def note(event: str, detail: str = "") -> None:
    os.write(_FD, f"{time.time():.6f} {event} {threading.current_thread().name} {detail}\n".encode())


def wrap(owner: Any, name: str, event: str, detail: Callable[..., str] | None = None, after: bool = True) -> None:
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def traced(*args: Any, **kwargs: Any) -> Any:
        note(f"{event}+", detail(*args, **kwargs) if detail else "")
        try:
            return inner(*args, **kwargs)
        finally:
            if after:
                note(f"{event}-")

    setattr(owner, name, traced)


def install() -> None:
    """The wraps; CRONCTL_HOP_FINE=1 adds each step of a warm child's adoption."""
    from cronctl.loop import engine, hop_start
    from cronctl.proc import gate, reaping, shared, termination, warm, watcher
    from cronctl.store import json_unit, leases

    orig_collect = reaping.collect_exit

    def collect_exit(run: Any, now: float) -> bool:
        ended = orig_collect(run, now)
        if ended:
            note("exit+", run.req.job)
        return ended

    reaping.collect_exit = collect_exit
    watcher.collect_exit = collect_exit  # type: ignore[attr-defined]
    wrap(watcher.Watcher, "_finalize", "finalize", lambda self, run: run.req.job, after=False)
    orig_take = termination.ScanQueue.take

    def take(self: Any, now: float, more_may_come: bool = True) -> Any:
        if not self._asked:
            return orig_take(self, now, more_may_come)
        note("scan+", str(len(self._asked)))
        found = orig_take(self, now, more_may_come)
        note("scan-", str(len(found)))
        return found

    termination.ScanQueue.take = take  # type: ignore[method-assign]
    wrap(engine.Engine, "tick", "tick")
    wrap(engine.Engine, "record_results", "record")
    wrap(leases.UnitLeaseStore, "finish_many", "finish")
    wrap(leases.UnitLeaseStore, "claim_chain", "claim")
    wrap(json_unit.JsonUnits, "_after_commit", "aftercommit")
    wrap(hop_start.HopStart, "__call__", "adopt", lambda self, claims: str(len(claims)))
    wrap(shared.SharedRuns, "open_gates", "gates")
    wrap(gate.Gate, "write_go", "go", after=False)
    wrap(warm.WarmChild, "adopt", "warmadopt", after=False)
    if os.environ.get("CRONCTL_HOP_FINE"):
        from cronctl.loop import engine as eng
        from cronctl.proc import supervisor, warm_pool
        wrap(supervisor, "preflight", "preflight")
        wrap(warm_pool, "open_run_log", "openlog")
        wrap(warm_pool.WarmPool, "_hand_over", "handover")
        wrap(warm_pool, "preface", "preface")
        wrap(eng.Engine, "request_of", "requestof")
        wrap(eng.Engine, "now_active", "nowactive")
    orig_fsync = os.fsync

    def fsync(fd: Any) -> None:
        note("fsync+")
        try:
            orig_fsync(fd)
        finally:
            note("fsync-")

    os.fsync = fsync


if _FD >= 0:
    install()


def profile_hops(path: str) -> None:
    """CRONCTL_HOP_CPROFILE=PATH: cProfile of every record_results (the finish, the hop's
    claim, the gates), written to PATH after each."""
    import cProfile

    from cronctl.loop import engine

    profiler = cProfile.Profile()
    inner = engine.Engine.record_results

    def record_results(self: Any) -> int:
        if not any(r.run_id in self.active and self.active[r.run_id].job == "r"
                   for r in list(self._pending.results.queue)):
            return inner(self)
        profiler.enable()
        try:
            return inner(self)
        finally:
            profiler.disable()
            profiler.dump_stats(path)

    engine.Engine.record_results = record_results  # type: ignore[method-assign]


if os.environ.get("CRONCTL_HOP_CPROFILE"):
    profile_hops(os.environ["CRONCTL_HOP_CPROFILE"])


if os.environ.get("CRONCTL_HOP_SWITCH"):
    import sys

    sys.setswitchinterval(float(os.environ["CRONCTL_HOP_SWITCH"]))
