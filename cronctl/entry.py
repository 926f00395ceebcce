"""The console script: answers --version without importing the CLI framework (about 60 ms)."""

from __future__ import annotations

import sys


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        from cronctl import __version__

        print(f"cronctl {__version__}")
        return
    from cronctl.cli import main as cli_main

    cli_main()
