"""An idle supervisor thread sleeps IDLE_BACKSTOP, not WAKE_BACKSTOP: it has nothing a
lost wake-up could delay. With anything to do, or once a wake-up was lost, it keeps the
short backstop; a lost wake-up is written again by the poster's next call."""

from __future__ import annotations

import os
import select
import time
from types import SimpleNamespace

import pytest

from cronctl.proc.shared import IDLE_BACKSTOP, WAKE_BACKSTOP, SharedRuns
from cronctl.proc.watcher import Watcher


def watcher(subreaper: bool = False) -> tuple[Watcher, SharedRuns]:
    shared = SharedRuns(time.monotonic, timeouts_enabled=True)
    return Watcher(shared, on_result=lambda result: None, monotonic=time.monotonic, subreaper=subreaper), shared


def test_with_nothing_to_supervise_the_thread_sleeps_long() -> None:
    idle, _ = watcher()
    assert idle._select_timeout() == IDLE_BACKSTOP  # noqa: SLF001
    reaper, _ = watcher(subreaper=True)
    reaper._next_orphan_reap = time.monotonic() + 10.0  # noqa: SLF001  # as after a look with no run
    assert WAKE_BACKSTOP < reaper._select_timeout() <= IDLE_BACKSTOP  # noqa: SLF001


@pytest.mark.parametrize("busy", ["run", "command", "gate timer", "lost wake-up"])
def test_with_anything_to_do_the_short_backstop_stays(busy: str) -> None:
    w, shared = watcher()
    if busy == "run":
        run = SimpleNamespace(run_id="r1", exit=SimpleNamespace(exited=False))
        shared.runs["r1"] = run  # type: ignore[assignment]  # only its presence counts here
    elif busy == "command":
        shared.post(("register", "r1"))
    elif busy == "gate timer":
        shared.open_gates_at(time.monotonic() + 60.0, ("r1",))
    else:
        shared.wakes_lost = 1
    assert w._select_timeout() == WAKE_BACKSTOP  # noqa: SLF001


def test_a_lost_wake_up_is_written_again_by_the_next_call() -> None:
    _, shared = watcher()
    read_end = shared._wake_r  # noqa: SLF001
    real = shared._wake_w  # noqa: SLF001
    full = os.open("/dev/full", os.O_WRONLY)  # every write: ENOSPC
    try:
        shared._wake_w = full  # noqa: SLF001
        shared.wake()
        assert shared.wake_owed and shared.wakes_lost == 1
        shared._wake_w = real  # noqa: SLF001  # the fault went away
        assert select.select([read_end], [], [], 0)[0] == []
        shared.wake_if_owed()
        assert not shared.wake_owed
        assert select.select([read_end], [], [], 0)[0] == [read_end]
    finally:
        shared._wake_w = real  # noqa: SLF001
        os.close(full)
        shared.close_wake_pipe()
