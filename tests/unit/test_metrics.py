"""Prometheus metrics: parseable, and moving when runs finish and when heals happen."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.jobs.state import entry_from, new_state
from cronctl.loop.heal import Liveness, heal_pass
from cronctl.models import JobSpec, RunStatus
from cronctl.ops.metrics import metrics_for, write_textfile
from cronctl.paths import open_home
from cronctl.store import claims as claims_mod
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Dispatched, Lease, Outcome, Owner
from cronctl.store.jsonstore import Store
from cronctl.timefmt import to_iso

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    paths = open_home(tmp_path / "home")
    context = Context(paths, Store(paths), AuditLog(paths.audit), FakeClock(T0))
    with context.store.transaction() as doc:
        doc["jobs"]["job"] = entry_from(JobSpec(name="job", command="true", every=60.0), new_state(T0, T0))
    return context


def samples(ctx: Context) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics_for(ctx).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def run_once(ctx: Context, status: RunStatus, late_by: float = 0.02) -> str:
    owner = Owner("g", 1, 1.0, "boot")
    now = ctx.clock.now()
    with ctx.store.transaction() as doc:
        doc["jobs"]["job"]["state"]["next_run_at"] = to_iso(now - timedelta(seconds=late_by))
        (new,) = claims_mod.claim_due(doc, now, owner, Lease(1e9, now)).claims
        claims_mod.mark_dispatched(doc, owner, [Dispatched("job", new.run_id, 2, 2.0, 0.0)], now)
        claims_mod.finish(doc, "job", new.run_id, owner, Outcome(status, None, exit_code=0), now)
    return new.run_id


def test_output_parses_and_has_every_family(ctx: Context) -> None:
    names = {family.name for family in text_string_to_metric_families(metrics_for(ctx).decode())}
    assert names >= {"cronctl_runs", "cronctl_job_last_run_timestamp_seconds",
                     "cronctl_job_last_success_timestamp_seconds", "cronctl_job_running", "cronctl_jobs",
                     "cronctl_fire_lateness_seconds", "cronctl_recoveries", "cronctl_loop_state",
                     "cronctl_loop_heartbeat_timestamp_seconds"}


def test_run_counters_and_lateness_move_when_a_run_finishes(ctx: Context) -> None:
    before = samples(ctx)
    assert ("cronctl_runs_total", (("job", "job"), ("status", "success"))) not in before
    run_once(ctx, RunStatus.SUCCESS, late_by=0.02)
    run_once(ctx, RunStatus.ERROR, late_by=0.2)
    after = samples(ctx)
    assert after[("cronctl_runs_total", (("job", "job"), ("status", "success")))] == 1.0
    assert after[("cronctl_runs_total", (("job", "job"), ("status", "error")))] == 1.0
    assert after[("cronctl_fire_lateness_seconds_count", ())] == 2.0
    assert after[("cronctl_fire_lateness_seconds_bucket", (("le", "0.025"),))] == 1.0
    assert after[("cronctl_fire_lateness_seconds_bucket", (("le", "0.25"),))] == 2.0
    assert after[("cronctl_job_last_success_timestamp_seconds", (("job", "job"),))] == T0.timestamp()
    assert after[("cronctl_jobs", (("state", "failing"),))] == 1.0


def test_recovery_counter_moves_when_a_heal_happens(ctx: Context) -> None:
    owner = Owner("g", 777, 1.0, "boot")
    with ctx.store.transaction() as doc:
        doc["jobs"]["job"]["state"]["next_run_at"] = to_iso(T0)
        claims_mod.claim_due(doc, T0, owner, Lease(1e9, T0))
    assert samples(ctx)[("cronctl_recoveries_total", (("kind", "owner_dead"),))] == 0.0
    dead: Any = Liveness(owner_alive=lambda o: False, lease_expired=lambda c: False, monotonic=lambda: 0.0)
    heal_pass(ctx, T0, dead, lambda *_: 0)
    assert samples(ctx)[("cronctl_recoveries_total", (("kind", "owner_dead"),))] == 1.0


def test_textfile_is_replaced_atomically(ctx: Context, tmp_path: Path) -> None:
    target = tmp_path / "cronctl.prom"
    write_textfile(target, metrics_for(ctx))
    write_textfile(target, metrics_for(ctx))
    assert target.read_text().startswith("# HELP")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@pytest.mark.slow
def test_the_loop_keeps_a_metrics_textfile(tmp_path: Path) -> None:
    import subprocess
    import time

    from tests.conftest import cronctl_bin, subprocess_env

    home, target = tmp_path / "loophome", tmp_path / "cronctl.prom"
    env = subprocess_env(home)
    subprocess.run([*cronctl_bin(), "add", "tick", "--every", "500ms", "--", "true"], env=env, check=True,
                   capture_output=True, timeout=60)
    loop = subprocess.Popen([*cronctl_bin(), "run", "--metrics-file", str(target)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        value = 0.0
        while time.monotonic() < deadline and value < 2:
            if target.exists():
                for family in text_string_to_metric_families(target.read_text()):
                    for sample in family.samples:
                        if sample.name == "cronctl_runs_total" and sample.labels.get("status") == "success":
                            value = sample.value
            time.sleep(0.2)
        assert value >= 2, "the textfile follows the runs"
    finally:
        loop.terminate()
        loop.wait(timeout=30)


def test_the_metrics_file_is_rewritten_on_a_change_or_every_refresh_on_the_clock(tmp_path: Path) -> None:
    from cronctl.clock import FakeClock
    from cronctl.context import Context
    from cronctl.ops.metrics import MetricsFile

    clock = FakeClock()
    ctx = Context.open(tmp_path / "home", clock=clock)
    target = tmp_path / "cronctl.prom"
    textfile = MetricsFile(target)
    textfile.maybe_write(ctx)
    assert target.exists()
    target.unlink()
    clock.advance(MetricsFile.REFRESH - 1)
    textfile.maybe_write(ctx)  # nothing changed, not yet due
    assert not target.exists()
    clock.advance(1)
    textfile.maybe_write(ctx)  # due for the heartbeat gauge
    assert target.exists()


def test_per_job_series_for_alerts_and_notification_counters(ctx: Context) -> None:
    from cronctl.store.notify_owed import Result, RetryPolicy, settle

    with ctx.store.transaction() as doc:
        doc["jobs"]["job"]["notify"] = [{"url": "http://127.0.0.1:9/x", "on": ["failure"]}]
    run_once(ctx, RunStatus.ERROR)
    with ctx.store.transaction() as doc:
        (key,) = doc["jobs"]["job"]["state"]["notify_owed"]
    got = samples(ctx)
    assert got[("cronctl_job_consecutive_failures", (("job", "job"),))] == 1.0
    assert got[("cronctl_job_last_exit_code", (("job", "job"),))] == 0.0
    assert ("cronctl_job_last_duration_seconds", (("job", "job"),)) in got
    assert got[("cronctl_job_next_fire_timestamp_seconds", (("job", "job"),))] > T0.timestamp()
    assert got[("cronctl_job_state", (("job", "job"), ("state", "failing")))] == 1.0
    assert got[("cronctl_job_state", (("job", "job"), ("state", "ok")))] == 0.0
    assert got[("cronctl_notifications_owed", (("job", "job"),))] == 1.0
    with ctx.store.transaction() as doc:
        settle(doc, [Result("job", key, "retry", "refused")], ctx.clock.now(), RetryPolicy())
    with ctx.store.transaction() as doc:
        settle(doc, [Result("job", key, "sent", code=200)], ctx.clock.now(), RetryPolicy())
    got = samples(ctx)
    assert got[("cronctl_notifications_total", (("outcome", "failed"),))] == 1.0
    assert got[("cronctl_notifications_total", (("outcome", "sent"),))] == 1.0
    assert got[("cronctl_notifications_owed", (("job", "job"),))] == 0.0
