"""Issue 23, item 1: health states that mean one thing (SPEC §12), on an injected clock.

`due` while a claim waits for its slot, `running` only once the child started, `failing`
kept while the next run is held or running until a run succeeds; `alert_after` decides
when failures make a job stale; /healthz has one shape whatever the state.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.jobs.health import job_health
from cronctl.jobs.state import JobView, entry_from, new_state
from cronctl.models import JobSpec, RunStatus
from cronctl.ops.probes import healthz
from cronctl.ops.status import status, status_json
from cronctl.paths import open_home
from cronctl.store import claims as claims_mod
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.jsonstore import Store
from cronctl.timefmt import to_iso

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
OWNER = Owner("g", 1, 1.0, "boot")


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    paths = open_home(tmp_path / "home")
    context = Context(paths, Store(paths), AuditLog(paths.audit), FakeClock(T0))
    with context.store.transaction() as doc:
        spec = JobSpec(name="job", command="false", every=3.0, alert_after=2)
        doc["jobs"]["job"] = entry_from(spec, new_state(T0, T0 + timedelta(seconds=3)))
    return context


def _health(ctx: Context) -> Any:
    view = JobView.from_entry(ctx.store.read()["jobs"]["job"])
    return job_health(view, ctx.clock.now(), lambda _o: True, lambda _c: False)


def _claim_ahead(ctx: Context) -> str:
    """Claimed 2 s before its slot, as the loop does for runs it pre-spawns."""
    now = ctx.clock.now()
    with ctx.store.transaction() as doc:
        slot = doc["jobs"]["job"]["state"]["next_run_at"]
        batch = claims_mod.claim_ahead(doc, now, now + timedelta(seconds=3), OWNER, Lease(1e9, now))
    (new,) = batch.claims
    assert to_iso(new.slot) == slot
    return new.run_id


def _start(ctx: Context, run_id: str) -> None:
    with ctx.store.transaction() as doc:
        claims_mod.mark_dispatched(doc, OWNER, [Dispatched("job", run_id, 2, 2.0, 0.0)], ctx.clock.now())


def _finish(ctx: Context, run_id: str, status_: RunStatus) -> None:
    with ctx.store.transaction() as doc:
        claims_mod.finish(doc, "job", run_id, OWNER, Outcome(status_, None, exit_code=1), ctx.clock.now())


def _cycle(ctx: Context, clock: FakeClock, result: RunStatus) -> list[str]:
    """One run from claim to end, with the state seen at each step."""
    seen = []
    clock.advance(1)  # 2 s before the slot
    run_id = _claim_ahead(ctx)
    seen.append(_health(ctx).state)
    clock.advance(2)  # the slot: the child starts
    _start(ctx, run_id)
    seen.append(_health(ctx).state)
    clock.advance(0.5)
    _finish(ctx, run_id, result)
    seen.append(_health(ctx).state)
    return seen


def test_due_then_running_then_failing_kept_until_a_success(ctx: Context) -> None:
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    assert _cycle(ctx, clock, RunStatus.ERROR) == ["due", "running", "failing"]
    assert _health(ctx).stale is False  # 1 failure < alert_after 2
    # The next run, held and then running, leaves the job failing: the state does not flap.
    assert _cycle(ctx, clock, RunStatus.ERROR) == ["failing", "failing", "failing"]
    assert _health(ctx).stale is True  # 2 failures in a row
    assert _cycle(ctx, clock, RunStatus.SUCCESS) == ["failing", "failing", "ok"]
    assert _health(ctx).stale is False


def test_alert_after_defaults_to_one(ctx: Context) -> None:
    with ctx.store.transaction() as doc:
        doc["jobs"]["job"].pop("alert_after")
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    _cycle(ctx, clock, RunStatus.ERROR)
    assert (_health(ctx).state, _health(ctx).stale) == ("failing", True)


def test_healthz_has_one_shape_whatever_the_state(ctx: Context) -> None:
    clock = ctx.clock
    assert isinstance(clock, FakeClock)
    shapes = []
    for result in (RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.ERROR):
        _cycle(ctx, clock, result)
        reply = healthz(status(ctx))
        body = json.loads(reply.body)
        shapes.append((tuple(sorted(body)), type(body["loop"]).__name__, type(body["stale"]).__name__))
        job = status_json(status(ctx), only_stale=False)["jobs"][0]
        assert {"consecutive_failures", "alert_after", "notify_abandoned"} <= set(job)
    assert len(set(shapes)) == 1, shapes
    assert shapes[0] == (("jobs", "loop", "ok", "stale"), "dict", "list")


def test_add_and_edit_take_alert_after_and_notify(cli: Any) -> None:
    assert cli("add", "nightly", "--cron", "0 3 * * *", "--alert-after", "2",
               "--notify", "https://hooks.example.com/T0/secret", "--notify", "mailto:ops@example.com",
               "--notify-on", "failure,recovery", "--", "true").code == 0
    shown = json.loads(cli("show", "nightly", "--json").out)
    job = shown.get("job", shown)
    assert job["alert_after"] == 2
    assert job["notify"] == [{"url": "https://hooks.example.com/***", "on": ["failure", "recovery"]},
                             {"email": "ops@example.com", "on": ["failure", "recovery"]}]
    assert cli("edit", "nightly", "--notify", "ping+https://hc-ping.com/u-u-i-d").code == 0
    job = json.loads(cli("show", "nightly", "--json").out)
    job = job.get("job", job)
    assert job["notify"] == [{"ping": "https://hc-ping.com/***", "on": ["start", "success", "failure"]}]
    bad = cli("edit", "nightly", "--notify", "https://x.example.com/", "--notify-on", "explode")
    assert bad.code != 0 and "explode" in bad.err
    assert cli("edit", "nightly", "--notify", "none").code == 0
    job = json.loads(cli("show", "nightly", "--json").out)
    assert job.get("job", job)["notify"] == []


def test_show_and_list_mask_notification_urls_but_the_store_keeps_them(cli: Any, home: Any) -> None:
    assert cli("add", "nightly", "--cron", "0 3 * * *", "--notify", "https://hooks.example.com/T0/s3cret?k=v",
               "--", "true").code == 0
    for args in (("show", "nightly"), ("show", "nightly", "--json"), ("list", "--json"), ("status", "--json")):
        assert "s3cret" not in cli(*args).out, args
    assert "s3cret" in (home / "jobs.json").read_text()  # the loop needs it whole
    assert cli("edit", "nightly", "--alert-after", "2").code == 0  # an edit keeps the real URL
    assert "s3cret" in (home / "jobs.json").read_text()
