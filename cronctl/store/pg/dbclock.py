"""The database's clock, the one every host judges due times and leases by (MULTIHOST §5).

Skew is the database's time minus the local wall time at the midpoint of the round trip;
the midpoint is taken on the monotonic clock, so a local wall-clock step during the
query does not enter the figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cronctl.clock import Clock
from cronctl.store.pg.connect import Connection

# SPEC §9: a loop audits `cluster.clock_skew` when its skew exceeds this.
SKEW_AUDIT_THRESHOLD_S = 2.0


@dataclass(frozen=True)
class ClockReading:
    db_now: datetime
    round_trip_s: float
    skew_s: float  # database − local, seconds; positive: the database is ahead

    @property
    def worth_auditing(self) -> bool:
        return abs(self.skew_s) > SKEW_AUDIT_THRESHOLD_S


def read_db_clock(conn: Connection, clock: Clock) -> ClockReading:
    """One `clock_timestamp()` with the round trip measured around it, in its own short transaction."""
    wall_before = clock.now()
    mono_before = clock.monotonic()
    with conn.transaction():
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    round_trip = clock.monotonic() - mono_before
    assert row is not None and isinstance(row[0], datetime)
    db_now: datetime = row[0]
    local_mid = wall_before + timedelta(seconds=round_trip / 2)
    return ClockReading(db_now, round_trip, (db_now - local_mid).total_seconds())
