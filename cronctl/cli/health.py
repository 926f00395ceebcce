"""Commands about cronctl's own health: doctor. Registered on the app by cli/main.py.

Every command module is imported for every command, so the doctor's module (it reads
processes and the loop's files) is imported inside the command.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cronctl.cli import render
from cronctl.cli.app import JsonOpt, app, open_context


@app.command()
def doctor(
    repair: Annotated[bool, typer.Option("--repair", help="Restore the last good store if the current one "
                                         "does not parse, and kill orphaned run processes.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Check store, locks, heartbeat and orphaned processes; exit 1 when action is needed.

    Example: cronctl doctor --repair
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import doctor as doctor_mod

    ctx = open_context()
    repaired = doctor_mod.repair(ctx.paths, ctx.store) if repair else []
    findings = doctor_mod.examine(ctx.paths, ctx.store, ctx.clock.now(), ctx.cluster)
    if json_out:
        render.print_json({"repaired": repaired, "findings": [f.to_dict() for f in findings],
                           "action_needed": doctor_mod.needs_action(findings)})
    else:
        for line in repaired:
            render.say(f"repaired: {line}")
        for finding in findings:
            fix = f"\n    fix: {finding.fix}" if finding.fix and finding.level != "ok" else ""
            render.say(f"[{finding.level}] {finding.check}: {finding.message}{fix}")
    if doctor_mod.needs_action(findings):
        raise typer.Exit(1)
