"""The typer declarations of the commands that define jobs and read their definitions: add,
edit, remove, list, show, next, apply, validate, pause, resume (their arguments, options
and help). Registered on the app by cli/main.py.

What most of them do is in cli/job_actions.py, which the framework-free entry calls
too (cli/fastpath.py); these functions are what typer parses command lines into. Every
command module is imported for every command, so each command imports the use-case
module it calls (ops.definitions pulls in YAML and the schedule code) inside its own
body: a command loads only what it uses.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from cronctl.cli import job_actions, render
from cronctl.cli.app import (
    AlertAfterOpt,
    AllowPastOpt,
    AtOpt,
    CatchupOpt,
    CommandArg,
    CronOpt,
    CwdOpt,
    DeadlineOpt,
    EnvFileOpt,
    EnvOpt,
    EveryOpt,
    GraceKillOpt,
    GraceOpt,
    JitterOpt,
    JsonOpt,
    KeepLogOpt,
    KeepRunsOpt,
    LimitOpt,
    NotifyOnOpt,
    NotifyOpt,
    OnFailureOpt,
    OverlapOpt,
    PausedOpt,
    RepeatOpt,
    RetriesOpt,
    RetryDelayOpt,
    TimeoutOpt,
    TzOpt,
    UserOpt,
    app,
    cli_clock,
)
from cronctl.cli.job_actions import NO_OPTIONS
from cronctl.cli.joboptions import JobOptions

AfterOpt = Annotated[Optional[List[str]], typer.Option("--after", help="Run after this job (not on a schedule), "
                                                       "repeatable.")]
RequiresOpt = Annotated[Optional[str], typer.Option("--requires", help="With --after: success (default) | done.")]


def _job_options(
    cron: CronOpt = None, every: EveryOpt = None, at: AtOpt = None, timezone: TzOpt = None,
    cwd: CwdOpt = None, env: EnvOpt = None, timeout: TimeoutOpt = None, kill_grace: GraceKillOpt = None,
    overlap: OverlapOpt = None, catchup: CatchupOpt = None, starting_deadline: DeadlineOpt = None,
    retries: RetriesOpt = None, retry_delay: RetryDelayOpt = None, repeat: RepeatOpt = None,
    jitter: JitterOpt = None, grace: GraceOpt = None, on_failure: OnFailureOpt = None, paused: PausedOpt = None,
    after: AfterOpt = None, requires: RequiresOpt = None,
    user: UserOpt = None, env_file: EnvFileOpt = None, limits: LimitOpt = None, keep_runs: KeepRunsOpt = None,
    keep_log: KeepLogOpt = None,
    alert_after: AlertAfterOpt = None, notify: NotifyOpt = None, notify_on: NotifyOnOpt = None,
) -> None:
    """The job options of add and edit, declared once: typer reads this signature (takes_job_options)."""


def takes_job_options(command: Callable[..., None]) -> Callable[..., None]:
    """Gives a typer command the job options of `_job_options` in place of its `options`
    parameter (typer builds the command line from the signature), and hands the values
    typer parsed to it as one JobOptions (cli/joboptions.py)."""
    own = inspect.signature(command, eval_str=True)
    shared = list(inspect.signature(_job_options, eval_str=True).parameters.values())
    assert [param.name for param in shared] == list(JobOptions.names())
    parameters = [one for param in own.parameters.values() for one in (shared if param.name == "options" else [param])]

    @functools.wraps(command)
    def declared(**values: Any) -> None:
        command(**JobOptions.gather(values))

    del declared.__wrapped__  # typer must read the signature below, not the command's own
    declared.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
    declared.__annotations__ = {param.name: param.annotation for param in parameters}
    return declared


@app.command()
@takes_job_options
def add(
    name: Annotated[str, typer.Argument(help="Job name: [a-z0-9][a-z0-9._-]*")],
    command: CommandArg = None,
    options: JobOptions = NO_OPTIONS,
    allow_past: AllowPastOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Define a job.

    Example: cronctl add backup --cron "0 3 * * *" --tz Europe/Berlin -- "pg_dump db | gzip > /tmp/db.gz"
    """
    job_actions.add(name, command, options, json_out, allow_past)


@app.command()
@takes_job_options
def edit(
    name: Annotated[str, typer.Argument(help="Job to change.")],
    command: CommandArg = None,
    options: JobOptions = NO_OPTIONS,
    unset: Annotated[Optional[List[str]], typer.Option("--unset", help="Remove an optional field "
                                                       "(cwd, env, repeat, grace, ...), repeatable.")] = None,
    allow_past: AllowPastOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Change fields of a job; a schedule change counts from now.

    Example: cronctl edit backup --cron "30 3 * * *" --timeout 2h
    """
    job_actions.edit(name, command, options, unset, json_out, allow_past)


@app.command()
def remove(
    name: Annotated[str, typer.Argument(help="Job to delete.")],
    force: Annotated[bool, typer.Option("--force", help="Kill its running processes first; remove it "
                                                                "even if others run after it.")] = False,
) -> None:
    """Delete a job (refuses while it runs unless --force).

    Example: cronctl remove backup --force
    """
    job_actions.remove(name, force)


@app.command("list")
def list_cmd(
    prefix: Annotated[Optional[str], typer.Argument(
        metavar="NAME-PREFIX", help="Only the jobs whose name starts with this (default: all).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Definitions, state and next fire of every job, or of the jobs whose name starts with NAME-PREFIX.

    Example: cronctl list backup- --json
    """
    job_actions.list_jobs(prefix, json_out)


@app.command()
def show(name: Annotated[str, typer.Argument(help="Job to show.")], json_out: JsonOpt = False) -> None:
    """One job in full: definition, state, next fires.

    Example: cronctl show backup
    """
    job_actions.show(name, json_out)


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
    job_actions.next_fires(name, count, from_, json_out)


@app.command()
def apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML jobs file.")],
    prune: Annotated[bool, typer.Option("--prune", help="Remove jobs this file defined earlier "
                                        "and no longer does.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, change nothing.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Prune even jobs that others run after.")] = False,
    allow_past: AllowPastOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Create and update the jobs of a file (declarative, idempotent).

    Example: cronctl apply -f jobs.yaml --prune --dry-run
    """
    job_actions.apply(file, prune, dry_run, force, json_out, allow_past)


@app.command()
def validate(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML jobs file.")],
    allow_past: AllowPastOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Check a jobs file without touching the store.

    Example: cronctl validate -f jobs.example.yaml
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import definitions as ops

    specs, warnings = ops.validate_file(str(file), cli_clock().now(), allow_past)
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
    job_actions.pause(name)


@app.command()
def resume(
    name: Annotated[Optional[str], typer.Argument(help="Job to resume.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Resume every job.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Clear pause and error wedges and re-arm the job from now.

    Example: cronctl resume backup
    """
    job_actions.resume(name, all_jobs, json_out)
