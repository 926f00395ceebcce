"""systemd's notify protocol: READY, STATUS, WATCHDOG only while ticks complete, STOPPING.

A fake notify socket collects the datagrams. The pings are checked against a real
tick thread (in-process, stalled through the `_tick` seam) and a real `cronctl run`
stopped with SIGTERM, and a standby's STATUS change at takeover.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.notify import Notifier, ServiceBeat
from cronctl.loop.scheduler import LoopOptions, Scheduler
from tests.helpers.loophelp import start_loop, stop, wait_ticking, wait_until
from tests.helpers.notifyhelp import NotifySocket


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path / "notify.sock")
    yield sock
    sock.close()


# --- the protocol, without a loop ---------------------------------------------------------------


def test_nothing_is_sent_without_notify_socket() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled and notifier.ping_interval is None
    assert notifier.send(READY="1") is False


def test_fields_arrive_as_one_datagram_of_lines(notify_socket: NotifySocket) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "30000000"})
    assert notifier.ping_interval == 15.0
    assert notifier.send(READY="1", STATUS="leading: 3 jobs")
    assert notify_socket.wait_for("READY", "1") == {"READY": "1", "STATUS": "leading: 3 jobs"}


def test_abstract_socket_names_start_with_at(tmp_path: Path) -> None:
    sock = NotifySocket(abstract=f"cronctl-test-{os.getpid()}-{tmp_path.name}")
    try:
        assert Notifier(sock.address).send(STATUS="x")
        assert sock.wait_for("STATUS", "x")
    finally:
        sock.close()


def test_watchdog_meant_for_another_pid_is_ignored(notify_socket: NotifySocket) -> None:
    env = {"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}
    assert Notifier.from_env(env).ping_interval is None
    env["WATCHDOG_PID"] = str(os.getpid())
    assert Notifier.from_env(env).ping_interval == 1.0


def test_a_failed_send_is_reported_once_and_never_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notifier = Notifier(str(tmp_path / "nobody-listens.sock"))
    assert notifier.send(READY="1") is False
    assert notifier.send(STATUS="again") is False
    err = capsys.readouterr().err
    assert err.count("could not notify the service manager") == 1


def test_pings_follow_completed_ticks_on_the_clock(notify_socket: NotifySocket) -> None:
    clock = FakeClock()
    beat = ServiceBeat(Notifier(notify_socket.address, watchdog_usec=2_000_000), clock)  # ping every 1 s
    last_tick = clock.monotonic()
    for _ in range(10):  # ticks complete every 0.5 s: a ping every second
        clock.advance(0.5)
        last_tick = clock.monotonic()
        beat.watch(last_tick, lambda: "ok")
    assert beat.pings == 5
    stuck_since = clock.monotonic()
    pinged_at = []
    for _ in range(10):  # the tick thread is stuck: the pings end within two intervals
        clock.advance(0.5)
        before = beat.pings
        beat.watch(last_tick, lambda: "stuck")
        if beat.pings > before:
            pinged_at.append(clock.monotonic() - stuck_since)
    assert len(pinged_at) <= 2 and all(t <= 2 * 1.0 for t in pinged_at), pinged_at  # within 2 intervals
    wait_until(lambda: len(notify_socket.with_field("WATCHDOG")) == beat.pings, 10)


# --- a real tick thread --------------------------------------------------------------------------


@pytest.mark.slow
def test_ready_pings_and_their_end_when_the_tick_thread_stalls(home: Path, notify_socket: NotifySocket) -> None:
    interval = 2.0  # WATCHDOG_USEC of 4 s: the shortest that tells an idle loop from a wedged one
    scheduler = Scheduler(Context.open(home), LoopOptions(quiet=True),
                          notifier=Notifier(notify_socket.address, watchdog_usec=4_000_000))
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        ready = notify_socket.wait_for("READY", "1")
        assert ready["STATUS"].startswith("leading: 0 jobs, 0 running, last tick ")
        began = time.monotonic()
        time.sleep(4 * interval)  # a real tick thread must run for its pings to be counted
        pings = notify_socket.with_field("WATCHDOG", "1")
        # About one per interval: never faster, and not starved (generous under load).
        assert 2 <= len(pings) <= (time.monotonic() - began) / interval + 2, len(pings)

        release = threading.Event()
        stalled_at: list[float] = []
        real_tick = scheduler._tick

        def hung_tick() -> float:
            stalled_at.append(time.monotonic())
            release.wait(60)
            return real_tick()

        scheduler._tick = hung_tick  # type: ignore[method-assign]
        scheduler.wake.set()
        wait_until(lambda: stalled_at, 10)
        time.sleep(2 * interval * 2)  # twice the bound, for the pings to show they stopped
        after = [t for t, _ in notify_socket.with_field("WATCHDOG", "1") if t > stalled_at[0]]
        assert all(t - stalled_at[0] <= 2 * interval for t in after), (after, stalled_at)

        scheduler._tick = real_tick  # type: ignore[method-assign]
        release.set()
        count = len(notify_socket.with_field("WATCHDOG", "1"))
        wait_until(lambda: len(notify_socket.with_field("WATCHDOG", "1")) > count, 10)  # they resume
    finally:
        scheduler.request_stop()
        thread.join(timeout=30)
    assert notify_socket.wait_for("STOPPING", "1")


@pytest.mark.slow
def test_a_real_loop_says_ready_then_stopping_at_sigterm(home: Path, notify_socket: NotifySocket) -> None:
    proc = start_loop(home, env={"NOTIFY_SOCKET": notify_socket.address, "WATCHDOG_USEC": "2000000"})
    try:
        wait_ticking(home, proc)
        notify_socket.wait_for("READY", "1")
        notify_socket.wait_for("WATCHDOG", "1", timeout=20)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        stop(proc)
    stopping = notify_socket.wait_for("STOPPING", "1")
    assert stopping["STATUS"].startswith("stopping")


@pytest.mark.slow
def test_a_standby_says_standby_then_a_new_status_when_it_takes_over(home: Path, notify_socket: NotifySocket) -> None:
    leader = start_loop(home)
    standby = None
    try:
        wait_ticking(home, leader)
        standby = start_loop(home, "--standby", env={"NOTIFY_SOCKET": notify_socket.address})
        first = notify_socket.wait_for("READY", "1")
        assert first["STATUS"].startswith("standby")
        leader.send_signal(signal.SIGTERM)
        assert leader.wait(timeout=60) == 0
        took_over = wait_until(lambda: [f for _, f in notify_socket.with_field("STATUS")
                                        if f["STATUS"].startswith("leading")], 30)
        assert "READY" not in took_over[0]  # READY was sent once, as a standby
        wait_ticking(home, standby)
    finally:
        stop(leader)
        if standby is not None:
            stop(standby)
