"""Which limit of SPEC §13 ended a run, where the kernel lets us tell.

CPU time is certain: the soft RLIMIT_CPU sends SIGXCPU (and the hard one, a second
later, SIGKILL). An address-space limit is not signalled: allocations fail and the
program reports it its own way, so it is named only when the job had a memory limit
and its last output says it ran out of memory.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping

CPU_LIMIT = "cpu_limit"
MEMORY_LIMIT = "memory_limit"
# What programs print when malloc/mmap fail (C, Python, C++, Go, Java, Node, the shells).
_OUT_OF_MEMORY = re.compile(r"cannot allocate memory|out of memory|MemoryError|bad_alloc|"
                            r"OutOfMemoryError|heap out of memory|memory exhausted", re.IGNORECASE)


def limit_reason(limits: Mapping[str, int], sig: int | None, exit_code: int | None, tail: str) -> str | None:
    """`cpu_limit`, `memory_limit` or None for a failed run of a job with `limits`."""
    if "cpu" in limits and sig == signal.SIGXCPU:
        return CPU_LIMIT
    if "memory" in limits and (sig is not None or exit_code not in (None, 0)) and _OUT_OF_MEMORY.search(tail):
        return MEMORY_LIMIT
    return None


# The words `history`, `status` and the loop's lines use for these reasons.
LIMIT_WORDS = {
    CPU_LIMIT: "CPU time limit reached (SIGXCPU; limits.cpu)",
    MEMORY_LIMIT: "memory limit reached (out of memory; limits.memory)",
}
