"""The /proc pass that finds a run's leftovers: gathered for a burst of ends, at once for a lone one."""

from __future__ import annotations

import os

from cronctl.proc.identity import identify
from cronctl.proc.termination import _LEFTOVER_SCAN_COALESCE, ScanQueue


def _me() -> object:
    me = identify(os.getpid())
    assert me is not None
    return me


def test_leftover_scans_wait_to_gather_while_other_runs_may_still_end() -> None:
    queue: ScanQueue[str] = ScanQueue()
    queue.ask("run-1", _me(), "item-1", "leftovers")  # type: ignore[arg-type]
    assert queue.take(100.0) == []  # other runs go on: gather their ends into one pass
    assert queue.timeout(100.0) == _LEFTOVER_SCAN_COALESCE
    assert [item for item, _, _ in queue.take(100.0 + _LEFTOVER_SCAN_COALESCE)] == ["item-1"]


def test_a_lone_end_is_scanned_at_once() -> None:
    queue: ScanQueue[str] = ScanQueue()
    queue.ask("run-1", _me(), "item-1", "leftovers")  # type: ignore[arg-type]
    assert queue.timeout(100.0, more_may_come=False) is None  # nothing gathered yet: the pass is now
    assert [item for item, _, _ in queue.take(100.0, more_may_come=False)] == ["item-1"]
