"""On PostgreSQL the loop counts its jobs only for the service manager's status line (issue 21):
a count reads every row, so it is made on the tick thread when the line was asked for, at most
once a minute, and asking never waits on the database."""

from __future__ import annotations

from datetime import datetime

from cronctl.clock import FakeClock
from cronctl.loop.cluster import JOB_COUNT_EVERY_S, ClusterDueIndex


class CountingCluster:
    def __init__(self) -> None:
        self.jobs = 3
        self.counts = 0
        self.instants = 0

    def next_instants(self) -> tuple[datetime | None, datetime | None, int]:
        self.instants += 1
        return None, None, 0

    def job_count(self) -> int:
        self.counts += 1
        return self.jobs


def test_the_jobs_are_counted_only_once_the_status_line_asked() -> None:
    clock, cluster = FakeClock(), CountingCluster()
    due = ClusterDueIndex(cluster, clock.monotonic)  # type: ignore[arg-type]
    for _ in range(5):
        due.invalidate()
        due.refresh()
    assert (cluster.instants, cluster.counts) == (5, 0)  # the instants after each write count nothing
    assert due.job_count == 0 and cluster.counts == 0  # asking is answered from memory
    due.refresh()
    assert cluster.counts == 1 and due.job_count == 3


def test_the_count_is_made_again_at_most_once_a_minute() -> None:
    clock, cluster = FakeClock(), CountingCluster()
    due = ClusterDueIndex(cluster, clock.monotonic)  # type: ignore[arg-type]
    assert due.job_count == 0
    due.refresh()
    cluster.jobs = 7
    for _ in range(3):
        clock.advance(JOB_COUNT_EVERY_S / 4)
        assert due.job_count == 3
        due.refresh()
    assert cluster.counts == 1
    clock.advance(JOB_COUNT_EVERY_S / 4)
    due.refresh()
    assert cluster.counts == 2 and due.job_count == 7
