"""The `Definitions` interface (store/definitions.py), the same on each backend: what the
defining commands may rely on, whatever store holds the jobs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.errors import ConflictError
from cronctl.jobs.state import entry_from, new_state
from cronctl.models import AuditEvent, JobSpec
from cronctl.store.pg.connect import parse_store_url
from tests.helpers import pgfixtures

pg_server_url = pgfixtures.pg_server_url
pg_url = pgfixtures.pg_url
store_url = pgfixtures.store_url

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture(params=["json", "postgres"])
def open_context(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Context]:
    """Opens one invocation on the test's store: each its own lock descriptor, or its own connection."""
    url = parse_store_url(request.getfixturevalue("store_url")) if request.param == "postgres" else None
    return lambda: Context.open(tmp_path / "home", clock=FakeClock(T0), store_url=url)


@pytest.fixture
def ctx(open_context: Callable[[], Context]) -> Context:
    return open_context()


def entry(name: str, source: str | None = None, **fields: Any) -> dict[str, Any]:
    spec = JobSpec(name=name, source=source, **{"command": "true", "every": 3600.0, **fields})
    return entry_from(spec, new_state(T0, T0 + timedelta(hours=1)))


def define(ctx: Context, *entries: dict[str, Any]) -> None:
    with ctx.definitions.editing([e["name"] for e in entries]) as edit:
        for one in entries:
            edit.add(one)


def events(ctx: Context, event: str) -> list[str]:
    return [row["job"] for row in ctx.audit.rows() if row["event"] == event]


def test_an_added_job_reads_back_by_name_and_among_the_names(ctx: Context) -> None:
    define(ctx, entry("a"), entry("b"))
    got = ctx.definitions.get("a")
    assert got is not None and got["command"] == "true"
    assert got["state"]["next_run_at"] == "2026-03-01T13:00:00.000+00:00"
    assert ctx.definitions.get("nope") is None
    assert ctx.definitions.names() == {"a", "b"}


def test_an_edit_hands_over_only_the_jobs_it_names_and_those_of_its_source(ctx: Context) -> None:
    define(ctx, entry("a"), entry("b", source="/f.yaml"), entry("c", source="/f.yaml"), entry("d"))
    with ctx.definitions.editing(["a", "missing"]) as edit:
        assert sorted(edit.entries) == ["a"]
    with ctx.definitions.editing(["a"], source="/f.yaml") as edit:
        assert sorted(edit.entries) == ["a", "b", "c"]
    with ctx.definitions.editing(None) as edit:
        assert sorted(edit.entries) == ["a", "b", "c", "d"]


def test_replace_and_remove_land_with_their_audit_rows(ctx: Context) -> None:
    define(ctx, entry("a"), entry("b"))
    with ctx.definitions.editing(["a", "b"]) as edit:
        changed = dict(edit.entries["a"], command="false")
        changed["state"] = {**changed["state"], "paused": True}
        edit.replace("a", changed)
        edit.remove("b")
        edit.audit([(AuditEvent.JOB_UPDATED, {"job": "a", "by": "edit"}), (AuditEvent.JOB_REMOVED, {"job": "b"})])
    got = ctx.definitions.get("a")
    assert got is not None and got["command"] == "false" and got["state"]["paused"] is True
    assert ctx.definitions.names() == {"a"}
    assert events(ctx, "job.updated") == ["a"] and events(ctx, "job.removed") == ["b"]


def test_an_exception_in_the_body_writes_nothing_and_no_audit_row(ctx: Context) -> None:
    define(ctx, entry("a"))
    with pytest.raises(ConflictError), ctx.definitions.editing(["a", "b"]) as edit:
        edit.add(entry("b"))
        edit.remove("a")
        edit.audit([(AuditEvent.JOB_ADDED, {"job": "b"})])
        raise ConflictError("refused")
    assert ctx.definitions.names() == {"a"}
    assert events(ctx, "job.added") == []


def test_what_was_prepared_is_written_only_for_the_very_objects_the_write_adds(ctx: Context) -> None:
    """`prepare` (a big `apply -f`, before its transaction): the write takes what was prepared for
    the objects it adds, encodes any other itself, and writes nothing prepared that it was not given."""
    made_a, made_b, made_c = entry("a"), entry("b"), entry("c")
    row_a = (AuditEvent.JOB_ADDED, {"job": "a", "source": "jobs.yaml"})
    row_b = (AuditEvent.JOB_ADDED, {"job": "b", "source": "jobs.yaml"})
    ctx.definitions.prepare({"a": made_a, "b": made_b, "c": made_c}, [row_a, row_b])
    with ctx.definitions.editing(["a", "b"]) as edit:
        edit.add(made_a)
        edit.add(entry("b", command="false"))  # made again since: written as it is now
        edit.audit([row_a, (AuditEvent.JOB_ADDED, {"job": "b", "source": "other.yaml"})])
    got_a, got_b = ctx.definitions.get("a"), ctx.definitions.get("b")
    assert got_a is not None and got_a["command"] == "true" and got_a["state"] == made_a["state"]
    assert got_b is not None and got_b["command"] == "false"
    assert ctx.definitions.names() == {"a", "b"}  # c was prepared, never added
    added = {row["job"]: row["source"] for row in ctx.audit.rows() if row["event"] == "job.added"}
    assert added == {"a": "jobs.yaml", "b": "other.yaml"}


def test_linked_specs_give_the_upstreams_asked_for(ctx: Context) -> None:
    define(ctx, entry("up"), entry("other"))
    with ctx.definitions.editing(["new"]) as edit:
        linked = edit.linked_specs(["up"])
    # The JSON document is in hand whole: it gives every job; the database only what is asked.
    assert "up" in linked and linked["up"].every == 3600.0


def test_linked_specs_give_every_chained_job_unasked(ctx: Context) -> None:
    define(ctx, entry("up"), entry("down", after=["up"]), entry("alone"))
    with ctx.definitions.editing(["new"]) as edit:
        linked = edit.linked_specs([])
    # What the chain rules judge a new `after` by: every job with an `after`, whatever was asked.
    assert "down" in linked and linked["down"].after == ("up",)


def test_of_two_writers_adding_one_name_one_lands_and_the_other_sees_it_or_fails(
        open_context: Callable[[], Context]) -> None:
    """Two invocations add job `x` at once, each as `add` does (look, then add), their writes
    open together: one lands; the other either finds `x` among its entries (the JSON store's
    lock made it wait) or its write fails with `already_exists` (PostgreSQL: no row to lock
    yet, the later commit loses). Never both, never one over the other."""
    first, second = open_context(), open_context()
    first_open, outcome = threading.Event(), {}

    def add(ctx: Context, who: str, opened: Callable[[], None]) -> None:
        try:
            with ctx.definitions.editing(["x"]) as edit:
                if "x" in edit.entries:
                    outcome[who] = "saw it"
                    return
                edit.add(entry("x", command=who))
                opened()
            outcome[who] = "added"
        except ConflictError as exc:
            outcome[who] = str(exc)

    thread = threading.Thread(target=lambda: (first_open.wait(30), add(second, "second", lambda: None)))
    thread.start()
    # The second writer is let in while the first's write is still open.
    add(first, "first", lambda: (first_open.set(), thread.join(0.5)))
    thread.join(30)
    [(winner, _)] = [(who, said) for who, said in outcome.items() if said == "added"]
    [lost] = [said for said in outcome.values() if said != "added"]
    assert lost in ("saw it", "job 'x' already exists; change it with 'cronctl edit x'")
    got = first.definitions.get("x")
    assert got is not None and got["command"] == winner
