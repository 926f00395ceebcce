"""An Engine wired to its Supervisor the one way the loop wires them (loop.engine.build_engine),
for the tests that drive ticks by hand on an injected clock."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from cronctl.context import Context
from cronctl.loop.engine import Engine, EngineOptions, build_engine
from cronctl.proc.supervisor import Supervisor
from cronctl.store.claims import Owner


def test_owner() -> Owner:
    """The owner the hand-driven engines claim as: this process, a made-up generation."""
    return Owner("gen-test", os.getpid(), 1.0, "boot")


test_owner.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def wired_engine(ctx: Context, owner: Owner | None = None, options: EngineOptions | None = None,
                 **supervisor_options: Any) -> Engine:
    """build_engine's engine; its supervisor (`engine.supervisor`) takes `supervisor_options`
    (spawn=..., timeouts_enabled=...) and is not started."""
    make = functools.partial(Supervisor, **supervisor_options)
    return build_engine(ctx, owner or test_owner(), options, make_supervisor=make)


@contextmanager
def running_engine(ctx: Context, owner: Owner | None = None, options: EngineOptions | None = None,
                   **supervisor_options: Any) -> Iterator[Engine]:
    """`wired_engine` with its supervisor started, and shut down (its children ended) after."""
    engine = wired_engine(ctx, owner, options, **supervisor_options)
    engine.supervisor.start()
    try:
        yield engine
    finally:
        engine.supervisor.shutdown(wait=30)


def tick_until(engine: Engine, done: Callable[[], Any], timeout: float, step: float = 0.2) -> None:
    """Tick as the loop does (woken by a result, else every `step`) until `done()` or `timeout` s."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        engine.wake.wait(step)
        engine.wake.clear()
        engine.tick()
