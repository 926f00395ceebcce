"""The typer app: one short function per command, and the one place errors become exit codes."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from cronctl import __version__

app = typer.Typer(
    name="cronctl",
    help="A cron for one host that never fails silently.",
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help texts are plain words: "[a-z0-9][a-z0-9._-]*" must not be read as rich markup.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# "clock" is the test seam of the CLI: tests put a FakeClock here; None means the system clock.
_state: dict[str, Any] = {"home": None, "clock": None}

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output with stable keys.")]


def _version(value: bool) -> None:
    if value:
        print(f"cronctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    home: Annotated[Optional[Path], typer.Option("--home", help="State directory (default $CRONCTL_HOME, "
                                                 "$XDG_STATE_HOME/cronctl, ~/.local/state/cronctl).")] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    _state["home"] = home


def _ctx():  # type: ignore[no-untyped-def]
    from cronctl.context import Context
    from cronctl.paths import resolve_home

    return Context.open(resolve_home(_state["home"]), clock=_state["clock"])


def _store_ctx():  # type: ignore[no-untyped-def]
    """A context whose store is known to parse: a command that needs the store fails
    on a corrupt one (exit 1, naming the file) even when it would not otherwise read it."""
    ctx = _ctx()
    ctx.store.read()
    return ctx


# --- job options shared by add and edit -----------------------------------------


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
    from cronctl.errors import UsageError

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


CronOpt = Annotated[Optional[str], typer.Option("--cron", help="5-field cron expression or @daily etc.")]
EveryOpt = Annotated[Optional[str], typer.Option("--every", help="Interval, e.g. 30s, 5m.")]
AtOpt = Annotated[Optional[str], typer.Option("--at", help="One-shot ISO 8601 instant.")]
TzOpt = Annotated[Optional[str], typer.Option("--timezone", "--tz", help="IANA zone (default UTC).")]
CwdOpt = Annotated[Optional[str], typer.Option("--cwd", help="Working directory.")]
EnvOpt = Annotated[Optional[List[str]], typer.Option("--env", "-e", help="NAME=VALUE, repeatable.")]
TimeoutOpt = Annotated[Optional[str], typer.Option("--timeout", help="Default 1h; 0 = none.")]
GraceKillOpt = Annotated[Optional[str], typer.Option("--kill-grace", help="SIGTERM to SIGKILL wait (10s).")]
OverlapOpt = Annotated[Optional[str], typer.Option("--overlap", help="skip | allow | replace.")]
CatchupOpt = Annotated[Optional[str], typer.Option("--catchup", help="latest | skip.")]
DeadlineOpt = Annotated[Optional[str], typer.Option("--starting-deadline", help="Later than this = missed.")]
RetriesOpt = Annotated[Optional[int], typer.Option("--retries", help="Extra attempts after a failure.")]
RetryDelayOpt = Annotated[Optional[str], typer.Option("--retry-delay", help="First retry delay (doubles).")]
RepeatOpt = Annotated[Optional[int], typer.Option("--repeat", help="Stop after N runs.")]
JitterOpt = Annotated[Optional[str], typer.Option("--jitter", help="Stable per-job delay in [0, jitter).")]
GraceOpt = Annotated[Optional[str], typer.Option("--grace", help="How late before 'late' (default: half cadence).")]
OnFailureOpt = Annotated[Optional[str], typer.Option("--on-failure", help="Shell command run after a failure.")]
PausedOpt = Annotated[Optional[bool], typer.Option("--paused/--not-paused", help="Define it paused.")]
CommandArg = Annotated[Optional[List[str]], typer.Argument(help="The command after --: one argument is a "
                                                          "shell string, several are an argv list.")]


@app.command()
def add(
    name: Annotated[str, typer.Argument(help="Job name: [a-z0-9][a-z0-9._-]*")],
    command: CommandArg = None,
    cron: CronOpt = None, every: EveryOpt = None, at: AtOpt = None, timezone: TzOpt = None,
    cwd: CwdOpt = None, env: EnvOpt = None, timeout: TimeoutOpt = None, kill_grace: GraceKillOpt = None,
    overlap: OverlapOpt = None, catchup: CatchupOpt = None, starting_deadline: DeadlineOpt = None,
    retries: RetriesOpt = None, retry_delay: RetryDelayOpt = None, repeat: RepeatOpt = None,
    jitter: JitterOpt = None, grace: GraceOpt = None, on_failure: OnFailureOpt = None, paused: PausedOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Define a job.

    Example: cronctl add backup --cron "0 3 * * *" --tz Europe/Berlin -- "pg_dump db | gzip > /tmp/db.gz"
    """
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    options = _collect_options(
        cron=cron, every=every, at=at, timezone=timezone, cwd=cwd, env=env, timeout=timeout,
        kill_grace=kill_grace, overlap=overlap, catchup=catchup, starting_deadline=starting_deadline,
        retries=retries, retry_delay=retry_delay, repeat=repeat, jitter=jitter, grace=grace,
        on_failure=on_failure, paused=paused, command=_command_from_args(command),
    )
    ctx = _ctx()
    view = ops.add_job(ctx, ops.spec_from_options(name, options))
    if json_out:
        render.print_json(_job_json(view, ctx))
    else:
        render.say(f"added {name}: {view.spec.schedule_text} ({view.spec.timezone}), {_next_fire_text(view)}")
        _warn_if_past(view, ctx)


