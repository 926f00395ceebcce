"""The self-fence's arithmetic and its thread (loop/fence.py), on an injected monotonic clock."""

from __future__ import annotations

import threading
import time

import pytest

from cronctl.loop.fence import LeaseTooShortError, SelfFence, check_lease, fence_window, minimum_lease, renew_every


def test_the_kill_starts_kill_grace_and_five_seconds_before_the_lease_ends() -> None:
    assert fence_window(60.0, 10.0) == 45.0
    assert fence_window(20.0, 10.0) == 5.0


def test_three_renewals_fit_before_the_kill() -> None:
    assert renew_every(60.0, 10.0) == 15.0  # 45 s window / 3, under lease / 3
    assert renew_every(20.0, 10.0) == pytest.approx(5.0 / 3)
    assert renew_every(9.0, 1.0) == 1.0  # never more often than a tick


def test_a_lease_with_no_room_for_the_fence_is_refused_naming_the_job() -> None:
    assert minimum_lease(10.0) == 18.0
    check_lease(20.0, {"a": 10.0}, 10.0)
    too_short = r"--lease 10s is too short.*job 'slow' has kill_grace 30s.*--lease 38s"
    with pytest.raises(LeaseTooShortError, match=too_short):
        check_lease(10.0, {"a": 1.0, "slow": 30.0}, 10.0)
    check_lease(9.0, {"quick": 1.0}, 10.0)  # the jobs there are, not the default, say what fits
    with pytest.raises(LeaseTooShortError, match=r"kill_grace is 10s.*--lease 18s or more"):
        check_lease(3.0, {}, 10.0)


class _Mono:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _wait_for(condition: object, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_the_thread_ends_a_run_at_its_instant_and_not_before() -> None:
    mono = _Mono()
    ended: list[str] = []
    fence = SelfFence(20.0, mono, ended.append)
    fence.start()
    try:
        fence.confirmed({"r1": ("job", 10.0)}, since_mono=100.0)
        assert fence.kill_at("r1") == 105.0
        mono.now = 104.9
        time.sleep(0.7)  # more than the thread's idle look
        assert ended == []
        mono.now = 105.0
        assert _wait_for(lambda: ended == ["r1"])
    finally:
        fence.stop()


def test_a_later_confirmation_moves_the_instant_an_earlier_one_never_does() -> None:
    fence = SelfFence(60.0, _Mono(), lambda run_id: None)
    fence.confirmed({"r": ("job", 10.0)}, since_mono=200.0)
    fence.confirmed({"r": ("job", 10.0)}, since_mono=150.0)  # a slow round trip answered late
    assert fence.kill_at("r") == 245.0
    fence.forget("r")
    assert fence.kill_at("r") is None


def test_the_thread_never_waits_on_whoever_confirms() -> None:
    """The tick thread may be blocked (on the store) while holding its own locks: the fence
    thread shares nothing with it but its own short lock."""
    mono = _Mono()
    ended: list[str] = []
    fence = SelfFence(20.0, mono, ended.append)
    fence.start()
    blocked = threading.Lock()
    blocked.acquire()  # as a tick stuck in a round trip would hold the tick lock
    try:
        fence.confirmed({"r": ("job", 1.0)}, since_mono=100.0)
        mono.now = 200.0
        assert _wait_for(lambda: ended == ["r"])
    finally:
        blocked.release()
        fence.stop()
