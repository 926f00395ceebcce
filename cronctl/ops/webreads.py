"""What the dashboard reads, kept warm between its polls: run history and the audit tail.

A page polls once a second and a loop may hold 1,000 jobs with a day of runs each, so
neither reader parses everything on every request. On the JSON store each job's
history file is parsed once and then only for the bytes appended since (a trim, which
replaces the file, is a new inode: parsed again); the audit log's current file is read
the same way, keeping its last AUDIT_KEPT rows. On PostgreSQL the rows come from the
database, at most once per PG_REFRESH seconds whoever asks.

Runs are kept compact (ops/webruns.py), not as the records' dicts: a day of 1,000
1-minute jobs would otherwise hold about 1.5 GB in the loop. These readers run on the
HTTP endpoint's thread only: no lock, no sharing.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from cronctl.context import Context
from cronctl.ops.webruns import Run, RunIndex, decode_runs

AUDIT_KEPT = 5000
PG_REFRESH = 1.0


@dataclass
class _Position:
    """How far one append-only JSONL file was read: its inode and the offset read up to."""

    inode: int = -1
    offset: int = 0

    def new_lines(self, path: Path) -> tuple[bool, bytes]:
        """(restarted, the complete lines added to `path` since the last call). `restarted`:
        the file is gone, was replaced (a trim, a rotation) or truncated, so what was read
        from it before no longer stands; a torn last line waits for its end."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.inode, self.offset = -1, 0
            return True, b""
        restarted = st.st_ino != self.inode or st.st_size < self.offset
        if restarted:
            self.inode, self.offset = st.st_ino, 0
        if st.st_size == self.offset:
            return restarted, b""
        with open(path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read(st.st_size - self.offset)
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return restarted, complete


def _decode_lines(data: bytes) -> list[dict[str, Any]]:
    if not data:
        return []
    try:  # all lines at once: several times faster than one decode per line
        rows: list[dict[str, Any]] = msgspec.json.decode(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
        return [row for row in rows if isinstance(row, dict)]
    except msgspec.DecodeError:
        pass
    kept = []
    for line in data.splitlines():
        try:
            row = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue  # a torn or damaged line: readers skip it (SPEC §8)
        if isinstance(row, dict):
            kept.append(row)
    return kept


@dataclass
class _JobFile:
    """One job's history file read incrementally into its RunIndex."""

    position: _Position = field(default_factory=_Position)
    index: RunIndex = field(default_factory=RunIndex)

    def read(self, path: Path) -> None:
        restarted, complete = self.position.new_lines(path)
        if restarted:
            self.index = RunIndex()
        self.index.add(decode_runs(complete))


class HistoryReader:
    """Every job's runs, compact (ops/webruns.py), kept up to date from what was appended."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._files: dict[str, _JobFile] = {}
        self._pg: dict[str, RunIndex] = {}
        self._pg_read_at = float("-inf")

    def by_job(self) -> dict[str, RunIndex]:
        if not self.ctx.backend.records_in_home:
            return self._pg_by_job()
        runs_dir = self.ctx.paths.runs_dir
        names = sorted(d.name for d in runs_dir.iterdir() if d.is_dir()) if runs_dir.is_dir() else []
        for gone in set(self._files) - set(names):
            del self._files[gone]
        for name in names:
            self._files.setdefault(name, _JobFile()).read(self.ctx.paths.history(name))
        return {name: kept.index for name, kept in self._files.items() if len(kept.index)}

    def _pg_by_job(self) -> dict[str, RunIndex]:
        if time.monotonic() - self._pg_read_at >= PG_REFRESH:
            jobs: dict[str, list[Run]] = {}
            for record in self.ctx.leases.history(None):
                jobs.setdefault(str(record.get("job")), []).append(msgspec.convert(record, Run, strict=False))
            self._pg = {}
            for job, runs in jobs.items():
                self._pg[job] = RunIndex()
                self._pg[job].add(runs)
            self._pg_read_at = time.monotonic()
        return self._pg

    def records(self, job: str) -> list[dict[str, Any]]:
        """A job's full records, oldest first, read from the store (as `cronctl history NAME`)."""
        return self.ctx.leases.history(job)


class AuditReader:
    """The newest audit rows, oldest first."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._position = _Position()
        self._kept: deque[dict[str, Any]] = deque(maxlen=AUDIT_KEPT)
        self._pg_read_at = float("-inf")

    def rows(self) -> list[dict[str, Any]]:
        if not self.ctx.backend.records_in_home:
            if time.monotonic() - self._pg_read_at >= PG_REFRESH:
                self._kept = deque(self.ctx.audit.rows(), maxlen=AUDIT_KEPT)
                self._pg_read_at = time.monotonic()
            return list(self._kept)
        # After a rotation the older file's rows stay kept and the new file's follow them.
        _, complete = self._position.new_lines(self.ctx.audit.path)
        self._kept.extend(_decode_lines(complete))  # kept in the deque only: memory stays bounded
        return list(self._kept)
