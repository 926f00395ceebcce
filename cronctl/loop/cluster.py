"""The loop's side of a PostgreSQL store (SPEC §9): one member of a leaderless cluster.

Every loop claims; the database arbitrates (store/pg/leases.py). What is left to the loop
is being a good member, and this module is that, through the store's `Cluster`
(store/cluster.py, on PostgreSQL store/pg/cluster.py):

- its row in `cronctl_loops`, registered at start and marked stopped at the end;
- one `beat` per tick, the whole idle cost: heartbeat, skew, the next due instants (fed
  to `ClusterDueIndex`, which the engine reads as the JSON loop's `DueIndex`), and
  whether requests or the healer need it;
- outages: when the database cannot be reached the loop stops claiming, keeps
  supervising, retries with capped backoff, says so once on stderr, and audits the
  outage when it ends; runs whose lease it could not renew are killed before it
  expires (the fence thread, loop/fence.py);
- the healer's view across hosts (`cluster_liveness`): a pid is judged only on its own
  host and boot; another host's run only by its lease on the database clock plus a margin;
- kill and force-run requests left in `cronctl_requests` by commands on any host.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cronctl.clock import Clock
from cronctl.errors import CronctlError
from cronctl.loop.heal import Liveness
from cronctl.models import AuditEvent
from cronctl.proc.identity import ProcIdentity, is_alive
from cronctl.store.claims import DEFAULT_LEASE
from cronctl.store.cluster import FORCE_RUN, OUTAGE_ERRORS, SKEW_AUDIT_THRESHOLD_S, Beat, Cluster, LoopIdentity, Request
from cronctl.timefmt import from_iso

if TYPE_CHECKING:
    from cronctl.loop.control import Controls

# SPEC §9: another host's run is reclaimed once its lease ended this long ago (database clock).
LEASE_MARGIN_S = 5.0
# The healer's full sweep (re-arming failed jobs) when no beat flagged anything.
SWEEP_EVERY_S = 10.0
# Retries after a failed beat: 0.1 s doubling to this cap, so a database that is back is
# seen within it (SPEC §9: a loop reconnects within 5 s).
BACKOFF_CAP_S = 2.0
# The service manager's status line counts the jobs at most this often (loop/notify.py sends it
# every 10 s or with each watchdog ping).
JOB_COUNT_EVERY_S = 60.0
# SPEC §9: skew is measured only from round trips shorter than this; a slow one (a stall that
# ended, a busy server) says more about the network than about the clocks.
SKEW_ROUND_TRIP_MAX_S = 0.5


class ClusterDueIndex:
    """The engine's `DueIndex` on PostgreSQL: the instants come from the database.

    Each beat feeds them; after the loop's own write (`invalidate`) the next `refresh`
    asks again. Nothing is ever pending here (the outbox is the JSON store's), so `doc`
    is an empty document.
    """

    def __init__(self, cluster: Cluster, monotonic: Callable[[], float]) -> None:
        self.cluster = cluster
        self.monotonic = monotonic
        self.next_due: datetime | None = None
        self.next_ahead: datetime | None = None
        self.ahead_count = 0
        self.doc: dict[str, Any] = {"jobs": {}}
        self._stale = True
        self._job_count = 0
        self._count_asked = False
        self._counted_at: float | None = None

    @property
    def job_count(self) -> int:
        """How many jobs (the service manager's status line), as last counted: asking never waits
        on the database (the watchdog's thread asks); the tick thread counts at its next refresh."""
        self._count_asked = True
        return self._job_count

    def feed(self, beat: Beat) -> None:
        self.next_due, self.next_ahead, self.ahead_count = beat.next_due, beat.next_ahead, beat.ahead_count
        self._stale = False

    def refresh(self) -> None:
        self._count_if_asked()
        if not self._stale:
            return
        self.next_due, self.next_ahead, self.ahead_count = self.cluster.next_instants()
        self._stale = False

    def _count_if_asked(self) -> None:
        """A count reads every row (and, while an `apply -f` is open, its uncommitted ones: issue
        21), so it is made only when the status line was asked for, at most every JOB_COUNT_EVERY_S."""
        mono = self.monotonic()
        if not self._count_asked or (self._counted_at is not None and mono - self._counted_at < JOB_COUNT_EVERY_S):
            return
        self._job_count = self.cluster.job_count()
        self._count_asked, self._counted_at = False, mono

    def invalidate(self) -> None:
        self._stale = True

    def watch_late(self, now: datetime) -> bool:
        """Nothing to keep: the health pass asks the database for late jobs (`PgLeaseStore.watched`)."""
        return False

    def steady(self) -> AbstractContextManager[None]:
        return nullcontext()  # each beat feeds the instants: nothing to look at again within a tick

    @property
    def watching(self) -> bool:
        """Always: the loop asks the database every beat (it has no idle spell on a store watch)."""
        return True

    @property
    def signature(self) -> None:
        return None


def cluster_liveness(host: str, boot: str, db_now: Callable[[], datetime], monotonic: Callable[[], float],
                     margin_s: float = LEASE_MARGIN_S) -> Liveness:
    """Owners and leases judged across hosts: a pid only on its own host and boot (an owner of
    this host from an earlier boot is dead); every lease on the database clock, plus the margin."""

    def owner_alive(owner: dict[str, Any]) -> bool:
        if owner.get("host", host) != host:
            return True  # its lease says whether it is gone
        if owner.get("boot_id") != boot or not owner.get("pid"):
            return False
        return is_alive(ProcIdentity(int(owner["pid"]), float(owner.get("start_time") or 0.0)))

    def lease_expired(claim: dict[str, Any]) -> bool:
        until = from_iso(claim.get("lease_until"))
        return until is None or until + timedelta(seconds=margin_s) < db_now()

    return Liveness(owner_alive=owner_alive, lease_expired=lease_expired, monotonic=monotonic)


@dataclass
class Outage:
    """The database is out of reach: since when, and when to try again."""

    since_mono: float
    error: str
    retry_at: float
    delay: float


class ClusterMember:
    """This loop in the cluster (see the module doc). Used on the tick thread only."""

    def __init__(self, cluster: Cluster, clock: Clock, host: str, boot: str, pid: int, pid_start: float,
                 home: str, say: Callable[[str], None] = lambda message: None,
                 lease_s: float = DEFAULT_LEASE) -> None:
        self.store = cluster
        self.lease_s = lease_s
        self.clock = clock
        self.me = LoopIdentity(uuid.uuid4(), host, boot, pid, pid_start)
        self.home = home
        self.due = ClusterDueIndex(cluster, clock.monotonic)
        self.skew_s = 0.0
        self.outage: Outage | None = None
        self.needs_healing = True  # the first tick sweeps
        self.requests_waiting = False
        self._last_sweep = clock.monotonic()
        self._skew_audited = False
        self._say = say

    # --- life --------------------------------------------------------------------------

    def register(self) -> None:
        self.store.register(self.me, self.home)

    def stop(self) -> None:
        try:
            self.store.mark_stopped(self.me)
        except OUTAGE_ERRORS as exc:  # its heartbeat ages: `status` shows it unreachable, then forgets it
            print(f"cronctl: could not mark this loop stopped in the store: {exc}", file=sys.stderr)

    def db_now(self) -> datetime:
        """The database's clock as this loop knows it (local time plus the measured skew)."""
        return self.clock.now() + timedelta(seconds=self.skew_s)

    def liveness(self) -> Liveness:
        return cluster_liveness(self.me.host_id, self.me.boot_id, self.db_now, self.clock.monotonic)

    # --- the beat ------------------------------------------------------------------------

    def beat(self) -> bool:
        """One tick's query. False while the database is out of reach (the tick claims nothing)."""
        mono = self.clock.monotonic()
        if self.outage is not None and mono < self.outage.retry_at:
            return False
        wall_before = self.clock.now()
        try:
            beat = self.store.beat(self.me, self.skew_s, LEASE_MARGIN_S, self.home)  # registers again if gone
        except OUTAGE_ERRORS as exc:
            self._lost(mono, exc)
            return False
        round_trip = self.clock.monotonic() - mono
        if round_trip < SKEW_ROUND_TRIP_MAX_S:
            self._measured(beat.db_now, wall_before + timedelta(seconds=round_trip / 2), round_trip)
        self._back(mono)
        self.due.feed(beat)
        self.requests_waiting = beat.requests_waiting
        self.needs_healing = self.needs_healing or beat.needs_healing
        if mono - self._last_sweep >= SWEEP_EVERY_S:
            self.needs_healing = True
        return True

    def healed(self) -> None:
        self.needs_healing = False
        self._last_sweep = self.clock.monotonic()

    def _measured(self, db_now: datetime, local_mid: datetime, round_trip: float) -> None:
        self.skew_s = (db_now - local_mid).total_seconds()
        over = abs(self.skew_s) > SKEW_AUDIT_THRESHOLD_S
        if over and not self._skew_audited:
            self.store.audit(self.me, AuditEvent.CLUSTER_CLOCK_SKEW, skew_s=round(self.skew_s, 3),
                             round_trip_s=round(round_trip, 4))
            print(f"cronctl: warning: this host's clock is {self.skew_s:+.1f}s off the database's; "
                  "due times and leases follow the database", file=sys.stderr)
        self._skew_audited = over

    def _lost(self, mono: float, exc: BaseException) -> None:
        words = _words(exc)
        if self.outage is None:
            self.outage = Outage(mono, words, mono, 0.1)
            print(f"cronctl: warning: the PostgreSQL store is out of reach ({words}); the loop keeps supervising "
                  "its runs, claims nothing, and retries", file=sys.stderr, flush=True)
        else:
            self.outage.error = words
            self.outage.delay = min(BACKOFF_CAP_S, self.outage.delay * 2)
        self.outage.retry_at = mono + self.outage.delay

    def _back(self, mono: float) -> None:
        if self.outage is None:
            return
        lasted = mono - self.outage.since_mono
        error = self.outage.error
        self.outage = None
        self.needs_healing = True
        self.due.invalidate()
        self._say(f"cronctl: the PostgreSQL store is reachable again after {lasted:.1f}s")
        self.store.audit(self.me, AuditEvent.CLUSTER_STORE_OUTAGE, unreachable_s=round(lasted, 3), error=error)

    # --- sessions stuck on a gone client ----------------------------------------------------

    def end_stuck_sessions(self) -> int:
        """The healer's first step: end the sessions whose client is gone mid-protocol and
        whose transaction outlived this loop's lease plus margin (store/pg/stuck.py)."""
        ended = self.store.end_stuck_sessions(self.me, self.lease_s + LEASE_MARGIN_S)
        for session in ended:
            print(f"cronctl: warning: ended PostgreSQL session {session.pid} ({session.application_name}): it has "
                  f"waited on its client inside a transaction open {session.transaction_s:g}s, longer than the "
                  "lease plus margin (a stalled network); its transaction was rolled back",
                  file=sys.stderr, flush=True)
        return len(ended)

    # --- requests --------------------------------------------------------------------------

    def serve_requests(self, controls: Controls) -> int:
        """Take the requests this loop may serve and answer each (within a tick of the beat)."""
        if not self.requests_waiting:
            return 0
        taken = self.store.take_requests(self.me.host_id, self.me.loop_id)
        for request in taken:
            self.store.answer(request.id, _serve(controls, request))
        self.requests_waiting = False
        return len(taken)


def _serve(controls: Controls, request: Request) -> str:
    """The outcome text the asking command shows: `started RUN_ID`, `skipped: ...`, `killed RUN_ID`."""
    try:
        if request.kind == FORCE_RUN:
            batch = controls.force(request.job)
            if not batch.claims:
                return f"skipped: job '{request.job}' is running and its overlap is skip"
            return f"started {batch.claims[0].run_id}"
        if request.run_id and controls.kill_run(request.run_id, "operator"):
            return f"killed {request.run_id}"
        return f"not running here: {request.run_id}"
    except CronctlError as exc:
        return f"refused: {exc}"
    except Exception as exc:  # answered all the same: the asking command must not wait out its timeout
        print(f"cronctl: error serving a {request.kind} request: {type(exc).__name__}: {exc}", file=sys.stderr)
        return f"refused: the loop could not serve it: {type(exc).__name__}: {exc}"


def _words(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
