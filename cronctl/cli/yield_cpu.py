"""A big `apply -f` runs at a lower CPU priority, so the loops on the host keep their second.

Issue 21: on a 2-core host, `apply -f` of 100,000 jobs is one core of parsing and
validating for seconds (the database's bulk insert takes the other), and the loops that
fire jobs on the same host wait for a core: their p99 lateness rose 2.6-3.5x. The apply is
a batch write nobody waits on to the millisecond; a loop is late by whatever it waits.
A niceness of +10 gives a loop about nine times the apply's share of a busy core and costs
the apply nothing on an idle one (a priority only weighs where processes compete).

The parse, and the new jobs' rows made before the write (ops/apply_ahead.py), go further
(`in_idle_thread`): they run on a thread of the SCHED_IDLE policy, which
any other thread that wakes on its core preempts at once. A niceness is only a share: a loop
waking beside a nice +10 parse still waited (p50 lateness 17 -> 30 ms beside a bare nice +10
spin on this 2-core machine, 20 -> 23 ms beside a SCHED_IDLE one; issue 21, v7idx). The write
that follows keeps the +10 niceness, not the idle policy: it holds rows in an open transaction,
and a host busy on every core would leave an idle thread there for minutes.

Only the `apply` command calls this, never `apply_file` itself: `run -f` (the loop)
applies its watched file through the same function and must keep its priority.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# About 15,000 jobs of three lines each; smaller files parse in well under a second.
BIG_FILE_BYTES = 1 << 20
NICENESS = 10


def yield_cpu_for(file: str | Path) -> bool:
    """Lower this process's priority by NICENESS when `file` is BIG_FILE_BYTES or more; whether it did."""
    try:
        if os.stat(file).st_size < BIG_FILE_BYTES:
            return False
    except OSError:
        return False  # a file that cannot be read is reported by the apply itself, in its words
    try:
        os.nice(NICENESS)
    except OSError:
        return False  # a host that refuses it: the apply runs as it always did, only not yielding
    return True


def in_idle_thread(work: Callable[[], T]) -> T:
    """`work()` on a thread of its own under SCHED_IDLE (Linux: a policy is a thread's own), the
    caller waiting for it; its result, or its exception raised here. Where the policy cannot be
    set, `work` runs on that thread as it would have here."""
    done: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (AttributeError, OSError):
            pass  # not Linux, or refused: the thread keeps the process's niceness
        try:
            done.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller as it was raised
            failed.append(exc)

    thread = threading.Thread(target=run, name="cronctl-idle-parse", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return done[0]
