"""Issue 23 on PostgreSQL: two live loops deliver owed notifications, each key once.

The entries are owed in the job rows' state by the finishing transaction; each loop's worker
asks the database what is owed and leases an entry before its try (store/notify_owed.py),
so however the two loops interleave, the receiver sees every key once.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.loophelp import stop, wait_until
from tests.pg.clusterhelp import rows, seed, start_host_loop
from tests.receivers import Receiver

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
    assert set(keys) <= set(sent) and max(sent.values()) == 1
    hosts = {host for (host,) in rows(store_url, "SELECT DISTINCT host_id FROM cronctl_audit "
                                                 "WHERE event = 'notify.sent'")}
    assert hosts  # who sent is recorded; either loop may
