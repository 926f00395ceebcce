"""The append-only JSONL audit log: one row per decision, one write per row."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

from cronctl.timefmt import from_iso

# Rotation keeps the log bounded: audit.jsonl -> audit.jsonl.1 -> ... -> audit.jsonl.N
DEFAULT_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_KEEP = 3


def now_ms_iso(clock: Any = None) -> str:
    now = clock.now() if clock is not None else datetime.now(timezone.utc)
    return now.astimezone(timezone.utc).isoformat(timespec="milliseconds")


@dataclass
class AuditLog:
    path: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    keep: int = DEFAULT_KEEP
    # The Context's clock (a FakeClock in tests), so rows and slots tell the same time;
    # None: the system clock.
    clock: Any = None
    # Called with every row written (the foreground loop echoes decisions to its terminal).
    listeners: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)
    # Fields every row of this writer carries (the dashboard's actions: by=http and the client).
    tags: dict[str, Any] = field(default_factory=dict)

    def append(self, event: str, **details: Any) -> dict[str, Any]:
        """Write one row with a single O_APPEND write so concurrent writers never interleave.

        Audit must never take the scheduler down: a failed write is reported on stderr only.
        """
        row = self._row(event, details)
        self._write(_line(row))
        tell_listeners(self.listeners, row)
        return row

    def append_many(self, rows: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """`append` for each (event, details) of `rows`, in one O_APPEND write of whole lines.

        For a burst of one command (`apply -f` of 10,000 jobs: 10,000 `job.added` rows):
        one open and one write instead of one each per row. The rows are the ones `append`
        writes; another writer's row lands before or after the batch, never inside a line,
        and a batch cut short by a crash ends in at most one torn line, skipped by readers.
        A subclass that writes elsewhere (PgAuditLog overrides `append`) gets its own
        `append` per row.
        """
        if type(self).append is not AuditLog.append:
            return [self.append(event, **details) for event, details in rows]
        written = [self._row(event, dict(details)) for event, details in rows]
        if written:
            self._write(b"".join(_line(row) for row in written))
        for row in written:
            tell_listeners(self.listeners, row)
        return written

    def _row(self, event: str, details: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = {"ts": details.pop("ts", None) or now_ms_iso(self.clock), "event": str(event)}
        row.update({k: v for k, v in details.items() if v is not None})
        row.update(self.tags)
        return row

    def _write(self, data: bytes) -> None:
        try:
            self._rotate_if_needed()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:  # a regular file takes it all at once; a short write must not lose the rest
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        except OSError as exc:
            import sys

            print(f"cronctl: cannot write audit row to {self.path}: {exc.strerror}", file=sys.stderr)

    def _rotate_if_needed(self) -> None:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return
        if size < self.max_bytes:
            return
        for index in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{index}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{index + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))

    def files_oldest_first(self) -> list[Path]:
        rotated = [self.path.with_name(f"{self.path.name}.{i}") for i in range(self.keep, 0, -1)]
        return [p for p in [*rotated, self.path] if p.exists()]

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every readable row, oldest first; a torn or garbled line is skipped."""
        for path in self.files_oldest_first():
            try:
                handle = path.open("rb")
            except FileNotFoundError:
                continue
            with handle:
                for raw in handle:
                    row = _parse_row(raw)
                    if row is not None:
                        yield row


def _line(row: dict[str, Any]) -> bytes:
    return (json.dumps(row, sort_keys=True, default=str, ensure_ascii=False) + "\n").encode("utf-8")


def _parse_row(raw: bytes) -> dict[str, Any] | None:
    if not raw.endswith(b"\n"):
        return None  # torn last line: the writer died mid-append
    try:
        row = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return row if isinstance(row, dict) and "event" in row else None


def filter_rows(
    rows: Iterator[dict[str, Any]],
    *,
    job: str | None = None,
    event: str | None = None,
    since: datetime | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The last `limit` rows matching every given filter, oldest first.

    `event` matches exactly, or as a prefix when it ends with '.' or '*' (run.*).
    """
    prefix = _event_prefix(event) if event else None
    selected: list[dict[str, Any]] = []
    for row in rows:
        if job is not None and row.get("job") != job:
            continue
        if event is not None:
            name = str(row.get("event"))
            if (prefix is not None and not name.startswith(prefix)) or (prefix is None and name != event):
                continue
        if since is not None and not _row_since(row, since):
            continue
        selected.append(row)
    if limit is not None:
        selected = selected[-limit:] if limit > 0 else []
    return selected


def _event_prefix(event: str) -> str | None:
    """The prefix an --event matches: 'run.*' and 'run.' are prefixes, and so is a bare
    first part such as 'chain' (every chain.* row). None: an exact name."""
    if event.endswith("*") or event.endswith("."):
        return event.rstrip("*")
    return None if "." in event else event + "."


def check_event(event: str, known: list[str]) -> str | None:
    """Why an --event can match no row of this version (None: it can): it names no known
    event and is no prefix of one. A typo must not read as 'nothing happened'."""
    prefix = _event_prefix(event)
    if any(name == event or (prefix is not None and name.startswith(prefix)) for name in known):
        return None
    return f"--event '{event}' matches no audit event; the events are: {', '.join(sorted(known))} " \
           "(a prefix such as 'run' or 'run.*' matches a group)"


def _row_since(row: dict[str, Any], since: datetime) -> bool:
    try:
        ts = from_iso(row.get("ts"))
    except (TypeError, ValueError):
        return False
    return ts is not None and ts >= since


def tell_listeners(listeners: list[Callable[[dict[str, Any]], None]], row: dict[str, Any]) -> None:
    """Hand a written row to each listener (the loop's echo); a listener's error is dropped:
    an echo must never cost a decision."""
    for listener in listeners:
        try:
            listener(row)
        except Exception:
            pass
