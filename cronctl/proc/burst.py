"""A burst: many gates opened at one instant. While its children start they need every core.

So the work a run's end asks of the loop waits until the burst has had its window: the
supervisor's /proc pass for the run's leftovers, the kill of its guard and the hand-over
of its result (proc/watcher.py); the engine's record of results and its run.started rows
(loop/held.py). Nothing of it is lost meanwhile: a run's end is reaped (its exit status
and instant kept) as it happens, and its guard stays until the run is settled.
"""

from __future__ import annotations

BURST_QUIET_PER_RUN = 0.002  # seconds of the window per gate opened together
BURST_QUIET_MAX = 1.0


def burst_quiet(opened: int) -> float:
    """Seconds after `opened` gates opened together during which a run's end waits."""
    return min(BURST_QUIET_MAX, BURST_QUIET_PER_RUN * opened)


# While a burst of at least BURST_PACED_MIN children starts, the supervisor thread looks at
# what happened (exits, output) at most once per BURST_ROUND seconds, all of it at once,
# instead of once per child's end: each look costs it a pass over every run it holds.
BURST_PACED_MIN = 50
BURST_ROUND = 0.01
