"""What one invocation shares, without the CLI framework: the home, the store URL and
the clock chosen for it, and the context they open.

Both ways in set it: the typer app's root options (cli/app.py) and the framework-free
entry (cli/fastpath.py, entry.py), so a command body reads the same state whichever parsed
its command line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cronctl.clock import Clock, SystemClock

if TYPE_CHECKING:
    from cronctl.context import Context

# "clock" is the test seam of the CLI: tests put a FakeClock here; None means the system clock.
state: dict[str, Any] = {"home": None, "clock": None, "store": None}


def set_root_options(home: Path | str | None, store: str | None) -> None:
    state["home"] = home
    state["store"] = store


def open_context() -> Context:
    """The home of this invocation (--home, else the environment), with the CLI's clock."""
    # Imported here: the store and audit modules are not needed by --help, validate or export -f.
    from cronctl.context import Context
    from cronctl.paths import resolve_home
    from cronctl.store.backend import selected_url

    return Context.open(resolve_home(state["home"]), clock=state["clock"],
                        store_url=selected_url(state["store"], os.environ))


def cli_clock() -> Clock:
    """The clock of this invocation, for a command that opens no context."""
    clock: Clock = state["clock"] or SystemClock()
    return clock


def open_store_context() -> Context:
    """A context whose store is known to parse: a command that needs the store fails
    on a corrupt one (exit 1, naming the file) even when it would not otherwise read it."""
    ctx = open_context()
    ctx.backend.ensure_readable()  # on PostgreSQL: connects and checks the schema
    return ctx
