"""Issue 23, items 2-3 in-process: notifications owed with the decision, delivered by the
worker to a real local receiver (HTTP and SMTP), retried with the same key, abandoned
after the give-up time, masked in every row. The clock of decisions and retries is a
FakeClock; the sockets are real. End-to-end tests with a real loop: test_notify_e2e.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.jobs.state import entry_from, new_state
from cronctl.loop.notify_send import send
from cronctl.loop.notify_worker import NotifyWorker
from cronctl.models import JobSpec, RunStatus
from cronctl.ops.status import status, status_json
from cronctl.paths import open_home
from cronctl.store import claims as claims_mod
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.jsonstore import Store
from cronctl.store.notify_owed import OWED, RetryPolicy
from cronctl.timefmt import to_iso
from tests.helpers.receivers import Receiver, SmtpSink

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
OWNER = Owner("g", 1, 1.0, "boot")
FAST = RetryPolicy(first=10.0, cap=60.0, give_up=300.0)


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    paths = open_home(tmp_path / "home")
    return Context(paths, Store(paths), AuditLog(paths.audit), FakeClock(T0))


def add_job(ctx: Context, notify: list[dict[str, Any]], **fields: Any) -> None:
    spec = JobSpec(name="job", command="true", every=60.0, notify=tuple(notify), **fields)
    with ctx.store.transaction() as doc:
        doc["jobs"]["job"] = entry_from(spec, new_state(T0, T0))


def run(ctx: Context, status_: RunStatus, output: str = "", exit_code: int | None = None) -> str:
    """One run of `job` through the store's own claim, start and finish."""
    now = ctx.clock.now()
    with ctx.store.transaction() as doc:
        doc["jobs"]["job"]["state"]["next_run_at"] = to_iso(now)
        (new,) = claims_mod.claim_due(doc, now, OWNER, Lease(1e9, now)).claims
        claims_mod.mark_dispatched(doc, OWNER, [Dispatched("job", new.run_id, 2, 2.0, 0.0)], now)
        claims_mod.finish(doc, "job", new.run_id, OWNER,
                          Outcome(status_, None, exit_code=exit_code, output_tail=output, duration=0.5), now)
    return new.run_id


def deliver(ctx: Context, worker: NotifyWorker, timeout: float = 30.0) -> None:
    """Offer what is owed now and wait until the worker has settled every try, offering
    again while more is due: one job's notifications go out one at a time, in order, so
    a job's second notification is due only once its first has settled."""
    deadline = time.monotonic() + timeout
    while True:
        due = ctx.leases.notify_due(ctx.clock.now())
        if not due:
            return
        worker.offer(due)
        while worker._busy():
            assert time.monotonic() < deadline, "the worker did not settle in time"
            time.sleep(0.02)
        assert time.monotonic() < deadline, "notifications kept coming due"


def audit(ctx: Context, event: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in ctx.paths.audit.read_text().splitlines() if line.strip()]
    return [row for row in rows if row["event"] == event]


@pytest.fixture
def worker(ctx: Context) -> Iterator[NotifyWorker]:
    started = NotifyWorker(ctx.leases, ctx.clock, "test", policy=FAST)
    started.start()
    yield started
    started.stop()


def test_failure_then_recovery_each_with_one_key_and_the_body_of_spec_12(
        ctx: Context, receiver: Receiver, worker: NotifyWorker) -> None:
    add_job(ctx, [{"url": receiver.url + "/hook/secret-token", "on": ["failure", "recovery", "stale"]}])
    failed = run(ctx, RunStatus.ERROR, output="boom\n", exit_code=3)
    deliver(ctx, worker)
    run(ctx, RunStatus.ERROR, exit_code=3)  # still failing: a failure, no second stale
    deliver(ctx, worker)
    passed = run(ctx, RunStatus.SUCCESS, exit_code=0)
    deliver(ctx, worker)
    bodies = receiver.bodies()
    assert [b["event"] for b in bodies] == ["failure", "stale", "failure", "recovery"]
    first = bodies[0]
    assert set(first) >= {"event", "job", "run_id", "chain", "status", "reason", "exit_code", "started_at",
                          "ended_at", "duration_s", "host", "output", "idempotency_key", "text"}
    assert (first["run_id"], first["status"], first["exit_code"], first["output"]) == (failed, "error", 3, "boom\n")
    assert bodies[3]["run_id"] == passed and "recovered" in bodies[3]["text"]
    keys = [r.headers["Idempotency-Key"] for r in receiver.snapshot()]
    assert keys == [b["idempotency_key"] for b in bodies] and len(set(keys)) == 4
    sent = audit(ctx, "notify.sent")
    assert len(sent) == 4 and all("secret-token" not in json.dumps(row) for row in sent)
    assert sent[0]["target"] == f"url http://127.0.0.1:{receiver.port}/***"
    assert OWED not in ctx.store.read()["jobs"]["job"]["state"]


