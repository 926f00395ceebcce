"""`apply -f` with its new rows made ahead (ops/apply_ahead.py, store/pg/copy_text.py): the
COPY text cronctl encodes reads back as psycopg's own, and an apply made ahead stores, row
for row and audit row for audit row, what an apply that makes everything in its write does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.ops import definitions as ops
from cronctl.store.pg.connect import Connection, parse_store_url
from cronctl.store.pg.copy_text import CHUNK_BYTES, chunks, copy_line, write_lines

T = TypeVar("T")

AWKWARD_TEXTS = ["plain", "", "tab\there", "line\nbreak", "carriage\rreturn", "back\\slash", "\\N", "\\\\N\t\\",
                 "unicode é ☃ 𝄞", " leading and trailing ", "quote ' and \" both", "end\\"]
INSTANTS = [datetime(2026, 1, 1, tzinfo=timezone.utc), datetime(2027, 6, 30, 23, 59, 59, 999999, tzinfo=timezone.utc),
            datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=5, minutes=45))),
            datetime(1999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-9, minutes=-30)))]
JSONS = ['{"a": "tab\\there"}', '{"path": "C:\\\\dir", "n": 1.5, "ok": true, "none": null}', '[]',
         '{"nl": "x\\ny", "u": "\\u00e9\\u2603"}']


def _rows() -> list[tuple[Any, ...]]:
    rows = []
    for index, text in enumerate(AWKWARD_TEXTS):
        rows.append((index, text, index % 2 == 0, INSTANTS[index % len(INSTANTS)], JSONS[index % len(JSONS)]))
    rows.append((len(rows), None, None, None, None))
    return rows


def _copied(conn: Connection, table: str, fill: Callable[[Any], None]) -> list[tuple[Any, ...]]:
    conn.execute(f"CREATE TEMP TABLE {table} (n int, t text, b boolean, at timestamptz, j jsonb)")
    with conn.cursor() as cur, cur.copy(f"COPY {table} (n, t, b, at, j) FROM STDIN") as copy:
        fill(copy)
    return conn.execute(f"SELECT n, t, b, at, j FROM {table} ORDER BY n").fetchall()


def test_cronctls_copy_lines_read_back_as_psycopgs_write_row(conn: Connection) -> None:
    rows = _rows()
    with conn.transaction():
        ours = _copied(conn, "ours", lambda copy: write_lines(copy, [copy_line(row) for row in rows],
                                                              conn.info.encoding))
        theirs = _copied(conn, "theirs", lambda copy: [copy.write_row(row) for row in rows])
    assert ours == theirs
    assert [row[1] for row in ours[:-1]] == AWKWARD_TEXTS and ours[-1][1:] == (None, None, None, None)
    assert [row[3] for row in ours[:4]] == INSTANTS  # the same instants, whatever their offsets


def test_lines_go_in_pieces_that_end_at_a_lines_end() -> None:
    lines = [copy_line((index, "x" * 1000)) for index in range(3000)]
    pieces = list(chunks(lines))
    assert len(pieces) > 1 and all(len(piece) < CHUNK_BYTES + 1100 for piece in pieces)
    assert b"".join(pieces) == b"".join(lines) and all(piece.endswith(b"\n") for piece in pieces)
    assert list(chunks([])) == []


FILE = "jobs:\n" + "".join(f"  - name: job-{index}\n    every: {index + 1}m\n    command: /bin/echo {index}\n"
                           for index in range(30)) + "  - name: hand\n    cron: \"5 4 * * *\"\n    command: /bin/true\n"


def _stored(conn: Connection) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with conn.transaction():
        jobs = conn.execute("SELECT name, spec, spec_version, overlap, paused, next_run_at, last_slot, state, wake_at"
                            " FROM cronctl_jobs ORDER BY name").fetchall()
        audit = conn.execute("SELECT event, job, run_id, slot, reason, fence, host_id, details FROM cronctl_audit"
                             " ORDER BY id").fetchall()
    return jobs, audit


def _apply_on_fresh_rows(ctx: Context, conn: Connection, path: Path, ahead: Any) -> tuple[list[Any], list[Any]]:
    with conn.transaction():
        conn.execute("DELETE FROM cronctl_jobs")
        conn.execute("DELETE FROM cronctl_audit")
    ops.add_job(ctx, ops.spec_from_options("hand", {"every": "1h", "command": "true"}))  # adopted by the file
    plan = ops.apply_file(ctx, str(path), ahead=ahead)
    assert plan.applied and len(plan.create) == 30 and plan.adopt == ["hand"]
    return _stored(conn)


def test_an_apply_made_ahead_stores_what_an_apply_made_in_its_write_stores(store_url: str, tmp_path: Path,
                                                                         conn: Connection) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(FILE)
    ctx = Context.open(tmp_path / "home", clock=FakeClock(datetime(2026, 5, 4, 3, 2, 1, tzinfo=timezone.utc)),
                       store_url=parse_store_url(store_url))
    ran: list[str] = []

    def here(work: Callable[[], T]) -> T:
        ran.append(getattr(work, "__name__", "?"))
        return work()

    made_ahead = _apply_on_fresh_rows(ctx, conn, path, here)
    assert len(ran) == 2  # the parse, then the new rows
    assert _apply_on_fresh_rows(ctx, conn, path, None) == made_ahead
    assert len(made_ahead[0]) == 31 and len(made_ahead[1]) == 1 + 31


def test_a_job_added_meanwhile_is_adopted_not_inserted_twice(store_url: str, tmp_path: Path) -> None:
    """Between the read of the stored names and the write, another writer adds one of the file's
    jobs: its prepared row is not used, the apply plans it as the job it finds (adopted)."""
    path = tmp_path / "jobs.yaml"
    path.write_text(FILE)
    ctx = Context.open(tmp_path / "home", store_url=parse_store_url(store_url))
    other = ctx.reopen()
    calls: list[int] = []

    def here_then_add(work: Callable[[], T]) -> T:
        done = work()
        calls.append(1)
        if len(calls) == 2:  # the new rows are made: the other writer adds one of them
            ops.add_job(other, ops.spec_from_options("job-7", {"every": "1h", "command": "true"}))
        return done

    plan = ops.apply_file(ctx, str(path), ahead=here_then_add)
    assert plan.applied and "job-7" not in plan.create and "job-7" in plan.adopt and len(plan.create) == 30
    stored = ctx.definitions.get("job-7")
    assert stored is not None and stored["every"] == "8m" and stored["source"] == str(path)
    assert len(ctx.definitions.names()) == 31
