"""The console script: answers --version without importing the CLI framework (about 60 ms)."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from cronctl import __version__

        try:
            print(f"cronctl {__version__}", flush=True)
        except BrokenPipeError:
            sys.exit(1)  # the reader went away: quietly, as every other command does
        return
    from cronctl.cli import main as cli_main

    cli_main()
