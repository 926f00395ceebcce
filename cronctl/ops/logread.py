"""Reading run output as `journalctl`/`kubectl logs` readers expect (SPEC §13): the runs
of a job in a time window, the last N lines, and following every job's new output.

Use cases only: they return bytes and records, cli/logview.py prints them. Logs are
this host's files (runs/JOB/RUN.log); on PostgreSQL another host's runs are in its home.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cronctl.context import Context
from cronctl.errors import CronctlError, no_job_named
from cronctl.store import history
from cronctl.timefmt import from_iso

_READ_CHUNK = 65536
MAX_FOLLOW_LINE = 65536  # a longer line is printed in pieces while following


@dataclass(frozen=True)
class RunLog:
    """One run's log file and what the history says of the run (None while it runs)."""

    job: str
    run_id: str
    path: Path
    started: datetime | None
    record: dict[str, Any] | None

    @property
    def ended(self) -> datetime | None:
        return from_iso(self.record.get("ended_at")) if self.record else None

    @property
    def status(self) -> str:
        return str(self.record.get("status")) if self.record else "running"


def run_id_time(run_id: str) -> datetime | None:
    """The claim time a run id starts with (`20261203T143854-7edf84ad`), in UTC."""
    try:
        return datetime.strptime(run_id[:15], "%Y%m%dT%H%M%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def job_run_logs(ctx: Context, job: str) -> list[RunLog]:
    """The job's run logs kept on this host, oldest first (run ids sort by time)."""
    directory = ctx.paths.job_runs_dir(job)
    if not directory.is_dir():
        if not ctx.leases.has_job(job):
            raise no_job_named(job)
        return []
    records = {str(r.get("run_id")): r for r in history.read_records(ctx.paths, job)}
    logs: list[RunLog] = []
    for path in sorted(directory.glob("*.log")):
        run_id = path.name[: -len(".log")]
        if "." in run_id:
            continue  # an on_failure hook's log (RUN.on_failure.log)
        record = records.get(run_id)
        started = from_iso(record.get("started_at")) if record and record.get("started_at") else None
        logs.append(RunLog(job, run_id, path, started or run_id_time(run_id), record))
    return logs


def runs_between(logs: list[RunLog], since: datetime | None, until: datetime | None) -> list[RunLog]:
    """The runs whose time overlaps [since, until]: started before `until`, not ended before `since`."""
    chosen = []
    for log in logs:
        if until is not None and log.started is not None and log.started > until:
            continue
        ended = log.ended
        if since is not None and ended is not None and ended < since:
            continue
        chosen.append(log)
    return chosen


def last_lines(path: Path, count: int, end: int | None = None) -> bytes:
    """The last `count` lines of a file (of its first `end` bytes), read from the end backwards."""
    if count <= 0:
        return b""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        position = handle.tell() if end is None else min(end, handle.tell())
        data = b""
        while position > 0 and data.count(b"\n") <= count:
            step = min(_READ_CHUNK, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
    return b"".join(data.splitlines(keepends=True)[-count:])


def split_lines(data: bytes, count: int | None) -> bytes:
    """`data`, or its last `count` lines."""
    if count is None:
        return data
    return b"".join(data.splitlines(keepends=True)[-count:]) if count > 0 else b""


def job_names(ctx: Context) -> list[str]:
    return sorted(view.spec.name for view in ctx.leases.jobs())


# --- following every job's new output ------------------------------------------------


@dataclass(eq=False)
class _Followed:
    job: str
    run_id: str
    offset: int
    partial: bytes = b""
    idle_polls: int = 0


@dataclass(eq=False)
class LogFollower:
    """New lines of every run log under the runs directory (`logs --all -f`).

    Logs that exist when it starts are followed from their end (only new output is
    shown); logs that appear later, from their start. A partial line is held until its
    newline comes, or printed as it is once the log has been quiet for a few polls.
    """

    runs_dir: Path
    only_job: str | None = None
    _files: dict[Path, _Followed] = field(default_factory=dict)
    _started: bool = False

    def poll(self) -> list[tuple[str, str, bytes]]:
        """(job, run id, line with its newline) of everything new since the last poll."""
        found = self._scan()
        if not self._started:
            self._started = True
            for path, followed in found.items():
                followed.offset = _size(path)
        out: list[tuple[str, str, bytes]] = []
        for path, followed in list(self._files.items()):
            if path not in found:
                del self._files[path]  # pruned: nothing more will come
                continue
            out.extend(self._read_new(path, followed))
        return out

    def _scan(self) -> dict[Path, _Followed]:
        found: dict[Path, _Followed] = {}
        jobs = [self.runs_dir / self.only_job] if self.only_job else _dirs(self.runs_dir)
        for directory in jobs:
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            for name in names:
                if not name.endswith(".log") or name.count(".") != 1:
                    continue
                path = directory / name
                followed = self._files.get(path) or _Followed(directory.name, name[:-4], 0)
                self._files[path] = found[path] = followed
        return found

    def _read_new(self, path: Path, followed: _Followed) -> list[tuple[str, str, bytes]]:
        try:
            with open(path, "rb") as handle:
                handle.seek(followed.offset)
                data = handle.read(4 * _READ_CHUNK)
        except OSError:
            return []
        followed.offset += len(data)
        if not data:
            followed.idle_polls += 1
            if followed.partial and followed.idle_polls >= 3:
                line, followed.partial = followed.partial + b"\n", b""
                return [(followed.job, followed.run_id, line)]
            return []
        followed.idle_polls = 0
        pieces = (followed.partial + data).split(b"\n")
        followed.partial = pieces.pop()
        lines = [piece + b"\n" for piece in pieces]
        while len(followed.partial) >= MAX_FOLLOW_LINE:
            lines.append(followed.partial[:MAX_FOLLOW_LINE] + b"\n")
            followed.partial = followed.partial[MAX_FOLLOW_LINE:]
        return [(followed.job, followed.run_id, line) for line in lines]


def _dirs(runs_dir: Path) -> list[Path]:
    try:
        return sorted(entry for entry in runs_dir.iterdir() if entry.is_dir())
    except OSError:
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def check_statuses(text: str | None) -> set[str] | None:
    """`history --status`: one status or several, comma-separated; `failed` is error, timeout and lost."""
    if text is None:
        return None
    from cronctl.models import RunStatus

    known = [status.value for status in RunStatus]
    wanted: set[str] = set()
    for word in (part.strip() for part in text.split(",")):
        if word == "failed":
            wanted |= {"error", "timeout", "lost"}
        elif word in known:
            wanted.add(word)
        else:
            raise CronctlError(f"--status {word!r}: not a run status (one of: {', '.join(known)}, failed)")
    return wanted


def filter_records(records: list[dict[str, Any]], since: datetime | None, statuses: set[str] | None,
                   count: int) -> list[dict[str, Any]]:
    """`history --since T --status S -n N`: the last N records that ended at or after T with status S."""
    chosen = []
    for record in records:
        if statuses is not None and record.get("status") not in statuses:
            continue
        if since is not None:
            ended = from_iso(record.get("ended_at")) if record.get("ended_at") else None
            if ended is None or ended < since:
                continue
        chosen.append(record)
    return chosen[-count:] if count > 0 else []
