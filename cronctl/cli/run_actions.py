"""What `run`, `status`, `history` and `force-run` do, without the CLI framework.

The typer commands of cli/run_commands.py call these with the values typer parsed; the
framework-free entry (cli/fastpath.py) calls the same functions with the values it parsed.
A body returns its exit code (None: 0) and imports the use-case module it calls inside
its own body: a command loads only what it uses.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from cronctl.cli import render
from cronctl.cli.session import open_context, open_store_context
from cronctl.errors import UsageError


def run(file: str | Path | None = None, once: bool = False, standby: bool = False, max_parallel: int | None = None,
        takeover_after: str = "60s", lease: str = "60s", metrics_file: str | Path | None = None, quiet: bool = False,
        http: str | None = None, http_allow_remote: bool = False, echo_output: bool = False,
        forget_after: str = "15m", http_token: str | Path | None = None) -> int:
    """The foreground loop; its exit code."""
    from cronctl.durations import parse_duration
    from cronctl.loop.scheduler import LoopOptions
    from cronctl.ops.runs import run_loop

    if http_token and not http:
        raise UsageError("--http-token needs --http ADDR:PORT (the token guards the dashboard's actions)")
    if http:  # the endpoint and the dashboard only with --http: a loop's start-up is timed
        from cronctl.loop.endpoint import parse_listen
        from cronctl.ops.webactions import read_token
    options = LoopOptions(file=Path(file).absolute() if file else None, once=once, standby=standby,
                          max_parallel=max_parallel,
                          takeover_after=parse_duration(takeover_after, field="--takeover-after"),
                          lease=parse_duration(lease, field="--lease"),
                          metrics_file=Path(metrics_file).absolute() if metrics_file else None, quiet=quiet,
                          http=parse_listen(http, http_allow_remote) if http else None,
                          forget_after=parse_duration(forget_after, field="--forget-after"),
                          http_token=read_token(http_token) if http_token else None)
    ctx = open_context()
    if not quiet:
        ctx.audit.listeners.append(_echo_decision)
        # PostgreSQL: the lease store writes run.finished and its kin in its own transactions
        store_rows = getattr(ctx.leases, "listeners", None)
        if isinstance(store_rows, list):
            store_rows.append(_echo_decision)
    dashboard = None
    if options.http:
        from cronctl.ops.webpage import dashboard_hooks

        dashboard = dashboard_hooks(ctx, options.http_token)
    if not echo_output:
        return run_loop(ctx, options, dashboard=dashboard)
    from cronctl.proc.echo import EchoSink

    echo = EchoSink(sys.stdout.buffer)  # job output on stdout, the loop's own lines on stderr
    try:
        return run_loop(ctx, options, echo, dashboard)
    finally:
        echo.close()


def _echo_decision(row: dict[str, Any]) -> None:
    line = render.loop_line(row)
    if line is not None:
        print(line, file=sys.stderr, flush=True)


def status(stale: bool = False, json_out: bool = False, watch: bool = False, interval: float = 2.0) -> int | None:
    from cronctl.cli.termview import Terminal
    from cronctl.ops.status import status as status_report
    from cronctl.ops.status import status_json

    ctx = open_context()
    if watch:
        def frame() -> list[str]:
            data = status_json(status_report(ctx, only_stale=stale), only_stale=stale)
            title = f"cronctl status — {datetime.now().strftime('%H:%M:%S')} — Ctrl-C to quit"
            # Relative times that tick, fitted to the width; no colour codes in rich's Live.
            term = Terminal(width=render.output_width(), colour=False)
            return [title, *render.status_lines(data, stale, term)]

        render.watch(frame, interval)
        return None
    report = status_report(ctx, only_stale=stale)
    data = status_json(report, only_stale=stale)
    if json_out:
        render.print_json(data)
    else:
        render.status_view(data, stale, ctx.clock.now())
    return 3 if stale and report.stale else None


def history(name: str | None = None, count: int = 20, chain: str | None = None, json_out: bool = False,
            since: str | None = None, status: str | None = None) -> None:
    from cronctl.ops.runs import run_history

    if chain is not None:
        _chain_history(chain, name, json_out)
        return
    if since is not None or status is not None:
        from cronctl.cli.instants import parse_since as _since
        from cronctl.ops.logread import check_statuses, filter_records

        wanted = check_statuses(status)
        ctx = open_store_context()
        records = filter_records(run_history(ctx, name, None), _since(since, ctx) if since else None, wanted,
                                 count)
    else:
        records = run_history(open_store_context(), name, count)
    if json_out:
        render.print_json({"runs": records})
    elif count:  # -n 0 asks for no rows, as `tail -n 0` does: say nothing, claim nothing
        render.history_table(records)


def _chain_history(chain: str, name: str | None, json_out: bool) -> None:
    """`history --chain ID`: every node of the chain in order, skipped ones included, and its outcome."""
    from cronctl.cli.chainview import chain_history_view
    from cronctl.ops.chains import chain_report

    report = chain_report(open_store_context(), chain, name).to_dict()
    if json_out:
        render.print_json(report)
    else:
        chain_history_view(report)


def force_run(name: str, wait: bool = False, chain: bool = False, json_out: bool = False,
              alone: bool = False) -> int | None:
    from cronctl.errors import UsageError
    from cronctl.ops import runs as runops
    from cronctl.ops.chain_force import starts_chain

    if chain and alone:
        raise UsageError("--chain and --alone contradict each other: --alone runs the job by itself")
    ctx = open_context()
    if chain or (not alone and starts_chain(ctx, name)):
        return _force_chain(ctx, name, wait, json_out)
    result = runops.force_run(ctx, name, wait)
    record = result.record
    if json_out:
        render.print_json({"run_id": result.run_id, "via_loop": result.via_loop, "run": record})
    elif record is None:
        render.say(f"started {name} run {result.run_id} through the running loop; "
                   f"'cronctl logs {name} -f' follows it")
    else:
        reason = render.run_reason(record)
        render.say(f"{name} run {result.run_id}: {record['status']}" + (f" ({reason})" if reason else ""))
    if wait or not result.via_loop:
        return runops.exit_code_of(record) if wait else 0
    return None


def _force_chain(ctx: Any, name: str, wait: bool, json_out: bool) -> int | None:
    """A new chain at `name` (SPEC §10): through the running loop, or here when none runs;
    with --wait (or run here) each node's outcome is printed once the chain has ended."""
    from cronctl.cli.chainview import node_outcomes, outcome_line
    from cronctl.ops.chain_force import force_chain_run

    done = force_chain_run(ctx, name, wait)
    report = done.report.to_dict() if done.report is not None else None
    if json_out:
        # run_id / run as for one job (the schema's keys): the chain's first run, whose id the chain has.
        first = next((r for r in (report or {}).get("runs", []) if r["run_id"] == done.chain_id), None)
        render.print_json({"chain": done.chain_id, "jobs": done.jobs, "via_loop": done.via_loop,
                           "run_id": done.chain_id, "run": first,
                           **({"outcome": report["outcome"], "nodes": report["nodes"], "runs": report["runs"]}
                              if report is not None else {})})
    elif report is None:
        render.say(f"chain {done.chain_id} of {', '.join(done.jobs)}: the running loop starts it; "
                   f"'cronctl history --chain {done.chain_id}' lists its runs")
    else:
        render.print_lines([*node_outcomes(report), outcome_line(report)])
    if report is None:
        return None
    return done.exit_code if wait else 0
