"""`cronctl store ...`: the PostgreSQL store. Registered on the app by cli/main.py, after the others."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from cronctl.cli.app import JsonOpt, app, open_context

store_app = typer.Typer(help="The PostgreSQL store named by --store or $CRONCTL_STORE.\n\n"
                        "Example: cronctl --store postgresql://cronctl@db/cronctl store import-json",
                        no_args_is_help=True)
app.add_typer(store_app, name="store")


@store_app.command("import-json")
def import_json(
    source: Annotated[Optional[Path], typer.Option("--from", metavar="HOME", help="The home whose JSON store to "
                                                   "copy (default: this invocation's home).")] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Replace the PostgreSQL store's jobs, runs and "
                                          "counters instead of refusing jobs it already has.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Copy a home's job definitions, their state and run history into the PostgreSQL store, in one transaction.

    Example: cronctl --store postgresql://cronctl@db/cronctl store import-json --from ~/.local/state/cronctl
    """
    ctx = open_context()  # first: a missing PostgreSQL driver is said there, in one line
    # Imported here: only this command needs the PostgreSQL driver (start-up time).
    from cronctl.ops.store_import import import_json as run_import

    report = run_import(ctx, source, replace)
    done = report.imported
    if as_json:
        print(json.dumps({"from": str(report.source), "store": report.target, "jobs": done.jobs,
                          "records": done.records, "duplicates_skipped": done.duplicates}, sort_keys=True))
        return
    print(f"imported {done.jobs} job(s) and {done.records} history record(s) from {report.source} "
          f"into {report.target}")
    if done.duplicates:
        print(f"skipped {done.duplicates} history record(s) of a run already in the store")


@store_app.command("forget-host")
def forget_host(
    host: Annotated[str, typer.Argument(metavar="HOST", help="The host id, as `status` lists it.")],
    as_json: JsonOpt = False,
) -> None:
    """Forget every loop of HOST at once (a decommissioned host): `status` stops listing it.

    Refused while a loop of HOST still beats. Its runs still claimed are reclaimed by the other
    loops once their leases run out, as always. A silent host is also forgotten by itself,
    after `cronctl run --forget-after` (15 min) once its runs are all reclaimed.

    Example: cronctl store forget-host web-3
    """
    ctx = open_context()
    from cronctl.ops.cluster import forget_host as forget

    done = forget(ctx, host)
    if as_json:
        print(json.dumps({"host": host, "loops": [loop.details() for loop in done.loops],
                          "live_runs": done.live_runs}, sort_keys=True))
        return
    print(f"forgot {len(done.loops)} loop(s) of host {host}")
    if done.live_runs:
        print(f"{done.live_runs} run(s) of host {host} are still claimed: the other loops reclaim them once "
              "their leases run out")
