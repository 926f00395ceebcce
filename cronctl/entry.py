"""The console script. Answers `--version` and the plain forms of the everyday commands
(cli/fastpath.py) without importing the CLI framework (typer with pydantic costs more
than most answers); everything else goes to the typer app (cli/main.py)."""

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

    invocation = fastpath.parse(argv)
    if invocation is not None:
        from cronctl.cli import exits

        reads_only = fastpath.COMMANDS[invocation.command].reads_only
        if reads_only:
            import gc

            # One read and one answer, then exit: collecting cycles would cost more (about a
            # tenth of the command at 1,000 jobs) than the little garbage it could free.
            gc.disable()
        exits.run(lambda: fastpath.run(invocation), skip_teardown=reads_only)
    from cronctl.cli.main import main as cli_main

    cli_main()
