"""`cronctl metrics`: the Prometheus text format. Registered on the app by cli/main.py.

Every command module is imported for every command, so ops.metrics (it imports the
health, loop and claims modules) is imported inside the command.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cronctl.cli.app import app, open_context


@app.command()
def metrics(
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write a node_exporter textfile "
                                                   "(atomically) instead of printing.")] = None,
) -> None:
    """Runs, last success, running, lateness, recoveries and loop state in Prometheus text format.

    Example: cronctl metrics -o /var/lib/node_exporter/textfile/cronctl.prom
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops.metrics import metrics_for, write_textfile

    data = metrics_for(open_context())
    if output is None:
        sys.stdout.buffer.write(data)
        return
    write_textfile(output, data)
