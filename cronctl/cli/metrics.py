"""`cronctl metrics`: the Prometheus text format. Registered on the app by cli.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from cronctl.cli.app import _ctx, app


@app.command()
def metrics(
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Write a node_exporter textfile "
                                                   "(atomically) instead of printing.")] = None,
) -> None:
    """Runs, last success, running, lateness, recoveries and loop state in Prometheus text format.

    Example: cronctl metrics -o /var/lib/node_exporter/textfile/cronctl.prom
    """
    from cronctl.ops.metrics import metrics_for

    data = metrics_for(_ctx())
    if output is None:
        sys.stdout.buffer.write(data)
        return
    from cronctl.ops.metrics import write_textfile

    write_textfile(output, data)