@app.command()
def edit(
    name: Annotated[str, typer.Argument(help="Job to change.")],
    command: CommandArg = None,
    cron: CronOpt = None, every: EveryOpt = None, at: AtOpt = None, timezone: TzOpt = None,
    cwd: CwdOpt = None, env: EnvOpt = None, timeout: TimeoutOpt = None, kill_grace: GraceKillOpt = None,
    overlap: OverlapOpt = None, catchup: CatchupOpt = None, starting_deadline: DeadlineOpt = None,
    retries: RetriesOpt = None, retry_delay: RetryDelayOpt = None, repeat: RepeatOpt = None,
    jitter: JitterOpt = None, grace: GraceOpt = None, on_failure: OnFailureOpt = None, paused: PausedOpt = None,
    unset: Annotated[Optional[List[str]], typer.Option("--unset", help="Remove an optional field "
                                                       "(cwd, env, repeat, grace, ...), repeatable.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Change fields of a job; a schedule change counts from now.

    Example: cronctl edit backup --cron "30 3 * * *" --timeout 2h
    """
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    changes = _collect_options(
        cron=cron, every=every, at=at, timezone=timezone, cwd=cwd, env=env, timeout=timeout,
        kill_grace=kill_grace, overlap=overlap, catchup=catchup, starting_deadline=starting_deadline,
        retries=retries, retry_delay=retry_delay, repeat=repeat, jitter=jitter, grace=grace,
        on_failure=on_failure, paused=paused, command=_command_from_args(command),
    )
    ctx = _ctx()
    view, changed = ops.edit_job(ctx, name, changes, unset or [])
    if json_out:
        render.print_json({"job": _job_json(view, ctx), "changed": changed})
    elif changed:
        render.say(f"updated {name}: {', '.join(changed)}; {_next_fire_text(view)}")
        _warn_if_past(view, ctx)
        if view.spec.source:
            render.warn(f"{name} is defined by {view.spec.source}; the next apply of that file overrides this edit")
    else:
        render.say(f"{name}: nothing changed")


@app.command()
def remove(
    name: Annotated[str, typer.Argument(help="Job to delete.")],
    force: Annotated[bool, typer.Option("--force", help="Kill its running processes first.")] = False,
) -> None:
    """Delete a job (refuses while it runs unless --force).

    Example: cronctl remove backup --force
    """
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    killed = ops.remove_job(_ctx(), name, force)
    render.say(f"removed {name}" + (f" (killed {killed} running run(s))" if killed else ""))


@app.command("list")
def list_cmd(json_out: JsonOpt = False) -> None:
    """Definitions, state and next fire of every job.

    Example: cronctl list --json
    """
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    ctx = _ctx()
    views = ops.list_jobs(ctx)
    if json_out:
        render.print_json({"jobs": [_job_json(v, ctx) for v in views]})
        return
    render.jobs_table((_job_row(v, ctx) for v in views), ctx.clock.now())


@app.command()
def show(name: Annotated[str, typer.Argument(help="Job to show.")], json_out: JsonOpt = False) -> None:
    """One job in full: definition, state, next fires.

    Example: cronctl show backup
    """
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    ctx = _ctx()
    view = ops.show_job(ctx, name)
    data = _job_json(view, ctx)
    if json_out:
        render.print_json(data)
        return
    render.job_detail(_detail_fields(data))


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
    from zoneinfo import ZoneInfo

    from cronctl.cli import render
    from cronctl.ops import definitions as ops
    from cronctl.schedule.slots import fire_at
    from cronctl.timefmt import to_iso

    ctx = _ctx()
    start = ops.parse_instant(from_) if from_ else None
    results = ops.next_fires(ctx, name, count, start)
    rows = []
    for result in results:
        zone = ZoneInfo(result.view.spec.timezone)
        fires = [fire_at(result.view.spec, slot) for slot in result.instants]
        rows.append((result.view.spec.name, result.view.spec.timezone, [(f.astimezone(zone), f) for f in fires]))
    paused = {result.view.spec.name for result in results if result.view.paused}
    if json_out:
        render.print_json({"jobs": [
            {"name": job, "timezone": zone, "paused": job in paused,
             "fires": [{"local": render.local_iso(l), "utc": to_iso(u)} for l, u in inst]}
            for job, zone, inst in rows
        ]})
        return
    from cronctl.jobs.words import describe

    render.next_table(rows, paused, words={r.view.spec.name: describe(r.view.spec) for r in results})


@app.command()
def apply(
    file: Annotated[Path, typer.Option("-f", "--file", help="YAML jobs file.")],
    prune: Annotated[bool, typer.Option("--prune", help="Remove jobs this file defined earlier "
                                        "and no longer does.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan, change nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Create and update the jobs of a file (declarative, idempotent).

    Example: cronctl apply -f jobs.yaml --prune --dry-run
    """
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    plan = ops.apply_file(_ctx(), str(file), prune=prune, dry_run=dry_run)
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
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    specs = ops.validate_file(str(file))
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
    from cronctl.cli import render
    from cronctl.ops import definitions as ops

    changed = ops.pause_job(_ctx(), name)
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
    from cronctl.cli import render
    from cronctl.errors import UsageError
    from cronctl.ops import definitions as ops
    from cronctl.timefmt import from_iso

    if bool(name) == all_jobs:
        raise UsageError("give a job name or --all")
    from cronctl.ops.runs import release_stuck_runs

    ctx = _ctx()
    names = None if all_jobs else [name or ""]
    ops.require_jobs(ctx, names)
    released = release_stuck_runs(ctx, names)
    results = ops.resume_jobs(ctx, names)
    if json_out:
        render.print_json({"jobs": [r.__dict__ for r in results], "released_runs": released})
        return
    for run_id in released:
        render.say(f"released run {run_id}: its owner was dead or hung; its processes were killed")
    for result in results:
        cleared = f" (cleared {', '.join(result.cleared)})" if result.cleared else ""
        fire = render.fire_text(from_iso(result.next_fire_at), result.timezone) if result.next_fire_at else "-"
        render.say(f"resumed {result.name}{cleared}; next fire {fire}")
        if result.still_paused_by:
            render.warn(f"{result.name} stays paused: its file {result.still_paused_by} says paused: true")


@app.command()
def audit(
    job: Annotated[Optional[str], typer.Option("--job", help="Only rows of this job.")] = None,
    event: Annotated[Optional[str], typer.Option("--event", help="Event name, or a prefix like 'run.*'.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="ISO instant, or a duration ago like 1h.")] = None,
    count: Annotated[int, typer.Option("-n", min=0, help="Last N rows.")] = 50,
    json_out: JsonOpt = False,
) -> None:
    """Read the audit log.

    Example: cronctl audit --job backup --event 'run.*' --since 1h
    """
    from cronctl.cli import render
    from cronctl.store import audit as audit_mod

    ctx = _ctx()
    rows = audit_mod.filter_rows(ctx.audit.rows(), job=job, event=event,
                                 since=_since(since, ctx) if since else None, limit=count)
    if json_out:
        render.print_json({"rows": rows})
    else:
        render.audit_rows(rows)


def _since(text: str, ctx: Any) -> Any:
    from datetime import timedelta

    from cronctl.durations import parse_duration
    from cronctl.errors import CronctlError, UsageError
    from cronctl.ops import definitions as ops

    try:
        return ctx.clock.now() - timedelta(seconds=parse_duration(text, field="--since"))
    except CronctlError:
        pass
    try:
        return ops.parse_instant(text)
    except CronctlError:
        raise UsageError(f"--since {text!r}: expected an ISO 8601 instant like 2026-12-24T09:00:00+01:00 "
                         "or a duration ago like 30m, 1h, 2d") from None


@app.command()
def run(
    file: Annotated[Optional[Path], typer.Option("-f", "--file", help="Apply this YAML file at start "
                                                 "and whenever it changes.")] = None,
    once: Annotated[bool, typer.Option("--once", help="Fire what is due now, wait for it, exit.")] = False,
    standby: Annotated[bool, typer.Option("--standby", help="Wait beside a running loop and take over "
                                          "when it dies or wedges.")] = False,
    max_parallel: Annotated[Optional[int], typer.Option("--max-parallel", min=1,
                                                        help="At most N runs at once.")] = None,
    takeover_after: Annotated[str, typer.Option("--takeover-after", help="With --standby: a leader whose "
                                                "heartbeat is this stale is killed and replaced.")] = "60s",
    lease: Annotated[str, typer.Option("--lease", help="Claim lease, renewed while a run is supervised.")] = "60s",
    metrics_file: Annotated[Optional[Path], typer.Option("--metrics-file", help="Keep a Prometheus textfile "
                                                         "(node_exporter) up to date.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print no line per run (the audit log "
                                        "still has every decision).")] = False,
    http: Annotated[Optional[str], typer.Option("--http", metavar="ADDR:PORT", help="Serve /metrics, /healthz "
                                                "and /livez here (loopback unless --http-allow-remote).")] = None,
    http_allow_remote: Annotated[bool, typer.Option("--http-allow-remote", help="Let --http listen on a "
                                                    "non-loopback address.")] = False,
) -> None:
    """The foreground loop: fires due jobs until SIGTERM/SIGINT.

    Example: cronctl run -f jobs.yaml --max-parallel 50
    """
    from cronctl.durations import parse_duration
    from cronctl.loop.endpoint import parse_listen
    from cronctl.loop.scheduler import LoopOptions
    from cronctl.ops.runs import run_loop

    options = LoopOptions(file=file.absolute() if file else None, once=once, standby=standby,
                          max_parallel=max_parallel, takeover_after=parse_duration(takeover_after, field="--takeover-after"),
                          lease=parse_duration(lease, field="--lease"),
                          metrics_file=metrics_file.absolute() if metrics_file else None, quiet=quiet,
                          http=parse_listen(http, http_allow_remote) if http else None)
    ctx = _ctx()
    if not quiet:
        ctx.audit.listeners.append(_echo_decision)
    raise typer.Exit(run_loop(ctx, options))


def _echo_decision(row: dict[str, Any]) -> None:
    from cronctl.cli.render import loop_line

    line = loop_line(row)
    if line is not None:
        print(line, file=sys.stderr, flush=True)


@app.command()
def status(
    stale: Annotated[bool, typer.Option("--stale", help="Only what is stale; exit 3 if anything is.")] = False,
    json_out: JsonOpt = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="A live view, redrawn until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option("--interval", min=0.2, help="Seconds between redraws "
                                            "with --watch.")] = 2.0,
) -> None:
    """The loop and every job, with the reason in plain words.

    Example: cronctl status --stale || alert "cron is stale"
    """
    from cronctl.cli import render
    from cronctl.ops.status import status as status_report
    from cronctl.ops.status import status_json

    ctx = _ctx()
    if watch:
        from datetime import datetime

        def frame() -> list[str]:
            data = status_json(status_report(ctx), only_stale=stale)
            title = f"cronctl status — {datetime.now().strftime('%H:%M:%S')} — Ctrl-C to quit"
            return [title, *render.status_lines(data, stale)]

        render.watch(frame, interval)
        return
    report = status_report(ctx)
    data = status_json(report, only_stale=stale)
    if json_out:
        render.print_json(data)
    else:
        render.status_view(data, stale)
    if stale and report.stale:
        raise typer.Exit(3)


@app.command()
def history(
    name: Annotated[Optional[str], typer.Argument(help="Job (default: all).")] = None,
    count: Annotated[int, typer.Option("-n", min=0, help="Last N runs.")] = 20,
    json_out: JsonOpt = False,
) -> None:
    """Past runs: slot, trigger, start, duration, status, reason.

    Example: cronctl history backup -n 5
    """
    from cronctl.cli import render
    from cronctl.ops import runs as runops

    records = runops.run_history(_store_ctx(), name, count)
    if json_out:
        render.print_json({"runs": records})
    else:
        render.history_table(records)


@app.command()
def logs(
    name: Annotated[str, typer.Argument(help="Job.")],
    run_id: Annotated[Optional[str], typer.Option("--run", help="Run id (default: the last run).")] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing while the run goes on.")] = False,
) -> None:
    """A run's captured output.

    Example: cronctl logs backup -f
    """
    from cronctl.ops import runs as runops

    ctx = _ctx()
    run_id, path = runops.log_path(ctx, name, run_id)
    _print_log(ctx, name, run_id, path, follow)


def _print_log(ctx: Any, job: str, run_id: str, path: Path, follow: bool) -> None:
    import time

    from cronctl.ops import runs as runops

    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(65536)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            if not follow or not runops.run_is_active(ctx, job, run_id):
                rest = handle.read()
                sys.stdout.buffer.write(rest)
                return
            time.sleep(0.2)


@app.command("force-run")
def force_run(
    name: Annotated[str, typer.Argument(help="Job to fire now.")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait and exit with the run's status "
                                       "(0, the job's exit code, 124 on timeout).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Fire a job now, once, outside its schedule (next_run_at is not moved).

    Example: cronctl force-run backup --wait
    """
    from cronctl.cli import render
    from cronctl.ops import runs as runops

    result = runops.force_run(_ctx(), name, wait)
    record = result.record
    if json_out:
        render.print_json({"run_id": result.run_id, "via_loop": result.via_loop, "run": record})
    elif record is None:
        render.say(f"started {name} run {result.run_id} through the running loop; "
                   f"'cronctl logs {name} -f' follows it")
    else:
        render.say(f"{name} run {result.run_id}: {record['status']}"
                   + (f" ({record['reason']})" if record.get("reason") else ""))
    if wait or not result.via_loop:
        raise typer.Exit(runops.exit_code_of(record) if wait else 0)


@app.command()
def kill(name: Annotated[str, typer.Argument(help="Job whose runs to end.")]) -> None:
    """End a running job (its whole process group, SIGTERM then SIGKILL); recorded `killed`.

    Example: cronctl kill backup
    """
    from cronctl.cli import render
    from cronctl.ops import runs as runops

    killed = runops.kill_job(_ctx(), name)
    render.say(f"killed {name}: {', '.join(killed)}" if killed else f"{name}: nothing was left to kill")


# --- shared view helpers ---------------------------------------------------------


def _job_json(view: Any, ctx: Any) -> dict[str, Any]:
    from cronctl.jobs.health import job_health
    from cronctl.jobs.state import entry_from
    from cronctl.proc.liveness import lease_checker, owner_alive
    from cronctl.schedule.slots import fire_at
    from cronctl.timefmt import to_iso

    now = ctx.clock.now()
    health = job_health(view, now, owner_alive, lease_checker())
    data = entry_from(view.spec, view.state)
    next_slot = view.next_run_at
    data["next_fire_at"] = to_iso(fire_at(view.spec, next_slot)) if next_slot and not view.paused else None
    data["health"] = {"state": health.state, "reason": health.reason, "fault": health.fault}
    return data


def _job_row(view: Any, ctx: Any) -> dict[str, Any]:
    from cronctl.jobs.words import describe
    from cronctl.timefmt import from_iso

    data = _job_json(view, ctx)
    return {
        "name": view.spec.name, "schedule": view.spec.schedule_text, "when": describe(view.spec),
        "timezone": view.spec.timezone,
        "next_fire": from_iso(data["next_fire_at"]), "last_run": from_iso(view.state.get("last_run_at")),
        "status_word": data["health"]["state"], "command": view.spec.command,
    }


def _detail_fields(data: dict[str, Any]) -> list[tuple[str, str]]:
    from cronctl.models import command_text

    fields: list[tuple[str, str]] = []
    for key, value in data.items():
        if key in ("state", "health"):
            continue
        if value in (None, {}, [], False) and key not in ("paused",):
            continue
        text = command_text(value) if key in ("command", "on_failure") else _field_text(value)
        fields.append((key, text))
        if key in ("cron", "every", "at"):
            fields.append(("in words", _words(data)))
    fields.append(("health", f"{data['health']['state']}: {data['health']['reason']}"))
    for key, value in sorted(data["state"].items()):
        if key == "claims":
            value = ", ".join(value) or "-"
        fields.append((f"state.{key}", "-" if value is None else _field_text(value)))
    return fields


def _words(data: dict[str, Any]) -> str:
    from cronctl.jobs.state import JobView
    from cronctl.jobs.words import describe

    return describe(JobView.from_entry(data).spec)


def _field_text(value: Any) -> str:
    """Booleans, lists and mappings as they are written in YAML and JSON (true, not True)."""
    import json

    if isinstance(value, (bool, dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _next_fire_text(view: Any) -> str:
    from cronctl.cli import render
    from cronctl.schedule.slots import fire_at

    if view.paused:
        return "paused (no fire until 'cronctl resume " + view.spec.name + "')"
    if view.next_run_at is None:
        return "no further fires"
    return "next fire " + render.fire_text(fire_at(view.spec, view.next_run_at), view.spec.timezone)


def _warn_if_past(view: Any, ctx: Any) -> None:
    from cronctl.cli import render

    if view.spec.at is not None and not view.state.get("completed") and view.spec.at < ctx.clock.now():
        render.warn(f"{view.spec.name}: 'at' {view.spec.at.isoformat()} is in the past; "
                    "a running loop fires it at once")
