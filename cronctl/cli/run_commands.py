"""The typer declarations of the commands about runs and what happened: audit, run, status,
history, logs, force-run, kill (their arguments, options and help). Registered on the app by
cli/main.py. What `run`, `status`, `history` and `force-run` do is in cli/run_actions.py.

Every command module is imported for every command, so each command imports the use-case
module it calls inside its own body (the loop's modules are needed by `run` alone): a
command loads only what it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from cronctl.cli import render, run_actions
from cronctl.cli.app import JsonOpt, app, finish, open_context
from cronctl.cli.instants import parse_since as _since


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
    # Imported here: only this command needs it (start-up time).
    from cronctl.store.audit import check_event, filter_rows

    if event is not None:
        from cronctl.errors import CronctlError
        from cronctl.models import AuditEvent

        problem = check_event(event, [str(e) for e in AuditEvent])
        if problem is not None:
            raise CronctlError(problem)
    ctx = open_context()
    rows = filter_rows(ctx.audit.rows(), job=job, event=event,
                       since=_since(since, ctx) if since else None, limit=count)
    if json_out:
        render.print_json({"rows": rows})
    else:
        render.audit_rows(rows)


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
    http: Annotated[Optional[str], typer.Option("--http", metavar="ADDR:PORT", help="Serve the dashboard, "
                                                "/metrics, /healthz and /livez here (loopback unless "
                                                "--http-allow-remote).")] = None,
    http_allow_remote: Annotated[bool, typer.Option("--http-allow-remote", help="Let --http listen on a "
                                                    "non-loopback address.")] = False,
    echo_output: Annotated[bool, typer.Option("--echo-output", help="Copy every line jobs print to stdout "
                                              "as 'JOB RUN | line' (containers, journalctl).")] = False,
    forget_after: Annotated[str, typer.Option("--forget-after", help="PostgreSQL store: forget a loop silent this "
                                              "long once its runs are all reclaimed.")] = "15m",
    http_token: Annotated[Optional[Path], typer.Option("--http-token", metavar="FILE", help="Turn on the "
                                                       "dashboard's actions, for requests bearing the token "
                                                       "in FILE.")] = None,
) -> None:
    """The foreground loop: fires due jobs until SIGTERM/SIGINT.

    Example: cronctl run -f jobs.yaml --max-parallel 50
    """
    finish(run_actions.run(file, once, standby, max_parallel, takeover_after, lease, metrics_file, quiet, http,
                       http_allow_remote, echo_output, forget_after=forget_after, http_token=http_token))


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
    finish(run_actions.status(stale, json_out, watch, interval))


@app.command()
def history(
    name: Annotated[Optional[str], typer.Argument(help="Job (default: all).")] = None,
    count: Annotated[int, typer.Option("-n", min=0, help="Last N runs.")] = 20,
    chain: Annotated[Optional[str], typer.Option("--chain", help="Only the runs of this chain (its root run's "
                                                 "id), in order.")] = None,
    json_out: JsonOpt = False,
    since: Annotated[Optional[str], typer.Option("--since", help="Runs ended since this ISO instant, or a "
                                                 "duration ago like 1h.")] = None,
    status: Annotated[Optional[str], typer.Option("--status", help="Only runs with this status (success, "
                                                  "error, timeout, killed, lost, not_started, failed); "
                                                  "comma-separated.")] = None,
) -> None:
    """Past runs: slot, trigger, start, duration, status, reason.

    Example: cronctl history backup -n 5; cronctl history --since 1d --status failed
    """
    run_actions.history(name, count, chain, json_out, since, status)


@app.command()
def logs(
    name: Annotated[Optional[str], typer.Argument(help="Job (or --all).")] = None,
    run_id: Annotated[Optional[str], typer.Option("--run", help="Run id (default: the last run).")] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing while the run goes on; with "
                                         "--all, every job's new output until Ctrl-C.")] = False,
    lines: Annotated[Optional[int], typer.Option("-n", "--lines", min=0, help="Only the last N lines.")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Runs from this ISO instant, or a duration "
                                                 "ago like 1h.")] = None,
    until: Annotated[Optional[str], typer.Option("--until", help="Runs until this ISO instant, or a duration "
                                                 "ago.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", help="Every job: with -f, each new line as "
                                           "'JOB RUN | line'.")] = False,
    raw: Annotated[bool, typer.Option("--raw", help="On a terminal too, the bytes as the job wrote them "
                                      "(by default control sequences other than colours are escaped).")] = False,
) -> None:
    """A run's captured output (the last run by default), or several runs' in a time window.

    Example: cronctl logs backup -n 20; cronctl logs backup --since 1d; cronctl logs --all -f
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.cli.logview import show_logs

    ctx = open_context()
    show_logs(ctx, name, run_id, lines, _since(since, ctx) if since else None,
              _since(until, ctx, "--until") if until else None, follow, all_jobs, raw)


@app.command("force-run")
def force_run(
    name: Annotated[str, typer.Argument(help="Job to fire now.")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait and exit with the run's status "
                                       "(0, the job's exit code, 124 on timeout).")] = False,
    chain: Annotated[bool, typer.Option("--chain", help="Start a new chain here: the job, then the jobs "
                                        "after it (with --wait: exit 0 only if every one succeeded).")] = False,
    alone: Annotated[bool, typer.Option("--alone", help="A chain's root by itself, starting no chain "
                                        "(force-run ROOT otherwise starts one, as its schedule would).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Fire a job now, once, outside its schedule (next_run_at is not moved).

    Example: cronctl force-run backup --wait
    """
    finish(run_actions.force_run(name, wait, chain, json_out, alone))


@app.command()
def kill(name: Annotated[str, typer.Argument(help="Job whose runs to end.")]) -> None:
    """End a running job (its whole process group, SIGTERM then SIGKILL); recorded `killed`.

    Example: cronctl kill backup
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops.runs import kill_job

    killed = kill_job(open_context(), name)
    render.say(f"killed {name}: {', '.join(killed)}" if killed else f"{name}: nothing was left to kill")
