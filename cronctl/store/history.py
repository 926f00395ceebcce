"""Per-job run history (runs/<job>/history.jsonl) and run-log retention."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from cronctl.paths import Paths

HISTORY_MAX_BYTES = 512 * 1024
HISTORY_KEEP_ROWS = 200
LOGS_KEPT = 20


def append_record(paths: Paths, record: dict[str, Any], keep_runs: int | None = None) -> None:
    """One O_APPEND write, under a flock of the file so that a trim never loses it.

    The loop and a `force-run` or `kill` CLI may append to one job's history at
    once; a trim replaces the file, so an append checks, under the lock, that it
    still writes to the file in place (else it retries on the new one).
    A job that keeps more run logs than HISTORY_KEEP_ROWS keeps as many records: its
    history is never shorter than its logs (SPEC §13).
    """
    keep_rows = max(HISTORY_KEEP_ROWS, keep_runs or 0)
    max_bytes = HISTORY_MAX_BYTES * keep_rows // HISTORY_KEEP_ROWS
    path = paths.history(record["job"])
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    for _ in range(10):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                continue
            if current != os.fstat(fd).st_ino:
                continue  # trimmed (replaced) while we waited for the lock
            os.write(fd, line)
            if os.fstat(fd).st_size > max_bytes:
                _trim(path, keep_rows)
            return
        finally:
            os.close(fd)
    raise OSError(f"cannot append to {path}: it keeps being replaced")


def _trim(path: Path, keep_rows: int = HISTORY_KEEP_ROWS) -> None:
    """Keep the newest rows (the caller holds the file's flock)."""
    rows = path.read_bytes().splitlines(keepends=True)[-keep_rows:]
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(b"".join(rows))
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def read_records(paths: Paths, job: str | None) -> list[dict[str, Any]]:
    """Records of one job (or all), oldest first; torn lines skipped."""
    if job is not None:
        files = [paths.history(job)]
    elif paths.runs_dir.is_dir():
        files = [d / "history.jsonl" for d in sorted(paths.runs_dir.iterdir()) if d.is_dir()]
    else:
        files = []
    records: list[dict[str, Any]] = []
    for path in files:
        try:
            lines = path.read_bytes().splitlines(keepends=True)
        except FileNotFoundError:
            continue
        for raw in lines:
            if not raw.endswith(b"\n"):
                continue
            try:
                records.append(json.loads(raw))
            except ValueError:
                continue
    records.sort(key=lambda r: (r.get("ended_at") or "", r.get("run_id") or ""))
    return records


def find_record(paths: Paths, job: str, run_id: str) -> dict[str, Any] | None:
    for record in reversed(read_records(paths, job)):
        if record.get("run_id") == run_id:
            found: dict[str, Any] = record
            return found
    return None


def prune_logs(paths: Paths, job: str, keep: int | None = None) -> int:
    """Keep the newest `keep` run logs of a job (run ids sort by time); None: LOGS_KEPT."""
    keep = LOGS_KEPT if keep is None else keep
    directory = paths.job_runs_dir(job)
    try:
        logs = sorted(p for p in directory.iterdir() if p.suffix == ".log" and p.name.count(".") == 1)
    except FileNotFoundError:
        return 0
    removed = 0
    for old in logs[:-keep] if keep > 0 else logs:
        try:
            old.unlink()
            old.with_name(old.stem + ".on_failure.log").unlink(missing_ok=True)
            removed += 1
        except FileNotFoundError:
            pass
    return removed
