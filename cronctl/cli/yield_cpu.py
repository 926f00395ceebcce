"""A big `apply -f` runs at a lower CPU priority, so the loops on the host keep their second.

Issue 21: on a 2-core host, `apply -f` of 100,000 jobs is one core of parsing and
validating for seconds (the database's bulk insert takes the other), and the loops that
fire jobs on the same host wait for a core: their p99 lateness rose 2.6-3.5x. The apply is
a batch write nobody waits on to the millisecond; a loop is late by whatever it waits.
A niceness of +10 gives a loop about nine times the apply's share of a busy core and costs
the apply nothing on an idle one (a priority only weighs where processes compete).

Only the `apply` command calls this, never `apply_file` itself: `run -f` (the loop)
applies its watched file through the same function and must keep its priority.
"""

from __future__ import annotations

import os
from pathlib import Path

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
