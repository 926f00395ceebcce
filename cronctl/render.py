"""Everything users see: rich tables for people, stable JSON for tools. No logic."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timezone
from typing import Any, Iterable

from cronctl.models import command_text


def _console(stderr: bool = False):  # type: ignore[no-untyped-def]
    from rich.console import Console

    # Piped output and NO_COLOR get plain text with no escape codes. Job names,
    # commands and reasons are operator text: never read them as rich markup
    # ("[/x]" would raise) or emoji codes (":smile:" would be replaced).
    no_color = bool(os.environ.get("NO_COLOR"))
    return Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=False,
                   markup=False, emoji=False, width=None if sys.stdout.isatty() else 200)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=False) + "\n")


def say(message: str) -> None:
    # Plain print, not rich: a long line (a path, a list of names) must reach a
    # pipe whole, never hard-wrapped at the console width.
    print(message)


def warn(message: str) -> None:
    print(_printable(f"cronctl: warning: {message}"), file=sys.stderr)


def error(message: str) -> None:
    print(_printable(f"cronctl: error: {message}"), file=sys.stderr)


def _printable(text: str) -> str:
    # A message may quote what the user typed, and argv bytes that are not UTF-8 arrive
    # as lone surrogates: write them as \udcff instead of failing on a strict stream.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def relative(when: datetime | None, now: datetime) -> str:
    """'in 4m', '3h ago', 'now' — the way an operator reads a schedule."""
    if when is None:
        return "-"
    seconds = (when - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    text = _short_span(abs(seconds))
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _short_span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            whole = int(seconds // size)
            rest = int((seconds % size) // (size // (24 if unit == "d" else 60)))
            sub = {"d": "h", "h": "m", "m": "s"}[unit]
            return f"{whole}{unit}{rest}{sub}" if rest and whole < 10 else f"{whole}{unit}"
    return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds * 1000:.0f}ms"


def jobs_table(rows: Iterable[dict[str, Any]], now: datetime) -> None:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "SCHEDULE", "WHEN", "TZ", "NEXT", "LAST", "STATUS", "COMMAND"):
        table.add_column(column, overflow="fold")
    count = 0
    for row in rows:
        count += 1
        table.add_row(
            row["name"], row["schedule"], row["when"], row["timezone"], relative(row["next_fire"], now),
            relative(row["last_run"], now), row["status_word"], command_text(row["command"])[:60],
        )
    if count == 0:
        say("no jobs defined (add one with 'cronctl add' or 'cronctl apply -f FILE')")
        return
    _console().print(table)


def job_detail(fields: list[tuple[str, str]]) -> None:
    width = max((len(k) for k, _ in fields), default=0)
    for key, value in fields:
        say(f"{key.ljust(width)}  {value}")


def local_iso(when: datetime) -> str:
    """ISO 8601 with the instant's own offset; milliseconds only when there are any."""
    return when.isoformat(timespec="seconds" if when.microsecond < 1000 else "milliseconds")


def utc_z(when: datetime) -> str:
    """The same instant in UTC, written with a Z."""
    return local_iso(when.astimezone(timezone.utc).replace(tzinfo=None)) + "Z"


def fire_text(when: datetime, zone: str) -> str:
    """A fire instant in the job's zone, then in UTC: 2026-03-02T03:00:00+01:00 (2026-03-02T02:00:00Z)."""
    from zoneinfo import ZoneInfo

    return f"{local_iso(when.astimezone(ZoneInfo(zone)))} ({utc_z(when)})"


def next_table(rows: list[tuple[str, str, list[tuple[datetime, datetime]]]], paused: Iterable[str] = (),
               words: dict[str, str] | None = None) -> None:
    """rows: (job, zone, [(local instant, utc instant)]); a paused job's instants are its schedule, not fires."""
    paused = set(paused)
    words = words or {}
    for job, zone, instants in rows:
        if not instants:
            say(f"{job}: no further fires")
            continue
        note = f", paused: none of these fire until 'cronctl resume {job}'" if job in paused else ""
        said = f" — {words[job]}" if job in words else ""
        say(f"{job} ({zone}{note}){said}:")
        for local, utc in instants:
            say(f"  {local_iso(local)}   {utc_z(utc)}")


def apply_plan(plan: dict[str, Any], dry_run: bool) -> None:
    verb = "would" if dry_run else "did"
    lines = [f"+ create {n}" for n in plan["create"]]
    lines += [f"~ update {n} ({', '.join(f)})" for n, f in plan["update"].items()]
    lines += [f"~ adopt {n} (added by hand, now defined by this file)" for n in plan["adopt"]]
    lines += [f"- prune {n}" for n in plan["prune"]]
    for line in lines:
        say(line)
    summary = (f"{plan['file']}: {verb} create {len(plan['create'])}, update {len(plan['update']) + len(plan['adopt'])}, "
               f"prune {len(plan['prune'])}, unchanged {len(plan['unchanged'])}")
    say(summary)


def audit_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        extras = {k: v for k, v in row.items() if k not in ("ts", "event", "job", "run_id")}
        detail = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in sorted(extras.items()))
        parts = [row.get("ts", "?"), row.get("event", "?")]
        if row.get("job"):
            parts.append(f"job={row['job']}")
        if row.get("run_id"):
            parts.append(f"run={row['run_id']}")
        say(" ".join(str(p) for p in parts) + (f" {detail}" if detail else ""))


