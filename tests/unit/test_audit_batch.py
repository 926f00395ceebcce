"""AuditLog.append_many: a burst of rows (apply -f of 10,000 jobs) in one O_APPEND write,
byte for byte the rows `append` writes one at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cronctl.clock import FakeClock
from cronctl.store.audit import AuditLog

ROWS: list[tuple[str, dict[str, Any]]] = [
    ("job.added", {"job": "a", "source": "/srv/jobs.yaml", "schedule": "every 1h"}),
    ("job.updated", {"job": "b", "source": "/srv/jobs.yaml", "fields": ["every"], "by": "apply", "adopted": None}),
    ("job.removed", {"job": "ć\u2028", "by": "apply --prune", "ts": "2020-01-01T00:00:00.000+00:00"}),
]


def test_a_batch_writes_the_bytes_of_one_append_per_row(tmp_path: Path) -> None:
    one_by_one = AuditLog(tmp_path / "one.jsonl", clock=FakeClock())
    for event, details in ROWS:
        one_by_one.append(event, **dict(details))
    batched = AuditLog(tmp_path / "batch.jsonl", clock=FakeClock())
    written = batched.append_many(ROWS)
    assert batched.path.read_bytes() == one_by_one.path.read_bytes()
    assert written == list(batched.rows()) == list(one_by_one.rows())
    assert "adopted" not in written[1]  # None details are left out, as by append
    assert ROWS[2][1]["ts"] == "2020-01-01T00:00:00.000+00:00"  # the caller's details are not consumed


def test_a_batch_lands_after_earlier_rows_and_each_listener_hears_every_row(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", clock=FakeClock())
    heard: list[str] = []
    log.listeners.append(lambda row: heard.append(row["event"]))
    log.append("loop.started")
    log.append_many(ROWS)
    assert [row["event"] for row in log.rows()] == heard == ["loop.started", "job.added", "job.updated",
                                                             "job.removed"]


def test_an_empty_batch_writes_nothing(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl")
    assert log.append_many([]) == []
    assert not log.path.exists()


def test_a_batch_cut_short_loses_only_its_torn_last_line(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit.jsonl", clock=FakeClock())
    log.append_many(ROWS)
    data = log.path.read_bytes()
    log.path.write_bytes(data[:-5])  # the writer died inside the last line
    assert [row["job"] for row in log.rows()] == ["a", "b"]


def test_a_log_that_writes_elsewhere_gets_its_own_append_per_row(tmp_path: Path) -> None:
    class Elsewhere(AuditLog):  # as PgAuditLog: rows go to a database, not to the file
        def append(self, event: str, **details: Any) -> dict[str, Any]:
            sent.append((event, details))
            return {"event": event, **details}

    sent: list[tuple[str, dict[str, Any]]] = []
    log = Elsewhere(tmp_path / "audit.jsonl")
    assert [row["event"] for row in log.append_many(ROWS)] == ["job.added", "job.updated", "job.removed"]
    assert sent == ROWS and not log.path.exists()
