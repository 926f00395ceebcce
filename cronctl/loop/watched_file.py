"""`cronctl run --file`: the jobs file the loop applies again whenever it changes.

The main thread looks at it twice a second (one stat). A bad edit is said on stderr and
leaves the jobs as they were; a job the file dropped while it runs is removed once its
run ends (the file is applied again when a run ends, and at least every PRUNE_RETRY_EVERY).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cronctl.clock import Clock
from cronctl.context import Context
from cronctl.errors import CronctlError

# While a dropped job's run goes on, the watched file is applied again when a run ends, and at
# least this often (a run of another process, force-run without the loop, ends unseen).
PRUNE_RETRY_EVERY = 10.0


@dataclass
class FileApplied:
    """What re-applying the watched jobs file did, as the loop reports it."""

    changed: bool
    summary: str
    # Jobs the file dropped that were running: removed by a later apply, once their runs end.
    prune_waiting: list[str] = field(default_factory=list)


ApplyFile = Callable[[Context, str], FileApplied]


class WatchedFile:
    """The watched file's last signature and the jobs waiting to be pruned (see the module doc)."""

    def __init__(self, ctx: Context, path: Path, apply: ApplyFile | None, say: Callable[[str], None],
                 wake: Callable[[], None], active_runs: Callable[[], int]) -> None:
        self.ctx, self.path, self._apply, self._say, self._wake = ctx, path, apply, say, wake
        self._active_runs = active_runs  # len(): safe beside the tick thread
        self._sig: tuple[int, int, int] | None = None
        self.prune_waiting: list[str] = []
        self._tried_at = 0.0
        self._tried_active = 0

    @property
    def clock(self) -> Clock:
        return self.ctx.clock

    def apply(self, initial: bool) -> None:
        """Apply the file if it changed (always when `initial`; a bad file then raises)."""
        sig = self._signature()
        if not initial and sig == self._sig and not self._retry_prune():
            return
        self._sig = sig
        if self._apply is None:
            return
        self._tried_at, self._tried_active = self.clock.monotonic(), self._active_runs()
        try:
            applied = self._apply(self.ctx, str(self.path))
        except CronctlError as exc:
            if initial:
                raise
            print(f"cronctl: {self.path} changed but was not applied (the jobs stay as they were):\n{exc}",
                  file=sys.stderr)
            return
        if applied.changed or initial:
            self._say(f"cronctl: applied {self.path}: {applied.summary}")
            self._wake()
        if applied.prune_waiting and applied.prune_waiting != self.prune_waiting:  # said once per change
            self._say(f"cronctl: {self.path} no longer defines {', '.join(applied.prune_waiting)}, "
                      "still running: removed when the run ends")
        self.prune_waiting = applied.prune_waiting

    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _retry_prune(self) -> bool:
        """Apply an unchanged file again while a dropped job waits for its run to end."""
        if not self.prune_waiting:
            return False
        waited = self.clock.monotonic() - self._tried_at
        return self._active_runs() != self._tried_active or waited >= PRUNE_RETRY_EVERY
