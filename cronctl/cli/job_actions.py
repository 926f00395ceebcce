"""What the job commands do (add, edit, remove, list, show, next, pause, resume, apply),
without the CLI framework.

The typer commands of cli/job_commands.py call these with the values typer parsed; the
framework-free entry (cli/fastpath.py) calls the same functions with the values it parsed
from the plain forms of a command line. One body per command either way: what it does
and prints does not depend on who parsed its arguments. A body returns its exit code
(None: 0). Each imports the use-case module it calls inside its own body: a command
loads only what it uses.
"""

from __future__ import annotations

from pathlib import Path

from cronctl.cli import render
from cronctl.cli.joboptions import JobOptions
from cronctl.cli.session import open_context
from cronctl.errors import UsageError

NO_OPTIONS = JobOptions()  # none of the job options given


def add(name: str, command: list[str] | None = None, options: JobOptions = NO_OPTIONS, json_out: bool = False,
        allow_past: bool = False) -> None:
    """`cronctl add`."""
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    fields = options.fields(command_from_args(command))
    ctx = open_context()
    view = ops.add_job(ctx, ops.spec_from_options(name, fields), allow_past)
    views.added(view, ctx, json_out)
    _warn_unknown_user(name, view.spec.user)


def edit(name: str, command: list[str] | None = None, options: JobOptions = NO_OPTIONS,
         unset: list[str] | None = None, json_out: bool = False, allow_past: bool = False) -> None:
    """`cronctl edit`."""
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    changes = options.fields(command_from_args(command))
    ctx = open_context()
    view, changed = ops.edit_job(ctx, name, changes, unset or [], allow_past)
    views.edited(view, changed, ctx, json_out)
    if "user" in changed:
        _warn_unknown_user(name, view.spec.user)


def _warn_unknown_user(name: str, user: str | None) -> None:
    """As `validate` does: a user this host lacks is valid, but its runs here would not start."""
    from cronctl.jobs.operatorfields import user_warnings

    for warning in user_warnings(user):
        render.warn(f"job '{name}': {warning}")


def command_from_args(args: list[str] | None) -> str | list[str] | None:
    """One argument is a shell string (/bin/sh -c); several are an argv list."""
    if not args:
        return None
    return args[0] if len(args) == 1 else list(args)


def remove(name: str, force: bool = False) -> None:
    from cronctl.ops import definitions as ops

    removed = ops.remove_job(open_context(), name, force)
    killed = removed.killed
    render.say(f"removed {name}" + (f" (killed {killed} running run(s))" if killed else ""))
    if removed.source:
        render.warn(f"job '{name}' came from {removed.source}: the next 'cronctl apply -f' or 'cronctl run -f' "
                    "of that file creates it again; remove it from the file to keep it gone")


def list_jobs(prefix: str | None = None, json_out: bool = False) -> None:
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    ctx = open_context()
    found = ops.list_jobs(ctx, prefix)
    if prefix and not found and not json_out:
        render.say(f"no job name starts with '{prefix}' (see 'cronctl list')")
        return
    views.job_list(found, ctx, json_out)


def show(name: str, json_out: bool = False) -> None:
    from cronctl.cli import views
    from cronctl.ops import definitions as ops
    from cronctl.ops.chains import chain_graph

    ctx = open_context()
    shown = ops.show_job(ctx, name)
    graph = chain_graph(ctx, name)
    if json_out and graph is not None:  # a chain job: each root's last chain, node by node
        render.print_json({**views.job_json(shown, ctx), "chains": graph.last})
        return
    views.job_shown(shown, ctx, json_out)
    for tree in graph.trees if graph and not json_out else []:
        render.say("\nchain:\n" + "\n".join("  " + line for line in tree))


def next_fires(name: str | None = None, count: int = 5, from_: str | None = None, json_out: bool = False) -> None:
    from cronctl.cli import views
    from cronctl.ops import definitions as ops

    ctx = open_context()
    start = ops.parse_instant(from_, keep_naive=True) if from_ else None  # naive: in each job's zone
    views.next_fires(ops.next_fires(ctx, name, count, start), json_out)


def pause(name: str) -> None:
    from cronctl.ops import definitions as ops

    changed = ops.pause_job(open_context(), name)
    render.say(f"paused {name}" if changed else f"{name} was already paused")


def resume(name: str | None = None, all_jobs: bool = False, json_out: bool = False) -> None:
    if bool(name) == all_jobs:
        raise UsageError("give a job name or --all")
    from cronctl.cli import views
    from cronctl.ops.resume import resume as resume_jobs

    done = resume_jobs(open_context(), None if all_jobs else [name or ""])
    views.resumed(done.released, done.jobs, json_out)


def apply(file: str | Path, prune: bool = False, dry_run: bool = False, force: bool = False,
          json_out: bool = False, allow_past: bool = False) -> None:
    from cronctl.cli.yield_cpu import in_idle_thread, yield_cpu_for
    from cronctl.ops import definitions as ops

    # A big file's parse and write leave the host's loops their CPU first (yield_cpu.py): its
    # parse and its new rows made on an idle thread before the write (ops/apply_ahead.py).
    big = yield_cpu_for(file)
    # str(Path(...)): the file as typer hands it over ("./jobs.yaml" is "jobs.yaml"), either way in.
    plan = ops.apply_file(open_context(), str(Path(file)), prune=prune, dry_run=dry_run, force=force,
                          allow_past=allow_past, ahead=in_idle_thread if big else None)
    for warning in plan.warnings:
        render.warn(warning)
    if json_out:
        render.print_json(plan.to_dict())
    else:
        render.apply_plan(plan.to_dict(), dry_run)
