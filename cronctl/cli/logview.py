"""`cronctl logs`: a run's output, the last lines, a time window, or every job's new
output as it comes (SPEC §13). The reading is ops/logread.py's; this module prints.

Output goes to stdout as the job wrote it; what cronctl says about it (a run with no
output, whose host has the log) goes to stderr, so `logs JOB > file` keeps only output.
"""

from __future__ import annotations

import socket
import sys
import time
from datetime import datetime
from pathlib import Path

from cronctl.cli import render
from cronctl.cli.safeout import TerminalSafe
from cronctl.context import Context
from cronctl.errors import UsageError
from cronctl.ops import logread

POLL_SECONDS = 0.2


class JobOutput:
    """Job output to stdout: on a terminal, control sequences other than colours are
    escaped (shown, not obeyed, as `less -R` shows them) unless `--raw`."""

    def __init__(self, raw: bool) -> None:
        self._escape = None if raw or not sys.stdout.isatty() else TerminalSafe()

    def write(self, data: bytes) -> None:
        sys.stdout.buffer.write(self._escape.feed(data) if self._escape else data)

    def end(self) -> None:
        if self._escape:
            sys.stdout.buffer.write(self._escape.end())
        sys.stdout.flush()


def show_logs(ctx: Context, name: str | None, run_id: str | None, lines: int | None, since: datetime | None,
              until: datetime | None, follow: bool, all_jobs: bool, raw: bool = False) -> None:
    out = JobOutput(raw)
    try:
        _show(ctx, out, name, run_id, lines, since, until, follow, all_jobs)
    finally:
        out.end()


def _show(ctx: Context, out: JobOutput, name: str | None, run_id: str | None, lines: int | None,
          since: datetime | None, until: datetime | None, follow: bool, all_jobs: bool) -> None:
    if all_jobs:
        if name is not None or run_id is not None:
            raise UsageError("--all shows every job: give no job name and no --run with it")
        if follow:
            follow_all(ctx, out=out)
        else:  # each job's last run, or its runs in the window
            for job in logread.job_names(ctx):
                chosen = _chosen(ctx, job, since, until)
                _print_runs(out, chosen if since or until else chosen[-1:], lines, header=True, job_label=True)
        return
    if name is None:
        raise UsageError("give a job name, or --all")
    if since is None and until is None:
        _one_run(ctx, out, name, run_id, lines, follow)
        return
    if run_id is not None:
        raise UsageError("--run names one run: give it without --since/--until")
    chosen = _chosen(ctx, name, since, until)
    if not chosen:
        render.warn(f"no run of '{name}' in that time (this host keeps the logs of the job's last runs)")
        return
    _print_runs(out, chosen, lines, header=len(chosen) > 1, job_label=False)
    if follow and chosen[-1].record is None:
        _follow_file(ctx, out, chosen[-1], offset=chosen[-1].path.stat().st_size)


def _chosen(ctx: Context, job: str, since: datetime | None, until: datetime | None) -> list[logread.RunLog]:
    logs = logread.job_run_logs(ctx, job)
    return logread.runs_between(logs, since, until)


def _one_run(ctx: Context, out: JobOutput, name: str, run_id: str | None, lines: int | None, follow: bool) -> None:
    from cronctl.ops.runs import log_path

    found_id, path = log_path(ctx, name, run_id)
    if not isinstance(path, Path):  # PostgreSQL: a run of another host, its stored tail
        out.write(logread.split_lines(path.text.encode("utf-8", "surrogateescape"), lines))
        out.end()
        print(f"cronctl: run {found_id} ran on host {path.host}: this is the tail the store keeps; "
              "the whole log is in the home there", file=sys.stderr)
        return
    size = path.stat().st_size  # what is printed now; -f goes on from here, nothing lost or doubled
    data = logread.last_lines(path, lines, size) if lines is not None else _read(path)[:size]
    out.write(data)
    sys.stdout.flush()
    run = logread.RunLog(name, found_id, path, None, None)
    if follow:
        _follow_file(ctx, out, run, offset=size)
    if path.stat().st_size == 0:
        _say_no_output(ctx, run)


def _say_no_output(ctx: Context, run: logread.RunLog) -> None:
    """Issue 26, item 3: an empty log is a run that printed nothing, said so with its id."""
    from cronctl.ops.runs import run_is_active

    if run_is_active(ctx, run.job, run.run_id):
        said = f"has printed nothing yet; its stdout and stderr go to {run.path}"
    else:
        said = f"had no output: its stdout and stderr went to {run.path}, which is empty"
    print(f"cronctl: run {run.run_id} of '{run.job}' {said}", file=sys.stderr)


def _print_runs(out: JobOutput, runs: list[logread.RunLog], lines: int | None, header: bool, job_label: bool) -> None:
    remaining = lines
    chunks: list[tuple[logread.RunLog, bytes]] = []
    for run in reversed(runs):  # -n counts lines from the newest run back
        if remaining is not None and remaining <= 0:
            break
        data = logread.last_lines(run.path, remaining) if remaining is not None else _read(run.path)
        if remaining is not None:
            remaining -= data.count(b"\n") or (1 if data else 0)
        chunks.append((run, data))
    for run, data in reversed(chunks):
        if header:
            who = f"{run.job} " if job_label else ""
            started = run.started.isoformat(timespec="seconds") if run.started else "?"
            sys.stdout.write(f"==> {who}run {run.run_id} (started {started}, {run.status}) <==\n")
        sys.stdout.flush()
        out.write(data)
        if not data:
            sys.stdout.write("(no output)\n")
        sys.stdout.flush()


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _follow_file(ctx: Context, out: JobOutput, run: logread.RunLog, offset: int) -> None:
    """Keep copying the run's log until the run is over."""
    from cronctl.ops.runs import run_is_active

    with open(run.path, "rb") as handle:
        handle.seek(offset)
        while True:
            chunk = handle.read(65536)
            if chunk:
                out.write(chunk)
                sys.stdout.flush()
                continue
            if not run_is_active(ctx, run.job, run.run_id):
                out.write(handle.read())
                sys.stdout.flush()
                return
            time.sleep(POLL_SECONDS)


def follow_all(ctx: Context, *, polls: int | None = None, out: JobOutput | None = None) -> None:
    """`logs --all -f`: every job's new output, each line as `JOB RUN | line`, until Ctrl-C."""
    if ctx.cluster is not None:
        render.warn(f"following the runs of this host ({socket.gethostname()}) only: runs on other hosts write "
                    "their logs in their own homes (run 'cronctl logs --all -f' there)")
    follower = logread.LogFollower(ctx.paths.runs_dir)
    done = 0
    try:
        while polls is None or done < polls:
            lines = follower.poll()
            for job, run_id, line in lines:
                (out or JobOutput(raw=True)).write(f"{job} {run_id} | ".encode() + line)
            if lines:
                sys.stdout.flush()
            else:
                time.sleep(POLL_SECONDS)
            done += 1
    except KeyboardInterrupt:
        return
    except BrokenPipeError:  # `logs --all -f | head`: the reader has what it wanted
        return
