"""The one place a failure becomes a message and an exit code, for every way in.

Both the typer app (cli.main) and the framework-free entry (fastpath.py) run their
command through `run`, so an error reads and exits the same whichever answered.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn

from cronctl.cli.render import error
from cronctl.errors import ConfigError, CronctlError


def run(command: Callable[[], int | None], *, skip_teardown: bool = False) -> NoReturn:
    """Run `command` and exit with its code (None means 0).

    skip_teardown: after a success, flush and leave without the interpreter's teardown
    (freeing every object one by one: a tenth of `status --json` at 1,000 jobs). Only
    for a command that holds nothing needing cleanup: no lock, no child, no open write.
    """
    try:
        code = command()
        if skip_teardown:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 0)
    except ConfigError as exc:
        for problem in exc.problems:
            error(problem)
        sys.exit(exc.exit_code)
    except CronctlError as exc:
        error(str(exc))
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _quiet_stdout()
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:
        internal_error(exc)
    sys.exit(code if isinstance(code, int) else 0)


def _quiet_stdout() -> None:
    """The reader went away (`cronctl list | head -1`): exit 1 quietly, as click and rich do
    when they meet it first; stdout goes to /dev/null so the final flush is quiet too."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a descriptor (captured in tests)
        pass


def internal_error(exc: BaseException) -> NoReturn:
    """A bug: say so plainly; the traceback only on request."""
    import traceback

    if os.environ.get("CRONCTL_DEBUG"):
        traceback.print_exc()
    print(f"cronctl: internal error: {type(exc).__name__}: {exc} "
          "(set CRONCTL_DEBUG=1 for the traceback, and please report it)", file=sys.stderr)
    sys.exit(1)
