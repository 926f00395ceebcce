"""`cronctl [--home DIR] status --json [--stale]` without building the typer app.

Monitoring polls this command, often every few seconds, and the CLI framework alone
(typer imports pydantic for its parameter types, then builds the command tree) costs
more than the whole answer. Only the exact forms above are answered here; any other
argument, `--help` included, falls through to the typer app, which owns the usage
errors. The document and the exit codes are those of the typer command: both call
statusops and exits (tests/test_fastpath.py compares the two byte for byte).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from cronctl.clock import Clock


class StatusArgs(NamedTuple):
    home: str | None
    stale: bool


def parse(argv: list[str]) -> StatusArgs | None:
    """The arguments of a `status --json` call, or None for anything else."""
    if os.environ.get("CRONCTL_STORE"):
        return None  # the PostgreSQL store: the full CLI reads it (store/backends.py)
    home, rest = _global_options(argv)
    if not rest or rest[0] != "status":
        return None
    flags = rest[1:]
    if "--json" not in flags or any(flag not in ("--json", "--stale") for flag in flags):
        return None
    return StatusArgs(home=home, stale="--stale" in flags)


def _global_options(argv: list[str]) -> tuple[str | None, list[str] | None]:
    """(--home value, the arguments after the global options); (None, None) if unsure."""
    home = None
    index = 0
    while index < len(argv) and argv[index].startswith("--home"):
        arg = argv[index]
        if arg.startswith("--home="):
            value, index = arg[len("--home="):], index + 1
        elif arg == "--home" and index + 1 < len(argv):
            value, index = argv[index + 1], index + 2
        else:
            return None, None
        if not value or value.startswith("-"):
            return None, None  # odd enough that the framework should judge it
        home = value
    return home, argv[index:]


def run(args: StatusArgs, clock: Clock | None = None) -> int:
    # Imported here: every invocation parses its arguments with this module, and only
    # `status --json` needs these.
    from cronctl.cli.render import print_json
    from cronctl.context import Context
    from cronctl.ops.status import status, status_json
    from cronctl.paths import resolve_home

    ctx = Context.open(resolve_home(args.home), clock=clock)
    report = status(ctx)
    print_json(status_json(report, only_stale=args.stale))
    return 3 if args.stale and report.stale else 0
