"""The console script. Answers `--version` and `status --json` without importing the CLI
framework (typer with pydantic costs more than either answer); everything else goes to
the typer app (cli/main.py)."""

from __future__ import annotations

import sys


def main() -> None:
    argv = sys.argv[1:]
    # Each way out imports only what it needs, here rather than at the top: start-up time.
    if argv == ["--version"]:
        from cronctl import __version__

        try:
            print(f"cronctl {__version__}", flush=True)
        except BrokenPipeError:
            sys.exit(1)  # the reader went away: quietly, as every other command does
        return
    from cronctl.cli import fastpath

    status_args = fastpath.parse(argv)
    if status_args is not None:
        import gc

        from cronctl.cli import exits

        # One read and one answer, then exit: collecting cycles would cost more (about a
        # tenth of the command at 1,000 jobs) than the little garbage it could free.
        gc.disable()

        exits.run(lambda: fastpath.run(status_args), skip_teardown=True)
    from cronctl.cli.main import main as cli_main

    cli_main()