def status_view(data: dict[str, Any], only_stale: bool) -> None:
    _console().print(status_renderable(data, only_stale))


def status_renderable(data: dict[str, Any], only_stale: bool, title: str | None = None) -> Any:
    """The status screen as one rich renderable: printed once, or redrawn by --watch."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = [Text(title)] if title else []
    loop = data["loop"]
    age = loop.get("heartbeat_age")
    beat = f", heartbeat {age:.1f}s ago" if age is not None else ""
    pid = f" pid {loop['pid']}" if loop.get("pid") else ""
    standby = f", standby pid {loop['standby_pid']}" if loop.get("standby_pid") else ""
    if not only_stale or data["loop_stale"]:
        parts.append(Text(f"loop: {loop['state']}{pid}{beat}{standby} — {loop['reason']}"))
    if not data["jobs"]:
        if only_stale and not data["stale"]:
            parts.append(Text("nothing is stale"))
        return Group(*parts)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("JOB", "STATE", "NEXT", "LAST", "FAULT", "REASON"):
        table.add_column(column, overflow="fold")
    for job in data["jobs"]:
        table.add_row(Text(job["name"]), Text(job["state"]), Text(job["next_run_at"] or "-"),
                      Text(job["last_status"] or "-"), Text(job["fault"] or "-"), Text(job["reason"]))
    parts.append(table)
    return Group(*parts)


def watch(render_frame: Any, interval: float) -> None:
    """Redraw until Ctrl-C; on a pipe or a dumb terminal, print one frame per interval."""
    import time

    from rich.live import Live

    console = _console()
    try:
        if not console.is_terminal:
            while True:
                console.print(render_frame())
                time.sleep(interval)
        with Live(render_frame(), console=console, auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(render_frame(), refresh=True)
    except KeyboardInterrupt:
        return


def history_table(records: list[dict[str, Any]]) -> None:
    if not records:
        say("no runs recorded yet")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("JOB", "RUN", "SLOT", "TRIGGER", "STARTED", "DURATION", "STATUS", "REASON"):
        table.add_column(column, overflow="fold")
    for r in records:
        duration = f"{r['duration']:.2f}s" if r.get("duration") is not None else "-"
        reason = r.get("reason") or ""
        if r.get("late"):
            reason = (reason + ", " if reason else "") + "late (scheduler_missed)"
        table.add_row(r["job"], r["run_id"], r.get("slot") or "-", r.get("trigger") or "-",
                      r.get("started_at") or "-", duration, r["status"] + (f" {r['exit_code']}" if r.get("exit_code") else ""),
                      reason)
    _console().print(table)


def loop_line(row: dict[str, Any]) -> str | None:
    """One terminal line for a decision of the foreground loop (None: not worth a line)."""
    event, job = row.get("event"), row.get("job", "")
    clock = str(row.get("ts", ""))[11:19]
    short = _LOOP_LINES.get(str(event))
    if short is None:
        return None
    text = short(row)
    return f"{clock} {job:<16} {text}" if job else f"{clock} {text}"


def _finished(row: dict[str, Any]) -> str:
    status = row.get("status", "?")
    took = f" in {row['duration_s']:.2f}s" if isinstance(row.get("duration_s"), (int, float)) else ""
    code = f" (exit {row['exit_code']})" if row.get("exit_code") not in (None, 0) else ""
    reason = f" — {row['reason']}" if row.get("reason") and status != "error" else ""
    return f"{status}{code}{took}{reason}"


_LOOP_LINES: dict[str, Any] = {
    "run.started": lambda r: f"started   run {r.get('run_id')} (slot {str(r.get('slot', ''))[11:23]}, pid {r.get('pid')})",
    "run.finished": lambda r: f"finished  {_finished(r)}",
    "run.skipped": lambda r: f"skipped   slot {str(r.get('slot', ''))[11:23]} ({r.get('reason')})",
    "run.missed": lambda r: f"missed    {r.get('count')} slot(s) ({r.get('reason')}, catchup {r.get('catchup')})",
    "run.retry_scheduled": lambda r: f"retry     attempt {r.get('attempt')} at {str(r.get('due_at', ''))[11:19]}",
    "run.spawn_failed": lambda r: f"NOT STARTED: could not spawn ({r.get('error')}); next slot fires normally",
    "run.fenced": lambda r: f"fenced    a stale write for run {r.get('run_id')} was refused",
    "claim.reclaimed": lambda r: f"reclaimed run {r.get('run_id')} ({r.get('reason')}, recorded {r.get('status')})",
    "recovery.persisted_error_rearmed": lambda r: f"re-armed  after a persisted {r.get('last_status')}",
    "recovery.deadline_terminated": lambda r: f"deadline  run {r.get('run_id')} ended by the janitor",
    "scheduler.takeover": lambda r: f"took over from pid {r.get('previous_pid')} ({r.get('reason')})",
    "scheduler.generation_restarted": lambda r: f"tick thread restarted as generation {r.get('generation')}",
}
