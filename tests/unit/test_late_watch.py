"""SPEC §12: a job that merely went late (nothing written: its slot passed unclaimed) is
found by the loop's health pass on the JSON store, which keeps only watched jobs in memory.

The loop reads the store again only once a job with targets may have turned late (its slot
plus grace, the grace at least the default's floor, has passed); a store whose jobs are on
time is never read for this.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from cronctl.jobs.state import entry_from, new_state
from cronctl.loop import due
from cronctl.loop.late_watch import late_bound
from cronctl.loop.notify_worker import health_pass
from cronctl.models import JobSpec
from cronctl.paths import Paths
from cronctl.store.jsonstore import Store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
HOOK = ({"url": "http://127.0.0.1:9/hook"},)


def _entry(name: str, slot: datetime, notify: Any = HOOK, grace: float | None = None,
           paused: bool = False) -> dict[str, Any]:
    spec = JobSpec(name=name, command="true", every=60.0, notify=notify, grace=grace, paused=paused)
    return entry_from(spec, new_state(T0 - timedelta(hours=1), slot))


class CountingStore(Store):
    """The real store, counting the reads that parse it (not the stats that find it unchanged)."""

    reads = 0

    def scan_if_changed(self, signature: Any) -> Any:
        scan, new = super().scan_if_changed(signature)
        if scan is not None:
            self.reads += 1
        return scan, new


def _store(tmp_path: Any, jobs: dict[str, Any]) -> CountingStore:
    store = CountingStore(Paths(tmp_path))
    with store.transaction() as doc:
        doc["jobs"].update(jobs)
    return store


class Leases:
    """What health_pass asks of the lease store, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def notify_stale(self, job: str, stale: Any, now: datetime) -> bool:
        self.calls.append((job, stale[0] if stale else None))
        return stale is not None


def test_a_late_job_with_targets_is_read_back_once_its_slot_plus_grace_has_passed(tmp_path: Any) -> None:
    store = _store(tmp_path, {
        "late": _entry("late", T0 - timedelta(minutes=10)),  # default grace: 2m
        "quick": _entry("quick", T0 + timedelta(seconds=30), grace=1.0),
        "ontime": _entry("ontime", T0 + timedelta(hours=1)),
        "silent": _entry("silent", T0 - timedelta(hours=1), notify=None),  # no targets: nobody to tell
        "held": _entry("held", T0 - timedelta(hours=1), paused=True),
    })
    index = due.DueIndex(store)
    index.refresh()
    assert index.doc["jobs"] == {} and store.reads == 1  # none is watched: none kept

    assert index.watch_late(T0 - timedelta(minutes=9)) is False  # late's bound is T0-8m
    assert store.reads == 1
    assert index.watch_late(T0) is True
    assert sorted(index.doc["jobs"]) == ["late"] and store.reads == 2
    assert index.watch_late(T0) is False and store.reads == 2  # next bound: quick at T0+31s

    leases = Leases()
    health_pass(leases, index.doc, T0)  # type: ignore[arg-type]
    assert leases.calls == [("late", "late")]

    assert index.watch_late(T0 + timedelta(seconds=32)) is True
    assert sorted(index.doc["jobs"]) == ["late", "quick"] and store.reads == 3
    assert index.watch_late(T0 + timedelta(minutes=30)) is False  # ontime's bound: T0+1h2m
    assert store.reads == 3


def test_an_on_time_store_is_never_read_again_for_this(tmp_path: Any) -> None:
    store = _store(tmp_path, {f"j{i}": _entry(f"j{i}", T0 + timedelta(minutes=5 + i)) for i in range(20)})
    index = due.DueIndex(store)
    for seconds in range(0, 300, 5):  # the health pass, every 5 s for 5 minutes
        assert index.watch_late(T0 + timedelta(seconds=seconds)) is False
    assert store.reads == 1 and index.doc["jobs"] == {}


def test_the_bound_never_comes_after_the_health_rule_calls_the_job_late() -> None:
    """late_bound is a lower bound: slot + explicit grace, or slot + the default grace's floor."""
    hourly = _entry("hourly", T0)  # every 60s here; default grace = max(30s, 2m) = 2m
    assert late_bound(hourly) == T0 + timedelta(minutes=2)
    assert late_bound(_entry("g", T0, grace=1.0)) == T0 + timedelta(seconds=1)
    assert late_bound(_entry("g", T0, notify=None)) is None
    assert late_bound(_entry("g", T0, paused=True)) is None
    broken = _entry("b", T0)
    broken["state"]["next_run_at"] = "not a time"
    assert late_bound(broken) is None


def test_slots_compared_as_text_keep_what_the_bound_says() -> None:
    """The text shortcut (default grace, canonical slot) keeps, and notes next, what late_bound says."""
    import random

    from cronctl.loop.late_watch import LateWatch

    rng = random.Random(3)
    for _ in range(200):
        entries = []
        for i in range(12):
            entry = _entry(f"j{i}", T0 + timedelta(milliseconds=rng.randrange(-400_000, 400_000)),
                           grace=rng.choice([None, None, 1.0, 300.0]), notify=rng.choice([HOOK, HOOK, None]))
            if rng.random() < 0.2:  # another offset, or microseconds, as a hand-edited store may hold
                slot = datetime.fromisoformat(entry["state"]["next_run_at"])
                entry["state"]["next_run_at"] = slot.astimezone(timezone(timedelta(hours=2))).isoformat()
            entries.append(entry)
        cutoff = T0 + timedelta(milliseconds=rng.randrange(-100_000, 100_000))
        watch = LateWatch(cutoff)
        kept = [watch.keeps(entry) for entry in entries]
        bounds = [late_bound(entry) for entry in entries]
        assert kept == [b is not None and b <= cutoff for b in bounds]
        rest = [b for b, k in zip(bounds, kept, strict=True) if b is not None and not k]
        assert watch.next_bound == (min(rest) if rest else None)