def test_500_twice_then_200_same_key_three_times_and_sent_once(
        ctx: Context, receiver: Receiver, worker: NotifyWorker) -> None:
    receiver.codes = [500, 500, 200]
    add_job(ctx, [{"url": receiver.url, "on": ["failure"]}])
    run(ctx, RunStatus.TIMEOUT)
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    deliver(ctx, worker)
    assert len(receiver.snapshot()) == 1
    deliver(ctx, worker)  # not due yet: the backoff holds it
    assert len(receiver.snapshot()) == 1
    clock.advance(10)
    deliver(ctx, worker)
    clock.advance(20)  # the backoff doubled
    deliver(ctx, worker)
    keys = [r.headers["Idempotency-Key"] for r in receiver.snapshot()]
    assert len(keys) == 3 and len(set(keys)) == 1
    assert len(audit(ctx, "notify.sent")) == 1
    failed = audit(ctx, "notify.failed")
    assert [(row["attempt"], row["error"]) for row in failed] == [(1, "HTTP 500"), (2, "HTTP 500")]


def fail_until_given_up(ctx: Context, worker: NotifyWorker, url: str) -> None:
    """A failure owed to `url`, tried every minute of FAST's 5-minute give-up time and past it."""
    add_job(ctx, [{"url": url, "on": ["failure"]}])
    run(ctx, RunStatus.ERROR, exit_code=1)
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    for _ in range(12):
        deliver(ctx, worker)
        clock.advance(60)


def test_given_up_after_the_give_up_time_shown_by_status(ctx: Context, worker: NotifyWorker) -> None:
    fail_until_given_up(ctx, worker, "http://127.0.0.1:9/${NO_SUCH_TOKEN_VAR}")
    assert len(audit(ctx, "notify.abandoned")) == 1
    assert "NO_SUCH_TOKEN_VAR" in audit(ctx, "notify.failed")[0]["error"]
    job = status_json(status(ctx), only_stale=False)["jobs"][0]
    assert job["notify_abandoned"] == 1
    assert OWED not in ctx.store.read()["jobs"]["job"]["state"]


def test_a_4xx_is_not_retried(ctx: Context, receiver: Receiver, worker: NotifyWorker) -> None:
    receiver.codes = [404]
    add_job(ctx, [{"url": receiver.url, "on": ["failure"]}])
    run(ctx, RunStatus.ERROR, exit_code=1)
    deliver(ctx, worker)
    assert len(audit(ctx, "notify.abandoned")) == 1 and len(receiver.snapshot()) == 1


def test_ping_hits_start_base_and_fail_in_order(ctx: Context, receiver: Receiver, worker: NotifyWorker) -> None:
    add_job(ctx, [{"ping": receiver.url + "/ping/uuid", "on": ["start", "success", "failure"]}])
    run(ctx, RunStatus.SUCCESS, exit_code=0)
    deliver(ctx, worker)
    run(ctx, RunStatus.ERROR, output="it broke", exit_code=1)
    deliver(ctx, worker)
    paths = [r.path for r in receiver.snapshot()]
    assert paths == ["/ping/uuid/start", "/ping/uuid", "/ping/uuid/start", "/ping/uuid/fail"]
    assert b"it broke" in receiver.snapshot()[-1].body


