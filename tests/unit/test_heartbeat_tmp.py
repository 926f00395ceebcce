"""scheduler.json's temp file is written in control/ and renamed into the home: the store
watch on the home sees the rename only (one wake-up per rewrite of an idle loop, not two)."""

from __future__ import annotations

import os
from pathlib import Path

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.heartbeat import HeartbeatWriter
from cronctl.loop.storewatch import _EVENT, _inotify_watch
from cronctl.proc import identity as procs
from cronctl.store.statefiles import read_json


def writer(ctx: Context) -> HeartbeatWriter:
    return HeartbeatWriter(ctx.paths, ctx.clock, procs.identify(os.getpid()), procs.boot_id(), ctx.clock.now(), None)


def names_seen(fd: int) -> list[tuple[str, int]]:
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        return []
    seen, at = [], 0
    while at + _EVENT.size <= len(data):
        _wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
        seen.append((data[at + _EVENT.size:at + _EVENT.size + length].rstrip(b"\0").decode(), mask))
        at += _EVENT.size + length
    return seen


def test_the_home_sees_only_the_rename_of_scheduler_json(home: Path) -> None:
    ctx = Context.open(home, clock=FakeClock())
    beat = writer(ctx)
    beat.prepare()
    fd = _inotify_watch(home)
    assert fd is not None
    try:
        assert beat.write(generation="g", ticks=1, active_runs=0, stopped_cleanly=False) is None
        assert [name for name, _mask in names_seen(fd)] == ["scheduler.json"]
    finally:
        os.close(fd)
    assert (read_json(ctx.paths.heartbeat) or {}).get("ticks") == 1
    assert [p.name for p in ctx.paths.control_dir.iterdir()] == []
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []


def test_without_control_dir_it_is_written_beside_as_before(home: Path) -> None:
    ctx = Context.open(home, clock=FakeClock())
    assert not ctx.paths.control_dir.exists()
    problem = writer(ctx).write(generation="g", ticks=2, active_runs=0, stopped_cleanly=False)
    assert problem is None or "scheduler.json" not in problem  # (no tick record without prepare: its own word)
    assert (read_json(ctx.paths.heartbeat) or {}).get("ticks") == 2
    assert [p.name for p in home.iterdir() if p.name.endswith(".tmp")] == []


def test_a_home_it_cannot_write_still_says_so(home: Path) -> None:
    ctx = Context.open(home, clock=FakeClock())
    beat = writer(ctx)
    beat.prepare()
    os.chmod(home, 0o500)
    try:
        if os.access(home, os.W_OK):  # root writes anyway: nothing to see here
            return
        problem = beat.write(generation="g", ticks=3, active_runs=0, stopped_cleanly=False)
        assert problem is not None and "scheduler.json" in problem
        assert [p.name for p in ctx.paths.control_dir.iterdir()] == []
    finally:
        os.chmod(home, 0o700)
