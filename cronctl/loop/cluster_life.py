"""A loop's start and stop on PostgreSQL where they differ from the JSON store's (SPEC §9).

- At start: the lease must leave room for the self-fence of every job (`check_cluster_lease`),
  and the fence thread is started (`start_self_fence`). A connection lost meanwhile (a
  backend terminated, the server restarting) is the plain "cannot reach" error before the
  loop announces itself (`check_store_at_start`), and a warning after: the first heal is
  then left to the next tick's (`first_heal`), as a tick rides out any outage.
- At stop (SIGTERM), possibly during an outage: the runs are ended at once, without waiting
  for the tick thread or the database; what the loop can still record it records, each
  write bounded by its deadline, and the first failure ends the writing: what is left is
  reclaimed by the other loops, as after any outage (`ClusterStop`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cronctl.context import Context
from cronctl.loop.cluster import ClusterMember
from cronctl.loop.engine import Engine
from cronctl.loop.fence import SelfFence, check_lease
from cronctl.models import DEFAULT_KILL_GRACE
from cronctl.store.cluster import CONNECTION_LOST, OUTAGE_ERRORS, StoreUnreachableError


def check_cluster_lease(ctx: Context, lease_s: float) -> None:
    """LeaseTooShortError when `--lease` is shorter than the self-fence of some job needs (loop/fence.py)."""
    graces = {view.spec.name: view.spec.kill_grace for view in ctx.leases.jobs()}
    check_lease(lease_s, graces, DEFAULT_KILL_GRACE)


@contextmanager
def refused_start_on_outage() -> Iterator[None]:
    """Around what a loop does on the store before it announces itself: a connection lost
    meanwhile is StoreUnreachableError (exit 1, one line), never an internal error."""
    try:
        yield
    except CONNECTION_LOST as exc:
        raise StoreUnreachableError(f"cannot reach the PostgreSQL store: {_first_line(exc)}; "
                                    "the loop did not start") from exc


def check_store_at_start(ctx: Context, lease_s: float) -> None:
    """Reachable, of a schema this cronctl knows, with room for the self-fence."""
    with refused_start_on_outage():
        ctx.leases.has_job("")  # reachable, and its schema is one this cronctl knows (else a clear error)
        check_cluster_lease(ctx, lease_s)


def first_heal(heal: Callable[[], object]) -> None:
    """The heal before the first tick; an outage meanwhile leaves it to the tick's next heal."""
    try:
        heal()
    except CONNECTION_LOST as exc:
        print(f"cronctl: warning: the PostgreSQL store is out of reach ({_first_line(exc)}); the first heal "
              "waits for the next tick", file=sys.stderr, flush=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def start_self_fence(engine: Engine, lease_s: float, monotonic: Callable[[], float]) -> SelfFence:
    def end_run(run_id: str) -> None:
        run = engine.active.get(run_id)
        if engine.supervisor.kill(run_id, "self_fenced"):
            print(f"cronctl: warning: run {run_id} of {run.job if run else '?'} ended: the PostgreSQL store has not "
                  "confirmed its lease in time (self-fence)", file=sys.stderr, flush=True)

    fence = SelfFence(lease_s, monotonic, end_run)
    fence.start()
    return fence


@dataclass
class Stopped:
    recorded: int  # runs ended and recorded
    store_answered: bool  # False: the store failed meanwhile; the rest is left for reclaim


def stop_cluster_loop(engine: Engine, cluster: ClusterMember, tick: threading.Thread | None,
                      tick_lock: threading.Lock, join_s: float) -> Stopped:
    """SIGTERM on PostgreSQL (see the module doc): runs end within their kill_grace, whatever
    the store does; the loop waits on the store no longer than one deadline per write."""
    back = engine.close_held_gates()  # nothing of these ran; their claims go back if the store answers
    engine.supervisor.shutdown("shutdown", wait=0)  # every run is being ended now, beside a blocked tick
    if tick is not None:
        tick.join(timeout=join_s)  # a tick waiting on the store returns by its round trip's deadline
    if engine.fence is not None:
        engine.fence.stop()
    # A tick still blocked past its deadline (it should not be) leaves the store alone: no writes then.
    locked = tick_lock.acquire(timeout=join_s)
    try:
        answered = locked and cluster.outage is None
        if answered:
            answered = _try(lambda: engine.hand_back(back, "shutdown"))
        for held in back:
            engine.discard(held.run_id)
        graces = [run.spec.kill_grace for run in list(engine.active.values())]
        engine.supervisor.shutdown("shutdown", wait=max(graces, default=0.0) + engine.options.drain_timeout + 10.0)
        recorded: list[int] = []
        if answered:
            engine.end_quiet()
            answered = _try(lambda: recorded.append(engine.record_results()))
        if answered:
            engine.drop_delivered()
            cluster.stop()
    finally:
        if locked:
            tick_lock.release()
    return Stopped(sum(recorded), answered)


def _try(write: Callable[[], object]) -> bool:
    """One write at stop; False (said on stderr) when the store did not take it."""
    try:
        write()
        return True
    except OUTAGE_ERRORS as exc:
        print(f"cronctl: the PostgreSQL store did not take the loop's last writes ({exc}); the other loops "
              "reclaim what is left", file=sys.stderr, flush=True)
        return False