def test_output_event_by_email_to_an_smtp_sink(ctx: Context) -> None:
    sink = SmtpSink()
    worker = NotifyWorker(ctx.leases, ctx.clock, "test", policy=FAST,
                          sender=lambda item: send(item, env={"CRONCTL_SMTP": sink.url, "OPS": "ops@example.com"}))
    worker.start()
    try:
        add_job(ctx, [{"email": "${OPS}", "on": ["output"]}])
        run(ctx, RunStatus.SUCCESS, output="", exit_code=0)  # printed nothing: no mail
        run(ctx, RunStatus.SUCCESS, output="3 files copied\n", exit_code=0)
        deliver(ctx, worker)
    finally:
        worker.stop()
        sink.stop()
    assert len(sink.messages) == 1
    mail = sink.messages[0]
    assert mail["To"] == "ops@example.com" and "printed output" in mail["Subject"]
    assert "3 files copied" in mail.get_payload()


def test_a_killed_run_is_no_failure_and_jobs_without_targets_owe_nothing(ctx: Context) -> None:
    add_job(ctx, [{"url": "http://127.0.0.1:9/x", "on": ["failure", "success"]}])
    run(ctx, RunStatus.KILLED)
    assert OWED not in ctx.store.read()["jobs"]["job"]["state"]
    add_job(ctx, [])
    run(ctx, RunStatus.ERROR, exit_code=1)
    assert OWED not in ctx.store.read()["jobs"]["job"]["state"]


def test_a_job_that_cannot_start_owes_failure_and_stale_with_no_command_run(cli: Any, home: Path,
                                                                            tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    missing = tmp_path / "no-such-dir"
    assert cli("add", "wedge", "--every", "1h", "--cwd", str(missing), "--notify", "http://127.0.0.1:9/x",
               "--", "touch", str(marker)).code == 0
    assert cli("force-run", "wedge").code == 0
    assert not marker.exists()
    owed = json.loads((home / "jobs.json").read_text())["jobs"]["wedge"]["state"][OWED]
    events = sorted(item["event"] for item in owed.values())
    assert events == ["failure", "stale"]
    stale = next(item for item in owed.values() if item["event"] == "stale")
    assert str(missing) in stale["body"]["text"]
    assert json.loads(cli("status", "--json").out)["jobs"][0]["state"] == "wedged"


def test_abandoned_notifications_are_shown_by_status_and_doctor(ctx: Context, worker: NotifyWorker) -> None:
    fail_until_given_up(ctx, worker, "http://127.0.0.1:9/token-path")
    from cronctl.cli.render import status_lines
    from cronctl.ops.doctor import examine

    lines = status_lines(status_json(status(ctx), only_stale=False), only_stale=False)
    assert any(line.startswith("notifications: job: 1 abandoned") for line in lines)
    found = [f for f in examine(ctx.paths, ctx.store, ctx.clock.now()) if f.check == "notifications"]
    assert len(found) == 1 and found[0].level == "warn" and "token-path" not in found[0].message


def test_the_health_pass_raises_stale_once_for_a_late_job_and_rearms_when_healthy(ctx: Context) -> None:
    from datetime import timedelta

    from cronctl.loop.notify_worker import health_pass
    from cronctl.store.notify_owed import ALERTS

    add_job(ctx, [{"url": "http://127.0.0.1:9/x", "on": ["stale"]}])
    with ctx.store.transaction() as doc:
        doc["jobs"]["job"]["state"]["next_run_at"] = to_iso(T0 - timedelta(hours=1))  # due an hour ago
    assert health_pass(ctx.leases, ctx.store.read(), ctx.clock.now()) == 1
    assert health_pass(ctx.leases, ctx.store.read(), ctx.clock.now()) == 0  # once per episode
    (owed,) = ctx.store.read()["jobs"]["job"]["state"][OWED].values()
    assert owed["event"] == "stale" and owed["body"]["status"] == "late"
    with ctx.store.transaction() as doc:
        doc["jobs"]["job"]["state"]["next_run_at"] = to_iso(T0 + timedelta(minutes=1))
    health_pass(ctx.leases, ctx.store.read(), ctx.clock.now())
    assert ALERTS not in ctx.store.read()["jobs"]["job"]["state"]  # the next episode is news again
