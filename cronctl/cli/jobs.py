"""The commands that define jobs and read their definitions: add, edit, remove, list, show,
next, apply, validate, pause, resume. Registered on the app by cli/main.py.

Every command module is imported for every command, so each command imports the use-case
module it calls (ops.definitions pulls in YAML and the schedule code) and cli.views inside
its own body: a command loads only what it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from cronctl.cli import render
from cronctl.cli.app import (
    AtOpt,
    CatchupOpt,
    CommandArg,
    CronOpt,
    CwdOpt,
    DeadlineOpt,
    EnvOpt,
    EveryOpt,
    GraceKillOpt,
    GraceOpt,
    JitterOpt,
    JsonOpt,
    OnFailureOpt,
    OverlapOpt,
    PausedOpt,
    RepeatOpt,
    RetriesOpt,
    RetryDelayOpt,
    TimeoutOpt,
    TzOpt,
    app,
    cli_clock,
    open_context,
)
from cronctl.errors import UsageError

AfterOpt = Annotated[Optional[List[str]], typer.Option("--after", help="Run after this job (not on a schedule), "
                                                       "repeatable.")]
RequiresOpt = Annotated[Optional[str], typer.Option("--requires", help="With --after: success (default) | done.")]


@app.command()
def add(
    name: Annotated[str, typer.Argument(help="Job name: [a-z0-9][a-z0-9._-]*")],
    command: CommandArg = None,
    cron: CronOpt = None, every: EveryOpt = None, at: AtOpt = None, timezone: TzOpt = None,
    cwd: CwdOpt = None, env: EnvOpt = None, timeout: TimeoutOpt = None, kill_grace: GraceKillOpt = None,
    overlap: OverlapOpt = None, catchup: CatchupOpt = None, starting_deadline: DeadlineOpt = None,
    retries: RetriesOpt = None, retry_delay: RetryDelayOpt = None, repeat: RepeatOpt = None,
    jitter: JitterOpt = None, grace: GraceOpt = None, on_failure: OnFailureOpt = None, paused: PausedOpt = None,
    after: AfterOpt = None, requires: RequiresOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Define a job.

    Example: cronctl add backup --cron "0 3 * * *" --tz Europe/Berlin -- "pg_dump db | gzip > /tmp/db.gz"
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    options = _collect_options(
        cron=cron, every=every, at=at, timezone=timezone, cwd=cwd, env=env, timeout=timeout,
        kill_grace=kill_grace, overlap=overlap, catchup=catchup, starting_deadline=starting_deadline,
        retries=retries, retry_delay=retry_delay, repeat=repeat, jitter=jitter, grace=grace,
        on_failure=on_failure, paused=paused, command=_command_from_args(command),
        after=after, requires=requires,
    )
    ctx = open_context()
    view = ops.add_job(ctx, ops.spec_from_options(name, options))
    views.added(view, ctx, json_out)


@app.command()
def edit(
    name: Annotated[str, typer.Argument(help="Job to change.")],
    command: CommandArg = None,
    cron: CronOpt = None, every: EveryOpt = None, at: AtOpt = None, timezone: TzOpt = None,
    cwd: CwdOpt = None, env: EnvOpt = None, timeout: TimeoutOpt = None, kill_grace: GraceKillOpt = None,
    overlap: OverlapOpt = None, catchup: CatchupOpt = None, starting_deadline: DeadlineOpt = None,
    retries: RetriesOpt = None, retry_delay: RetryDelayOpt = None, repeat: RepeatOpt = None,
    jitter: JitterOpt = None, grace: GraceOpt = None, on_failure: OnFailureOpt = None, paused: PausedOpt = None,
    after: AfterOpt = None, requires: RequiresOpt = None,
    unset: Annotated[Optional[List[str]], typer.Option("--unset", help="Remove an optional field "
                                                       "(cwd, env, repeat, grace, ...), repeatable.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Change fields of a job; a schedule change counts from now.

    Example: cronctl edit backup --cron "30 3 * * *" --timeout 2h
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    changes = _collect_options(
        cron=cron, every=every, at=at, timezone=timezone, cwd=cwd, env=env, timeout=timeout,
        kill_grace=kill_grace, overlap=overlap, catchup=catchup, starting_deadline=starting_deadline,
        retries=retries, retry_delay=retry_delay, repeat=repeat, jitter=jitter, grace=grace,
        on_failure=on_failure, paused=paused, command=_command_from_args(command),
        after=after, requires=requires,
    )
    ctx = open_context()
    view, changed = ops.edit_job(ctx, name, changes, unset or [])
    views.edited(view, changed, ctx, json_out)


def _collect_options(**given: Any) -> dict[str, Any]:
    """Turn CLI option values into the YAML-shaped fields build_spec validates."""
    options: dict[str, Any] = {}
    for key, value in given.items():
        if value is None or value == []:
            continue
        if key == "env":
            options["env"] = _parse_env_pairs(value)
        else:
            options[key] = value
    return options


def _parse_env_pairs(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[key] = value
    return env


def _command_from_args(args: list[str] | None) -> str | list[str] | None:
    """One argument is a shell string (/bin/sh -c); several are an argv list."""
    if not args:
        return None
    return args[0] if len(args) == 1 else list(args)


@app.command()
def remove(
    name: Annotated[str, typer.Argument(help="Job to delete.")],
    force: Annotated[bool, typer.Option("--force", help="Kill its running processes first; remove it "
                                                                "even if others run after it.")] = False,
) -> None:
    """Delete a job (refuses while it runs unless --force).

    Example: cronctl remove backup --force
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import definitions as ops

    killed = ops.remove_job(open_context(), name, force)
    render.say(f"removed {name}" + (f" (killed {killed} running run(s))" if killed else ""))


