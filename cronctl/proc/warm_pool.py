"""The supervisor's warm children (proc.warm): made ahead, adopted by a run, let go.

Any thread may call these; the pool's own lock guards the list, and the supervisor's reap
lock is held from a warm child's spawn until it is tracked or known alive, so the orphan
sweep of a subreaper never takes a live one, and a dead one is never adopted.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from cronctl.models import DEFAULT_KILL_GRACE
from cronctl.proc.childenv import inherited_env
from cronctl.proc.fds import close_all
from cronctl.proc.guard import Guard, start_guard
from cronctl.proc.shared import SharedRuns
from cronctl.proc.spawn import GatedChild, RunRequest, SpawnError, SpawnFn, open_run_log, start_gated
from cronctl.proc.warm import WARM_ARGV, Preface, WarmChild, preface, warm_log_placeholder

Track = Callable[[RunRequest, GatedChild, Guard], None]


class WarmPool:
    def __init__(self, shared: SharedRuns, spawn: SpawnFn, mono: Callable[[], float]) -> None:
        self._shared = shared
        self._spawn = spawn
        self._mono = mono
        self._lock = threading.Lock()
        self._children: list[WarmChild] = []
        self._made = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._children)

    def fill(self, target: int, stop: Callable[[], bool], kill_grace: float = DEFAULT_KILL_GRACE) -> int:
        """Spawn warm children until there are `target`, or `stop()` says so (a result waits).
        A spawn the platform refuses ends the filling: the hop then spawns as usual."""
        made = 0
        while len(self) < target and not self._shared.stopping and not stop():
            try:
                warm = self._spawn_one(kill_grace)
            except (OSError, SpawnError):
                break
            with self._lock:
                self._children.append(warm)
            made += 1
        return made

    def drain(self, keep: int = 0) -> int:
        """Let all but `keep` go (closed gates: nothing of any run began in them)."""
        with self._lock:
            gone, self._children = self._children[keep:], self._children[:keep]
        for warm in gone:
            warm.discard()
        return len(gone)

    def adopt(self, req: RunRequest, env: Mapping[str, str], gated: Sequence[str], track: Track) -> GatedChild | None:
        """Make a warm child into `req`'s gated child (tracked); None when none can be."""
        while (warm := self._take()) is not None:
            lines = preface(env, warm.base_env, gated)
            if lines is None:
                self._put_back(warm)
                return None
            try:
                log_fd = open_run_log(req)
            except SpawnError:
                self._put_back(warm)
                raise
            child = self._hand_over(warm, req, log_fd, lines, track)
            if child is not None:
                return child
        return None

    def _hand_over(self, warm: WarmChild, req: RunRequest, log_fd: int, lines: Preface,
                   track: Track) -> GatedChild | None:
        with self._shared.reap_lock:
            if warm.exited():
                close_all([log_fd])
                warm.discard()
                return None
            try:
                child = warm.adopt(log_fd, lines, self._mono())
            except OSError:  # its gate's reader is gone: it died, nothing of the run began
                close_all([log_fd])
                warm.discard()
                return None
            guard = warm.guard if req.kill_grace == warm.kill_grace else _new_guard(req, child, warm)
            track(req, child, guard)
        with self._shared.lock:
            tracked = self._shared.runs.get(req.run_id)
            if tracked is not None:
                tracked.gate.preface = lines.at_open
        return child

    def _spawn_one(self, kill_grace: float) -> WarmChild:
        base = inherited_env(os.environ)
        self._made += 1
        req = RunRequest(run_id=f"warm-{self._made}", job="(warm child)", command=WARM_ARGV[2], cwd=None, env={},
                         timeout=0, kill_grace=kill_grace, log_path=Path(os.devnull))
        with self._shared.reap_lock:
            child = start_gated(req, base, WARM_ARGV, warm_log_placeholder(), self._spawn, self._mono)
            try:
                guard = start_guard(child.pid, kill_grace)
            except OSError as exc:
                child.discard()
                raise SpawnError(exc.errno or errno.EIO, f"cannot guard a warm child: {exc}") from exc
        return WarmChild(child, guard, kill_grace, base)

    def _take(self) -> WarmChild | None:
        with self._lock:
            return self._children.pop() if self._children else None

    def _put_back(self, warm: WarmChild) -> None:
        with self._lock:
            self._children.append(warm)


def _new_guard(req: RunRequest, child: GatedChild, warm: WarmChild) -> Guard:
    """A run whose kill_grace is not the warm guard's gets a guard of its own."""
    warm.guard.end()
    try:
        return start_guard(child.pid, req.kill_grace)
    except OSError as exc:
        child.discard()
        raise SpawnError(exc.errno or errno.EIO, f"cannot guard run {req.run_id} of {req.job}: {exc}") from exc
