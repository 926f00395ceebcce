"""The way into the typer app: builds the command tree once and maps every way out to an exit code.

Only this module imports the command modules, so that each of them imports `cli.app`
and nothing imports back. They are imported in the order the commands were registered
before the split, which is the order `cronctl --help` lists them.
"""

from __future__ import annotations

import sys
from typing import Any

import typer

from cronctl.cli import exits
from cronctl.cli.app import app

# isort: off
# Each command module registers its commands on `app` when imported; the order is --help's.
from cronctl.cli import job_commands as _job_commands  # noqa: F401
from cronctl.cli import run_commands as _run_commands  # noqa: F401
from cronctl.cli import health as _health  # noqa: F401
from cronctl.cli import migrate as _migrate  # noqa: F401
from cronctl.cli import metrics as _metrics  # noqa: F401
from cronctl.cli import store as _store  # noqa: F401  (last: the other commands keep their --help order)
# isort: on

__all__ = ["app", "main"]  # app: with every command registered (tests list the commands)

_built: dict[int, Any] = {}


def _click_command() -> Any:
    """The click command tree of `app`, built once per process.

    typer rebuilds it (signatures, type hints, parameter coercion of every command) on
    each call of app(), about 50 ms; tests and workers call main() many times in one process.
    """
    key = len(app.registered_commands)
    if key not in _built:
        _built.clear()
        _built[key] = typer.main.get_command(app)
    return _built[key]


def main(argv: list[str] | None = None) -> None:
    """Run the app; exits.run turns a CronctlError into a message and an exit code."""
    args = sys.argv[1:] if argv is None else argv
    exits.run(lambda: _run_click(args))


def _run_click(args: list[str]) -> int | None:
    """The click layer's own ways out, as exit codes; everything else is exits.run's."""
    try:
        code = _click_command().main(args=args, prog_name="cronctl", standalone_mode=False)
    except typer.Abort:
        print("cronctl: aborted", file=sys.stderr)
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except Exception as exc:
        # Usage errors of the (possibly vendored) click layer: they know how to show themselves.
        if not (hasattr(exc, "show") and hasattr(exc, "exit_code")):
            raise
        exit_code: int = exc.exit_code
        if type(exc).__name__ == "NoArgsIsHelpError" or not hasattr(exc, "format_message"):
            exc.show()  # `cronctl` alone: the help is the answer
        else:
            print(usage_line(exc), file=sys.stderr)
        return exit_code
    return code if isinstance(code, int) else 0


def usage_line(exc: Any) -> str:
    """A command line that does not parse, as every other error reads: one
    `cronctl: error: ...` line naming the option, then where the help is."""
    message = str(exc.format_message()).strip()
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "cronctl"
    return f"cronctl: error: {message} (see '{path} --help')"
