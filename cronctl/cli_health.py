"""Commands about cronctl's own health: doctor. Registered on the app by cli.py."""

from __future__ import annotations

from typing import Annotated

import typer

from cronctl.cli import JsonOpt, _ctx, app


@app.command()
def doctor(
    repair: Annotated[bool, typer.Option("--repair", help="Restore the last good store if the current one "
                                         "does not parse, and kill orphaned run processes.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Check store, locks, heartbeat and orphaned processes; exit 1 when action is needed.

    Example: cronctl doctor --repair
    """
    from cronctl import doctor as doctor_mod
    from cronctl import render

    ctx = _ctx()
    repaired = doctor_mod.repair(ctx.paths, ctx.store) if repair else []
    findings = doctor_mod.examine(ctx.paths, ctx.store, ctx.clock.now())
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


def release_stuck_runs(ctx: object, names: list[str] | None) -> list[str]:
    """resume's first step: runs held by a dead or hung owner are killed and their claims released."""
    import time

    from cronctl.heal import Liveness, release_stuck_claims
    from cronctl.liveness import lease_checker, owner_alive
    from cronctl.loopstate import loop_status
    from cronctl.scheduler import kill_run_processes

    loop = loop_status(ctx.paths, ctx.clock.now())  # type: ignore[attr-defined]
    wedged_pid = loop.pid if loop.state == "wedged" else None
    live = Liveness(owner_alive=owner_alive, lease_expired=lease_checker(), monotonic=time.monotonic)
    jobs = names if names is not None else sorted(ctx.store.read()["jobs"])  # type: ignore[attr-defined]
    released: list[str] = []
    for job in jobs:
        released.extend(release_stuck_claims(ctx, job, live, kill_run_processes, wedged_pid))  # type: ignore[arg-type]
    return released
