"""Many writers through the real lock: processes, threads, a holder that will not let go."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from tests.helpers.store_helpers import seed, worker_command, worker_env

from cronctl.errors import LockTimeoutError
from cronctl.paths import Paths, open_home
from cronctl.store.jsonstore import Store


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return open_home(tmp_path / "home")


def start_holder(paths: Paths) -> subprocess.Popen[str]:
    """A separate process that holds the store lock until its stdin closes."""
    holder = subprocess.Popen(
        worker_command("hold", paths.home),
        env=worker_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    return holder


def release(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=10) == 0


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_sixteen_processes_incrementing_a_counter_lose_no_update_and_leave_no_rev_gap(paths: Paths) -> None:
    processes, increments = 16, 100
    workers = [
        subprocess.Popen(
            worker_command("increment", paths.home, str(increments)),
            env=worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    # Meanwhile a reader without the lock must only ever see whole documents,
    # and the counter never goes back.
    store = Store(paths)
    seen = 0
    while any(worker.poll() is None for worker in workers):
        count = store.read()["counters"].get("n", 0)
        assert count >= seen
        seen = count
        time.sleep(0.002)

    revs: list[int] = []
    for worker in workers:
        out, err = worker.communicate(timeout=30)
        assert worker.returncode == 0, err
        revs.extend(json.loads(out))
    total = processes * increments
    assert sorted(revs) == list(range(1, total + 1))
    final = store.read()
    assert final["counters"]["n"] == total
    assert final["rev"] == total


@pytest.mark.parametrize("shared", [True, False], ids=["one-store-shared", "a-store-per-thread"])
def test_eight_threads_incrementing_a_counter_lose_no_update(paths: Paths, shared: bool) -> None:
    threads, increments = 8, 50
    common = Store(paths)
    revs: list[list[int | None]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def work(index: int) -> None:
        store = common if shared else Store(paths)
        try:
            start.wait()
            for _ in range(increments):
                with store.transaction() as doc:
                    doc["counters"]["n"] = doc["counters"].get("n", 0) + 1
                revs[index].append(store.last_written_rev)
        except BaseException as exc:  # surfaced below: a thread's failure must fail the test
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(index,)) for index in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=30)
    assert not errors
    total = threads * increments
    assert sorted(rev for mine in revs for rev in mine) == list(range(1, total + 1))  # type: ignore[type-var]
    assert common.read()["counters"]["n"] == total


@pytest.mark.slow
def test_a_lock_held_by_another_process_times_out_naming_the_holder(paths: Paths) -> None:
    original = seed(paths, {"a": {}})
    holder = start_holder(paths)
    try:
        store = Store(paths, lock_timeout=0.5)
        started = time.monotonic()
        with pytest.raises(LockTimeoutError) as caught:
            with store.transaction() as doc:
                doc["jobs"].clear()
        waited = time.monotonic() - started
        message = str(caught.value)
        assert str(paths.store_lock) in message
        assert f"pid {holder.pid}" in message
        assert "worker.py hold" in message  # the holder's command line
        assert 0.5 <= waited < 5
        assert paths.store.read_bytes() == original  # never an unlocked write
    finally:
        release(holder)
    with Store(paths, lock_timeout=5).transaction() as doc:
        doc["jobs"].clear()
    assert Store(paths).read()["jobs"] == {}


@pytest.mark.slow
def test_a_waiting_transaction_proceeds_as_soon_as_the_holder_lets_go(paths: Paths) -> None:
    holder = start_holder(paths)
    threading.Timer(0.3, release, args=(holder,)).start()
    started = time.monotonic()
    with Store(paths, lock_timeout=20).transaction() as doc:
        doc["jobs"]["after"] = {}
    assert 0.25 <= time.monotonic() - started < 3


def test_a_lock_held_by_another_thread_times_out_naming_this_process(paths: Paths) -> None:
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with Store(paths).transaction():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert inside.wait(10)
        with pytest.raises(LockTimeoutError, match=f"pid {os.getpid()} \\(another thread of this process\\)"):
            with Store(paths, lock_timeout=0.2).transaction():
                pass
    finally:
        leave.set()
        thread.join(10)


@pytest.mark.slow
def test_a_child_spawned_inside_a_transaction_does_not_inherit_the_lock(paths: Paths) -> None:
    lock_inode = None
    with Store(paths).transaction():
        lock_inode = paths.store_lock.stat().st_ino
        # close_fds=False: only O_CLOEXEC stands between the child and our descriptors.
        child = subprocess.Popen(["sleep", "30"], close_fds=False)
    try:
        inherited = []
        for fd in os.listdir(f"/proc/{child.pid}/fd"):
            try:
                if os.stat(f"/proc/{child.pid}/fd/{fd}").st_ino == lock_inode:
                    inherited.append(fd)
            except OSError:
                continue
        assert inherited == []
        with Store(paths, lock_timeout=1).transaction() as doc:
            doc["jobs"]["a"] = {}
    finally:
        child.kill()
        child.wait()
