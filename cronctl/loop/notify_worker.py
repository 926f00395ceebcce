"""Delivering owed notifications off the tick (SPEC §12): a worker thread and a bounded pool.

The tick thread only hands over what the store says is owed (`NotifyPump.pump`, a look at
the document it already holds); the worker leases a batch for one try (one short store
write), sends each on a pool of POOL_SIZE threads, each try bounded by notify_send.TIMEOUT,
and settles the outcomes in one write: a receiver that hangs or refuses delays no fire.

On PostgreSQL the worker itself asks the database what is owed (every POLL_EVERY s): any
live loop delivers, and the lease on each entry makes each key go out once among them.
The health pass (`stale`) also runs from the pump: a job found late or wedged owes
`stale` once, until it is healthy again. It looks at the jobs the loop keeps in memory, and
these include a job with targets whose slot plus grace has passed unclaimed (loop/late_watch.py);
on PostgreSQL it asks the database for the same (`PgLeaseStore.watched(late_by=...)`).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from cronctl.clock import Clock
from cronctl.durations import parse_duration
from cronctl.jobs.health import job_health
from cronctl.jobs.state import JobView
from cronctl.loop.notify_send import TIMEOUT, send
from cronctl.store.leases import LeaseStore
from cronctl.store.notify_owed import ALERTS, Item, Result, RetryPolicy, owed_items, targets_of

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor


class LateWatcher(Protocol):
    def watch_late(self, now: datetime) -> bool: ...


class Engine(Protocol):
    """What the pump needs of the engine (engine.py imports this module, not the reverse)."""

    @property
    def doc(self) -> dict[str, Any]: ...

    @property
    def due(self) -> LateWatcher: ...

    ctx: Any
POOL_SIZE = 8
MAX_IN_FLIGHT = 64
# A taken entry's lease: longer than it can wait for a pool thread (MAX_IN_FLIGHT / POOL_SIZE
# rounds of tries that all hang) plus its own try, so only a dead loop's lease lapses.
LEASE_S = (MAX_IN_FLIGHT // POOL_SIZE + 1) * TIMEOUT + 30.0
POLL_EVERY = 2.0
HEALTH_EVERY = 5.0
# CRONCTL_NOTIFY_BACKOFF=FIRST,CAP,GIVE_UP (durations) replaces 10s,1h,24h: tests, and sites
# whose receivers want another rhythm.
BACKOFF_ENV = "CRONCTL_NOTIFY_BACKOFF"

Sender = Callable[[Item], Result]


def policy_from_env(env: Mapping[str, str]) -> RetryPolicy:
    text = env.get(BACKOFF_ENV)
    if not text:
        return RetryPolicy()
    try:
        first, cap, give_up = (parse_duration(part.strip()) for part in text.split(","))
    except (ValueError, Exception):
        print(f"cronctl: warning: ${BACKOFF_ENV}={text!r} is not FIRST,CAP,GIVE_UP (e.g. 10s,1h,24h); "
              "using 10s,1h,24h", file=sys.stderr)
        return RetryPolicy()
    return RetryPolicy(first, cap, give_up)


class NotifyWorker:
    """The delivery thread: take, send on the pool, settle."""

    def __init__(self, leases: LeaseStore, clock: Clock, by: str, policy: RetryPolicy | None = None,
                 sender: Sender = send, poll: Callable[[], list[Item]] | None = None,
                 health: Callable[[], object] | None = None) -> None:
        self.leases, self.clock, self.by = leases, clock, by
        self.policy = policy or policy_from_env(os.environ)
        self.sender, self.poll, self.health = sender, poll, health
        self._last_health = float("-inf")
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._offered: dict[tuple[str, str], None] = {}
        self._in_flight: set[tuple[str, str]] = set()
        self._results: list[Result] = []
        # Made with the first notification to send: concurrent.futures (and the logging it
        # imports) cost a loop's start several ms, and most loops never send one.
        self._pool: ThreadPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self._last_poll = float("-inf")
        self._complained = False
        self._stopped = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cronctl-notify-worker", daemon=True)
        self._thread.start()

    def stop(self, wait: float = 2.0) -> None:
        """Settle what already came back; tries still out are not waited for past `wait` (their
        entries stay owed, and the next loop sends them again: at least once)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=wait)
        with self._lock:
            pool, self._stopped = self._pool, True
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        try:
            self._settle()
        except Exception as exc:  # unsettled tries stay owed: the next loop sends them again
            self._complain(exc)

    def drain(self, ctx: Any, timeout: float) -> None:
        """A clean stop: offer everything owed, wait up to `timeout` for it to go out, then stop."""
        deadline = self.clock.monotonic() + timeout
        try:
            self.offer(ctx.leases.notify_due(self.clock.now()))
        except Exception as exc:
            self._complain(exc)
        while self.clock.monotonic() < deadline and self._busy():
            self._stop.wait(0.05)
        self.stop(wait=max(0.0, deadline - self.clock.monotonic()))

    def _busy(self) -> bool:
        with self._lock:
            return bool(self._offered or self._in_flight or self._results)

    def busy(self) -> bool:
        """Something offered, out or unsettled (then the loop keeps its one-second tick)."""
        return self._busy()

    def offer(self, items: list[Item]) -> None:
        """From the tick thread: these are owed and due (duplicates and tries in flight are ignored)."""
        with self._lock:
            fresh = [(i.job, i.key) for i in items if (i.job, i.key) not in self._in_flight]
            self._offered.update(dict.fromkeys(fresh))
        if fresh:
            self._wake.set()

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._wait_for())
            self._wake.clear()
            try:
                self._settle()
                self._poll_if_due()
                self._dispatch()
            except Exception as exc:  # the store out of reach: everything stays owed, tried again
                self._complain(exc)

    def _wait_for(self) -> float | None:
        """Woken by an offer, a try's end and stop; on its own every second only while it
        polls (PostgreSQL) or has something to settle, send or retry: an idle JSON loop's
        worker sleeps (its wake-ups were a fifth of that loop's CPU)."""
        if self.poll is not None or self.health is not None or self._busy():
            return 1.0
        return None

    def _poll_if_due(self) -> None:
        """On PostgreSQL: what is owed, and the health pass, asked of the database from here
        (the tick thread's document there holds no jobs)."""
        now = self.clock.monotonic()
        if self.poll is not None and now - self._last_poll >= POLL_EVERY:
            self._last_poll = now
            self.offer(self.poll())
        if self.health is not None and now - self._last_health >= HEALTH_EVERY:
            self._last_health = now
            self.health()

    def _dispatch(self) -> None:
        with self._lock:
            wanted = self._next_batch()
        if not wanted:
            return
        taken = self.leases.notify_take(wanted, self.by, self.clock.now(), LEASE_S)
        with self._lock:
            self._in_flight.update((item.job, item.key) for item in taken)
        pool = self._executor()
        for item in taken:
            pool.submit(self._try, item)

    def _executor(self) -> ThreadPoolExecutor:
        """The sending pool, made the first time it is needed (never after stop: a stopped
        pool's submit raises, as it always did)."""
        with self._lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(max_workers=POOL_SIZE, thread_name_prefix="cronctl-notify")
                if self._stopped:
                    self._pool.shutdown(wait=False, cancel_futures=True)
            return self._pool

    def _next_batch(self) -> list[tuple[str, str]]:
        """Up to the room left, one entry per job with none in flight, in the order offered:
        one job's notifications arrive in the order they were owed (a ping's /start, then
        its /fail), while different jobs' go out in parallel. Called under the lock."""
        room = MAX_IN_FLIGHT - len(self._in_flight)
        busy = {job for job, _ in self._in_flight}
        wanted: list[tuple[str, str]] = []
        for key in list(self._offered):
            if len(wanted) >= room:
                break
            if key[0] in busy:
                continue
            busy.add(key[0])
            wanted.append(key)
            del self._offered[key]
        return wanted

    def _try(self, item: Item) -> None:
        try:
            result = self.sender(item)
        except Exception as exc:  # send() never raises; a test's sender might
            result = Result(item.job, item.key, "retry", f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._results.append(result)
        self._wake.set()

    def _settle(self) -> None:
        with self._lock:
            results, self._results = self._results, []
        if not results:
            return
        try:
            self.leases.notify_settle(results, self.clock.now(), self.policy)
        except Exception:
            with self._lock:  # kept: settled on the next round
                self._results = results + self._results
            raise
        with self._lock:
            self._in_flight.difference_update((r.job, r.key) for r in results)

    def _complain(self, exc: Exception) -> None:
        if not self._complained:
            self._complained = True
            print(f"cronctl: notifications wait: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


class NotifyPump:
    """The tick thread's side: hand over what is owed, and the health pass that raises `stale`."""

    def __init__(self, worker: NotifyWorker, clock: Clock, worker_asks_store: bool) -> None:
        self.worker, self.clock, self.worker_asks_store = worker, clock, worker_asks_store
        self._seen: dict[str, Any] | None = None
        self._last_offer = float("-inf")
        self._last_health = float("-inf")

    def pump(self, engine: Engine) -> None:
        if self.worker_asks_store:
            return  # the worker asks the database itself
        doc = engine.doc
        mono = self.clock.monotonic()
        if doc is not self._seen or mono - self._last_offer >= 1.0:
            self._seen, self._last_offer = doc, mono
            self.worker.offer(owed_items(doc, self.clock.now(), leases=False))
        if mono - self._last_health >= HEALTH_EVERY:
            self._last_health = mono
            now = self.clock.now()
            if engine.due.watch_late(now):  # a job may have gone late unwritten: now in memory
                doc = engine.doc
            health_pass(engine.ctx.leases, doc, now)


def health_pass(leases: LeaseStore, doc: dict[str, Any], now: datetime) -> int:
    """Jobs with targets the loop watches: late or wedged -> `stale` once; healthy -> ready for the next."""
    raised = 0
    for name, entry in list(doc["jobs"].items()):
        if not targets_of(entry):
            continue
        try:
            health = job_health(JobView.from_entry(entry), now, lambda _o: True, lambda _c: False)
        except Exception:
            continue  # a bad entry: status and doctor say so
        stale_since = ((entry.get("state") or {}).get(ALERTS) or {}).get("stale_since")
        if health.state in ("late", "wedged") and not stale_since:
            raised += leases.notify_stale(name, (health.state, health.reason), now)
        elif not health.stale and stale_since:
            leases.notify_stale(name, None, now)
    return raised


# A clean stop gives what is owed this long to go out (a try still out then is the next loop's).
STOP_DRAIN_S = 3.0


def start_notifications(ctx: Any, engine: Any, by: str) -> NotifyWorker:
    """The loop's worker and the engine's pump; on PostgreSQL the worker asks the database."""
    leases = ctx.leases
    poll = health = None
    shared = ctx.cluster is not None  # a store of many loops: what is owed is asked of it
    if shared:
        def poll() -> list[Item]:
            return leases.notify_due(ctx.clock.now())  # type: ignore[no-any-return]

        def health() -> int:
            now = ctx.clock.now()
            return health_pass(leases, leases.watched(late_by=now), now)

    worker = NotifyWorker(leases, ctx.clock, by, poll=poll, health=health)
    worker.start()
    engine.notifications = NotifyPump(worker, ctx.clock, shared)
    return worker
