"""A burst of children released at one instant (issue 27, K = 500): its release write judged
by its size, and what the loop holds back while the burst's children start (every loop's
share of it) - results, run.started rows, leftover passes - without holding back a stop."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

from cronctl.loop.held import WRITE_SCALE_MAX, HeldRun, HeldRuns
from cronctl.models import JobSpec
from cronctl.proc.burst import BURST_PACED_MIN, BURST_QUIET_MAX, burst_quiet
from cronctl.proc.gate import Gate
from cronctl.proc.identity import identify
from cronctl.proc.shared import SharedRuns
from cronctl.proc.termination import _LEFTOVER_SCAN_COALESCE, ScanQueue

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
SPEC = JobSpec(name="tick", command="true", every=10.0)


def held(run_id: str, due: datetime, together: int = 1) -> HeldRun:
    return HeldRun("tick", run_id, SPEC, "slot", due, None, 4242, 1.0, together=together)


def test_a_big_release_is_judged_by_the_claim_of_its_runs_not_by_the_last_small_release() -> None:
    runs = HeldRuns()
    small = [held(f"s{i}", T0) for i in range(9)]
    for run in small:
        runs.hold(run)
    runs.released(small, write_took=0.010)  # the last release: 9 runs, 10 ms
    for run in small:
        runs.started(run, T0)
    runs.claimed(claim_write=0.2, spawned=500, spawn_took=1.0, claims=500)  # the next burst's claim
    due = T0 + timedelta(seconds=1)
    for i in range(500):
        runs.hold(held(f"b{i}", due, together=500))

    # Judged by the last release alone (10 ms), these would be released 70 ms before their
    # instant, and the write of 500 runs (about as long as their claim) would open them late.
    assert runs.write_estimate(500) == 0.2
    assert len(runs.to_release(due - timedelta(seconds=0.4), force=False)) == 500


def test_a_write_of_more_runs_than_any_measured_is_judged_in_proportion_within_bounds() -> None:
    runs = HeldRuns()
    few = [held(f"s{i}", T0) for i in range(9)]
    for run in few:
        runs.hold(run)
    runs.released(few, write_took=0.010)
    assert runs.write_estimate(18) == 0.020
    # From 9 runs, 500 would be 0.56 s: the next burst's claim then falls in this one's start.
    assert runs.write_estimate(500) == 0.010 * WRITE_SCALE_MAX
    assert runs.margin(9) == timedelta(seconds=0.05 + 2 * 0.010)  # a small one as before


def test_before_any_release_the_claim_ahead_of_the_same_runs_tells_the_cost() -> None:
    runs = HeldRuns()
    runs.claimed(claim_write=0.2, spawned=500, spawn_took=1.0, claims=500)
    assert runs.write_estimate(500) == 0.2
    assert runs.lead(2.0, 500) >= 2.0 + 3 * 0.2
    empty = HeldRuns()
    empty.claimed(claim_write=0.3, spawned=0, spawn_took=0.0, claims=0)  # another loop took the burst
    assert empty.write_estimate(500) == 0.0


def test_a_share_of_a_burst_waits_as_long_as_the_whole_burst() -> None:
    runs = HeldRuns()
    share = [held(f"r{i}", T0, together=500) for i in range(4)]  # 496 more went to other loops
    for run in share:
        runs.hold(run)

    opening = runs.released(share, write_took=0.005)

    assert opening == [(T0, [run.run_id for run in share], 500)]
    assert runs.quiet_until == T0 + timedelta(seconds=BURST_QUIET_MAX)
    assert runs.to_report(T0 + timedelta(seconds=0.5), ending=[]) == []  # no run.started row yet
    assert len(runs.to_report(T0 + timedelta(seconds=BURST_QUIET_MAX), ending=[])) == 4


def _me() -> object:
    me = identify(os.getpid())
    assert me is not None
    return me


def test_leftover_passes_wait_for_the_burst_but_a_stop_does_not() -> None:
    queue: ScanQueue[str] = ScanQueue()
    queue.ask("ended", _me(), "ended", "leftovers")  # type: ignore[arg-type]
    hold = 100.0 + 1.0
    assert queue.take(100.0, hold_until=hold) == []
    assert queue.take(100.0 + _LEFTOVER_SCAN_COALESCE, hold_until=hold) == []  # the burst still starts
    assert queue.timeout(100.5, hold_until=hold) == 0.5
    assert [item for item, _, _ in queue.take(hold, hold_until=hold)] == ["ended"]

    queue.ask("ended", _me(), "ended", "leftovers")  # type: ignore[arg-type]
    queue.ask("killed", _me(), "killed", "stop")  # type: ignore[arg-type]
    assert sorted(item for item, _, _ in queue.take(200.0, hold_until=300.0)) == ["ended", "killed"]

    queue.ask("last", _me(), "last", "leftovers")  # type: ignore[arg-type]
    # Nothing else runs: no sibling needs the CPU, the pass is made at once.
    assert [item for item, _, _ in queue.take(300.0, more_may_come=False, hold_until=400.0)] == ["last"]


def _gated(shared: SharedRuns, run_id: str) -> int:
    """A run at its gate as open_gates sees it: the gate's write end, and the read end returned."""
    read_end, write_end = os.pipe()
    req = SimpleNamespace(timeout=None)
    shared.runs[run_id] = SimpleNamespace(run_id=run_id, gate=Gate(write_end), req=req)  # type: ignore[assignment]
    return read_end


def test_opening_a_burst_sets_the_window_of_the_whole_burst() -> None:
    shared = SharedRuns(time.monotonic, timeouts_enabled=True)
    ends = [_gated(shared, f"r{i}") for i in range(3)]
    try:
        before = time.monotonic()
        shared.open_gates(["r0"])
        assert shared.burst_until <= time.monotonic() + burst_quiet(1)
        assert shared.paced_until == float("-inf")  # one run: no pacing

        shared.open_gates(["r1", "r2"], burst=500)  # our two, of a burst of 500 across loops
        assert before + BURST_QUIET_MAX <= shared.burst_until <= time.monotonic() + BURST_QUIET_MAX
        assert shared.paced_until == shared.burst_until and 500 >= BURST_PACED_MIN
        assert [os.read(end, 3) for end in ends] == [b"go\n"] * 3
    finally:
        for end in ends:
            os.close(end)


def test_the_lead_of_a_whole_burst_is_not_judged_by_a_few_children_of_a_share() -> None:
    runs = HeldRuns()
    runs.claimed(claim_write=0.2, spawned=500, spawn_took=2.0, claims=500)  # 4 ms a child
    runs.claimed(claim_write=0.02, spawned=25, spawn_took=0.025, claims=25)  # a share, 1 ms a child
    assert runs.spawn_cost == 0.004
    runs.claimed(claim_write=0.2, spawned=300, spawn_took=0.6, claims=300)  # a big one: measured again
    assert runs.spawn_cost == 0.002
