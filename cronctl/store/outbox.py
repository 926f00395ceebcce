"""What must follow a run's end, written in the same store write as the end (issue 15, item 1).

A run's terminal write commits to the store first; its audit rows, its history record
and (when owed) its `on_failure` hook follow. A process killed in between would leave a
run the store calls `success`/`error` with no `run.finished` row, no record and no hook.
So the terminal write also leaves, in the job's state, a `pending` entry keyed by run id:

    {"rows": [[event, details], ...], "record": {...}, "on_failure": bool, "by": writer}

The writer delivers it right after the commit and drops the entry on the next write it
makes anyway (no extra write per finish). An entry whose writer died (`by`: pid, start
time and boot, judged like a claim's owner) is delivered by whoever opens the store next
with a loop's engine, under the store lock, deduplicated against what already reached
the audit log (a scan of its tail for the run's rows) and the history (find_record), and
against the hook's own log file: nothing is lost, nothing is doubled.

A store without the key has nothing pending.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cronctl.paths import Paths
from cronctl.store import chain_skips, history
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Event, Finished

PENDING = "pending"
# How much of the audit log's end (across rotations) is scanned for rows already written.
AUDIT_TAIL_BYTES = 8 * 1024 * 1024

WriterAlive = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class OwedHook:
    """An `on_failure` hook a dead writer owed and never started."""

    job: str
    run_id: str
    record: dict[str, Any]


_identity: dict[str, Any] | None = None
# How this process's start time is read: psutil's create_time() unless the loop layer,
# which may import proc/identity.py (the same formula, read from /proc without psutil's
# import: about 15 ms of a `force-run` run here), installs that reader.
_start_time_reader: Callable[[], float] | None = None


def use_start_time_reader(reader: Callable[[], float]) -> None:
    global _start_time_reader
    _start_time_reader = reader


def writer_identity() -> dict[str, Any]:
    """This process as `by` of its entries: the fields `owner_alive` compares (pid reuse safe)."""
    global _identity
    if _identity is None or _identity["pid"] != os.getpid():
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        _identity = {"pid": os.getpid(), "start_time": _own_start_time(), "boot_id": boot}
    return dict(_identity)


def _own_start_time() -> float:
    if _start_time_reader is not None:
        return _start_time_reader()
    import psutil  # the same start time as proc.identity's (psutil's own formula)

    return float(psutil.Process().create_time())


def owe(doc: dict[str, Any], done: Finished, rows: list[Event], hook: bool) -> tuple[str, str] | None:
    """Inside the terminal write's transaction: leave what must follow `done` as pending
    (`rows`: its audit rows, in order; `hook`: whether its on_failure is owed)."""
    record = done.record
    if done.fenced or record is None:
        return None
    entry = doc["jobs"].get(record["job"])
    if entry is None:
        return None
    entry["state"].setdefault(PENDING, {})[record["run_id"]] = {
        "rows": [[str(event.name), event.details] for event in rows],
        "record": record, "on_failure": hook, "by": writer_identity(),
    }
    return record["job"], record["run_id"]


def drop(doc: dict[str, Any], settled: set[tuple[str, str]]) -> None:
    """Inside a write made anyway: forget the entries delivered since."""
    for job, run_id in settled:
        state = (doc["jobs"].get(job) or {}).get("state") or {}
        pending = state.get(PENDING)
        if pending is not None:
            pending.pop(run_id, None)
            if not pending:
                del state[PENDING]


def orphaned(doc: dict[str, Any], alive: WriterAlive) -> list[tuple[str, str]]:
    """(job, run_id) of the entries whose writer died before delivering them."""
    return [(job, run_id) for job, entry in doc["jobs"].items()
            for run_id, item in ((entry.get("state") or {}).get(PENDING) or {}).items()
            if not alive(item.get("by") or {})]


def deliver_orphans(doc: dict[str, Any], found: list[tuple[str, str]], audit: AuditLog,
                    paths: Paths) -> list[OwedHook]:
    """Under the store lock: write what is missing of each orphaned entry, then drop it.

    Returns the hooks still owed (their entries stay until the caller started them).
    """
    seen = audit_rows_of(audit, {run_id for _, run_id in found})
    owed: list[OwedHook] = []
    for job, run_id in found:
        pending = (doc["jobs"].get(job) or {}).get("state", {}).get(PENDING) or {}
        item = pending.get(run_id)
        if item is None:
            continue  # another process delivered it meanwhile
        for name, details in item.get("rows") or []:
            if (name, run_id) not in seen:
                audit.append(name, **details)
        chain_skips.write_records(paths, [(name, details) for name, details in item.get("rows") or []], dedupe=True)
        record = item.get("record")
        if record is not None and history.find_record(paths, job, run_id) is None:
            keep_runs = (doc["jobs"].get(job) or {}).get("keep_runs")  # the job's own retention (SPEC §13)
            history.append_record(paths, record, keep_runs)
            history.prune_logs(paths, job, keep_runs)
        if item.get("on_failure") and record is not None and not hook_log(paths, job, run_id).exists():
            owed.append(OwedHook(job, run_id, record))
            continue
        drop(doc, {(job, run_id)})
    return owed


def hook_log(paths: Paths, job: str, run_id: str) -> Path:
    """The on_failure hook's log: it exists once the hook was spawned."""
    return paths.job_runs_dir(job) / f"{run_id}.on_failure.log"


def audit_rows_of(audit: AuditLog, run_ids: set[str]) -> set[tuple[str, str]]:
    """(event, run_id) of the rows of these runs found in the audit log's last bytes."""
    found: set[tuple[str, str]] = set()
    if not run_ids:
        return found
    needles = [run_id.encode() for run_id in run_ids]
    budget = AUDIT_TAIL_BYTES
    for path in reversed(audit.files_oldest_first()):
        if budget <= 0:
            break
        data = _tail(path, budget)
        budget -= len(data)
        for raw in data.splitlines():
            if not any(needle in raw for needle in needles):
                continue
            try:
                row = json.loads(raw)
            except ValueError:
                continue  # a torn line: its row was never written whole
            if isinstance(row, dict) and row.get("run_id") in run_ids:
                found.add((str(row.get("event")), str(row["run_id"])))
    return found


def _tail(path: Path, size: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            length = handle.tell()
            handle.seek(max(0, length - size))
            return handle.read()
    except FileNotFoundError:
        return b""