@app.command("list")
def list_cmd(json_out: JsonOpt = False) -> None:
    """Definitions, state and next fire of every job.

    Example: cronctl list --json
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    ctx = open_context()
    views.job_list(ops.list_jobs(ctx), ctx, json_out)


@app.command()
def show(name: Annotated[str, typer.Argument(help="Job to show.")], json_out: JsonOpt = False) -> None:
    """One job in full: definition, state, next fires.

    Example: cronctl show backup
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    ctx = open_context()
    views.job_shown(ops.show_job(ctx, name), ctx, json_out)
    if not json_out:
        from cronctl.ops.chains import chain_graph

        graph = chain_graph(ctx, name)
        for tree in graph.trees if graph else []:
            render.say("\nchain:\n" + "\n".join("  " + line for line in tree))


@app.command("next")
def next_cmd(
    name: Annotated[Optional[str], typer.Argument(help="Job (default: all).")] = None,
    count: Annotated[int, typer.Option("-n", "--count", min=1, max=1000, help="How many instants.")] = 5,
    from_: Annotated[Optional[str], typer.Option("--from", help="Start at this ISO instant instead of now.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The next fire instants, in the job's zone and UTC.

    Example: cronctl next backup -n 3 --from 2026-10-24T00:00:00+02:00
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    ctx = open_context()
    start = ops.parse_instant(from_, keep_naive=True) if from_ else None  # naive: in each job's zone
    views.next_fires(ops.next_fires(ctx, name, count, start), json_out)


@app.command()
def apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML jobs file.")],
    prune: Annotated[bool, typer.Option("--prune", help="Remove jobs this file defined earlier "
                                        "and no longer does.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, change nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Prune even jobs that others run after.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Create and update the jobs of a file (declarative, idempotent).

    Example: cronctl apply -f jobs.yaml --prune --dry-run
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import definitions as ops

    plan = ops.apply_file(open_context(), str(file), prune=prune, dry_run=dry_run, force=force)
    for warning in plan.warnings:
        render.warn(warning)
    if json_out:
        render.print_json(plan.to_dict())
    else:
        render.apply_plan(plan.to_dict(), dry_run)


@app.command()
def validate(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML jobs file.")],
    json_out: JsonOpt = False,
) -> None:
    """Check a jobs file without touching the store.

    Example: cronctl validate -f jobs.example.yaml
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import definitions as ops

    specs, warnings = ops.validate_file(str(file), cli_clock().now())
    for warning in warnings:
        render.warn(warning)
    if json_out:
        render.print_json({"file": str(file), "valid": True, "jobs": [s.name for s in specs]})
    else:
        names = f": {', '.join(s.name for s in specs)}" if specs else " (the file defines no jobs)"
        render.say(f"{file}: {len(specs)} job(s) valid{names}")


@app.command()
def pause(name: Annotated[str, typer.Argument(help="Job to pause.")]) -> None:
    """Stop firing a job until it is resumed (a running run is not touched).

    Example: cronctl pause backup
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import definitions as ops

    changed = ops.pause_job(open_context(), name)
    render.say(f"paused {name}" if changed else f"{name} was already paused")


@app.command()
def resume(
    name: Annotated[Optional[str], typer.Argument(help="Job to resume.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Resume every job.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Clear pause and error wedges and re-arm the job from now.

    Example: cronctl resume backup
    """
    if bool(name) == all_jobs:
        raise UsageError("give a job name or --all")
    # Imported here: only this command needs it (start-up time).
    from cronctl.cli import views
    from cronctl.ops.resume import resume as resume_jobs

    done = resume_jobs(open_context(), None if all_jobs else [name or ""])
    views.resumed(done.released, done.jobs, json_out)
