"""Issue 23 on PostgreSQL: two live loops deliver owed notifications, each key once.

The entries are owed in the job rows' state by the finishing transaction; each loop's worker
asks the database what is owed and leases an entry before its try (store/notify_owed.py),
so however the two loops interleave, the receiver sees every key once.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.loophelp import stop, wait_until
from tests.pg.clusterhelp import one, rows, run_cli, seed, start_host_loop
from tests.helpers.receivers import Receiver

pytestmark = pytest.mark.slow

FAILING = """
jobs:
  - name: fails
    every: 1s
    command: "exit 3"
    notify: [{{url: "{url}", on: [start, failure]}}]
"""


def test_two_loops_deliver_each_key_once(tmp_path: Path, store_url: str) -> None:
    receiver = Receiver()
    seed(store_url, tmp_path, FAILING.format(url=receiver.url))
    loops = [start_host_loop(tmp_path / host, store_url, host) for host in ("host-a", "host-b")]
    try:
        wait_until(lambda: len(receiver.snapshot()) >= 16, timeout=90)
    finally:
        codes = [stop(proc) for proc in loops]
        receiver.stop()
    assert codes == [0, 0]
    keys = Counter(r.headers["Idempotency-Key"] for r in receiver.snapshot())
    assert keys and max(keys.values()) == 1, [k for k, n in keys.items() if n > 1]
    sent = Counter(str(details["key"]) for (details,) in rows(
        store_url, "SELECT details FROM cronctl_audit WHERE event = 'notify.sent'"))
    assert max(sent.values()) == 1
    # A try still out when its loop stopped reached the receiver unsettled: not waited for past
    # the stop's bound, it stays owed and the next loop sends it again (at least once).
    owed = {key for (key,) in rows(store_url, "SELECT jsonb_object_keys(state->'notify_owed') FROM cronctl_jobs"
                                              " WHERE state ? 'notify_owed'")}
    assert set(keys) - set(sent) <= owed
    hosts = {host for (host,) in rows(store_url, "SELECT DISTINCT host_id FROM cronctl_audit "
                                                 "WHERE event = 'notify.sent'")}
    assert hosts  # who sent is recorded; either loop may


LATE = """
jobs:
  - name: hog
    every: 1h
    command: "sleep 300"
  - name: victim
    every: 2s
    grace: 1s
    command: "true"
    notify: [{{url: "{url}", on: [stale]}}]
"""


def test_a_job_gone_late_gives_one_stale_per_episode(tmp_path: Path, store_url: str) -> None:
    """The loop's health pass asks the database for jobs whose next instant has passed
    (`wake_at`): a job kept from starting (--max-parallel 1 taken by a forced long run)
    owes `stale` once, and again after it ran in between."""
    receiver = Receiver()
    seed(store_url, tmp_path, LATE.format(url=receiver.url))
    home = tmp_path / "host-a"
    loop = start_host_loop(home, store_url, "host-a", "--max-parallel", "1")

    def stale() -> list[str]:
        return [body["status"] for body in receiver.bodies() if body["job"] == "victim" and body["event"] == "stale"]

    def victim_ran_since(count: int) -> bool:
        return one(store_url, "SELECT count(*) FROM cronctl_runs WHERE job = 'victim' AND record IS NOT NULL") > count

    try:
        wait_until(lambda: victim_ran_since(0), timeout=60)
        assert run_cli(home, store_url, "host-a", "force-run", "hog").returncode == 0
        wait_until(stale, timeout=60, interval=0.2)
        time.sleep(12)  # two more health passes (every 5 s) while it stays late: nothing more
        assert stale() == ["late"]
        assert run_cli(home, store_url, "host-a", "kill", "hog").returncode == 0
        ran = one(store_url, "SELECT count(*) FROM cronctl_runs WHERE job = 'victim' AND record IS NOT NULL")
        wait_until(lambda: victim_ran_since(ran), timeout=60)  # a success: healthy, re-armed
        assert run_cli(home, store_url, "host-a", "force-run", "hog").returncode == 0
        wait_until(lambda: len(stale()) == 2, timeout=60, interval=0.2)
    finally:
        run_cli(home, store_url, "host-a", "kill", "hog")
        code = stop(loop)
        receiver.stop()
    assert code == 0
    assert stale() == ["late", "late"]
