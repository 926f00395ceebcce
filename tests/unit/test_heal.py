"""The heal pass, with a fake clock and fake liveness: every row of SPEC §6 and its boundaries."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.store import claims as claims_mod
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Lease, Outcome, Owner
from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.heal import DEADLINE_SLACK, Liveness, heal_pass
from cronctl.jobs.state import entry_from, new_state
from cronctl.proc.liveness import lease_checker
from cronctl.models import JobSpec, RunStatus
from cronctl.paths import open_home
from cronctl.store.jsonstore import Store
from cronctl.timefmt import to_iso

T0 = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
BOOT = "boot-1"


class FakeWorld:
    """Which owners are alive, which leases expired, what the monotonic clock says, what was killed."""

    def __init__(self) -> None:
        self.dead_pids: set[int] = set()
        self.mono = 1000.0
        self.killed: list[tuple[str, Any, float]] = []

    def liveness(self) -> Liveness:
        return Liveness(
            owner_alive=lambda owner: owner.get("pid") not in self.dead_pids,
            lease_expired=lambda claim: claim.get("boot_id") != BOOT or claim["lease_until_mono"] < self.mono,
            monotonic=lambda: self.mono,
        )

    def kill(self, run_id: str, child: Any, grace: float) -> int:
        self.killed.append((run_id, child, grace))
        return 1 if child else 0


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    paths = open_home(tmp_path / "home")
    return Context(paths, Store(paths), AuditLog(paths.audit), FakeClock(T0))


@pytest.fixture
def world() -> FakeWorld:
    return FakeWorld()


def owner(pid: int, gen: str = "g1") -> Owner:
    return Owner(gen, pid, 1.0, BOOT)


def add_job(ctx: Context, spec: JobSpec, **state: Any) -> None:
    with ctx.store.transaction() as doc:
        base = new_state(T0, T0 + timedelta(minutes=1))
        base.update(state)
        doc["jobs"][spec.name] = entry_from(spec, base)


def claim_now(ctx: Context, name: str, who: Owner, lease_until: float, dispatched: bool = True,
              started_mono: float | None = None, timeout: float | None = None) -> str:
    now = ctx.clock.now()
    with ctx.store.transaction() as doc:
        doc["jobs"][name]["state"]["next_run_at"] = to_iso(now)
        batch = claims_mod.claim_due(doc, now, who, Lease(lease_until, now + timedelta(seconds=60)))
        (new,) = batch.claims
        claim = doc["jobs"][name]["state"]["claims"][new.run_id]
        if timeout is not None:
            claim["timeout"] = timeout
    if dispatched:
        with ctx.store.transaction() as doc:
            claims_mod.mark_dispatched(doc, who, [claims_mod.Dispatched(name, new.run_id, 4242, 5.0,
                                                                        started_mono or 1000.0)], now)
    return new.run_id


def events(ctx: Context, name: str) -> list[dict[str, Any]]:
    return [row for row in ctx.audit.rows() if row["event"] == name]


def state_of(ctx: Context, name: str) -> dict[str, Any]:
    return ctx.store.read()["jobs"][name]["state"]


EVERY_MINUTE = JobSpec(name="tick", command="true", every=60.0)


def test_claim_of_a_dead_owner_is_reclaimed_as_lost_after_its_processes_are_killed(ctx: Context,
                                                                                      world: FakeWorld) -> None:
    add_job(ctx, EVERY_MINUTE)
    run_id = claim_now(ctx, "tick", owner(111), lease_until=5000.0)
    world.dead_pids.add(111)
    report = heal_pass(ctx, T0, world.liveness(), world.kill)
    assert report.reclaimed == [("tick", run_id, "owner_dead")]
    assert world.killed == [(run_id, {"pid": 4242, "start_time": 5.0}, 10.0)]
    state = state_of(ctx, "tick")
    assert state["claims"] == {} and state["last_status"] == "lost"
    assert state["last_reason"] == "executor_lost_mid_run"
    (row,) = events(ctx, "claim.reclaimed")
    assert row["reason"] == "owner_dead" and row["run_id"] == run_id
    assert ctx.store.read()["counters"]["owner_dead"] == 1


def test_undispatched_claim_of_a_dead_owner_is_not_started(ctx: Context, world: FakeWorld) -> None:
    add_job(ctx, EVERY_MINUTE)
    run_id = claim_now(ctx, "tick", owner(111), lease_until=5000.0, dispatched=False)
    world.dead_pids.add(111)
    heal_pass(ctx, T0, world.liveness(), world.kill)
    state = state_of(ctx, "tick")
    assert state["claims"] == {}
    assert state["last_status"] is None, "nothing ran, so the job's last real run is unchanged"
    assert state["last_not_started"]["reason"] == "run_claimed_without_dispatch"
    (finished,) = events(ctx, "run.finished")
    assert finished["status"] == "not_started" and finished["run_id"] == run_id


def test_lease_is_not_expired_at_its_exact_end_and_expired_just_after(ctx: Context, world: FakeWorld) -> None:
    add_job(ctx, EVERY_MINUTE)
    run_id = claim_now(ctx, "tick", owner(222), lease_until=1060.0)
    world.mono = 1060.0
    assert not heal_pass(ctx, T0, world.liveness(), world.kill).anything
    world.mono = 1060.001
    report = heal_pass(ctx, T0, world.liveness(), world.kill)
    assert report.reclaimed == [("tick", run_id, "lease_expired")]
    assert world.killed and world.killed[0][0] == run_id


def test_real_lease_checker_uses_the_monotonic_clock_and_the_boot() -> None:
    from cronctl.proc.identity import boot_id

    expired = lease_checker(monotonic=lambda: 100.0)
    assert not expired({"boot_id": boot_id(), "lease_until_mono": 100.0})
    assert expired({"boot_id": boot_id(), "lease_until_mono": 99.999})
    assert expired({"boot_id": "another-boot", "lease_until_mono": 1e12})


def test_old_owner_write_after_reclaim_is_fenced(ctx: Context, world: FakeWorld) -> None:
    add_job(ctx, EVERY_MINUTE)
    old = owner(333)
    run_id = claim_now(ctx, "tick", old, lease_until=1001.0)
    world.mono = 2000.0
    heal_pass(ctx, T0, world.liveness(), world.kill)
    with ctx.store.transaction() as doc:
        late = claims_mod.finish(doc, "tick", run_id, old, Outcome(RunStatus.SUCCESS, None, exit_code=0), T0)
    assert late.fenced and late.events[0].name.value == "run.fenced"
    assert state_of(ctx, "tick")["last_status"] == "lost"


def test_heal_pass_is_idempotent(ctx: Context, world: FakeWorld) -> None:
    add_job(ctx, EVERY_MINUTE)
    claim_now(ctx, "tick", owner(111), lease_until=5000.0)
    world.dead_pids.add(111)
    heal_pass(ctx, T0, world.liveness(), world.kill)
    rev = ctx.store.read()["rev"]
    assert not heal_pass(ctx, T0, world.liveness(), world.kill).anything
    assert ctx.store.read()["rev"] == rev
    assert len(events(ctx, "claim.reclaimed")) == 1


def test_live_owner_with_a_fresh_lease_is_left_alone(ctx: Context, world: FakeWorld) -> None:
    add_job(ctx, EVERY_MINUTE)
    claim_now(ctx, "tick", owner(444), lease_until=5000.0)
    assert not heal_pass(ctx, T0, world.liveness(), world.kill).anything
    assert world.killed == []
    assert state_of(ctx, "tick")["claims"]


def test_deadline_janitor_ends_a_run_past_timeout_grace_retries_and_slack(ctx: Context, world: FakeWorld) -> None:
    spec = JobSpec(name="slow", command="sleep 999", every=600.0, timeout=30.0, kill_grace=5.0, retries=2,
                   retry_delay=10.0)
    add_job(ctx, spec)
    me = owner(555)
    run_id = claim_now(ctx, "slow", me, lease_until=1e9, started_mono=1000.0)
    limit = 30.0 + 5.0 + 2 * 10.0 + DEADLINE_SLACK
    world.mono = 1000.0 + limit
    assert not heal_pass(ctx, T0, world.liveness(), world.kill, supervised={run_id}).anything
    world.mono = 1000.0 + limit + 0.01
    report = heal_pass(ctx, T0, world.liveness(), world.kill, supervised={run_id})
    assert report.deadline_terminated == [("slow", run_id)]
    state = state_of(ctx, "slow")
    assert state["last_status"] == "timeout" and state["last_reason"] == "deadline_janitor"
    (row,) = events(ctx, "recovery.deadline_terminated")
    assert row["run_id"] == run_id
    assert ctx.store.read()["counters"]["deadline_terminated"] == 1


def test_deadline_janitor_never_overwrites_a_run_that_just_ended(ctx: Context, world: FakeWorld) -> None:
    spec = JobSpec(name="slow", command="true", every=600.0, timeout=1.0, kill_grace=1.0)
    add_job(ctx, spec)
    me = owner(555)
    run_id = claim_now(ctx, "slow", me, lease_until=1e9, started_mono=1000.0)

    def kill_then_runner_records(run: str, child: Any, grace: float) -> int:
        # The runner's own result lands between the janitor's look and its write.
        with ctx.store.transaction() as doc:
            claims_mod.finish(doc, "slow", run, me, Outcome(RunStatus.SUCCESS, None, exit_code=0), T0)
        return 0

    world.mono = 1e6
    report = heal_pass(ctx, T0, world.liveness(), kill_then_runner_records, supervised={run_id})
    assert report.deadline_terminated == []
    assert state_of(ctx, "slow")["last_status"] == "success"
    assert run_id not in state_of(ctx, "slow")["claims"]


def test_job_without_timeout_has_no_deadline(ctx: Context, world: FakeWorld) -> None:
    add_job(ctx, JobSpec(name="forever", command="sleep 1", every=600.0, timeout=0.0))
    me = owner(555)
    run_id = claim_now(ctx, "forever", me, lease_until=1e12, started_mono=0.0)
    world.mono = 1e9
    assert not heal_pass(ctx, T0, world.liveness(), world.kill, supervised={run_id}).anything


def test_claim_leaked_by_this_very_process_is_reclaimed_once_its_lease_expires(ctx: Context,
                                                                                world: FakeWorld) -> None:
    """The 1h47m incident: a live owner that no longer supervises its claim must not block the job."""
    add_job(ctx, EVERY_MINUTE)
    me = owner(555)
    leaked = claim_now(ctx, "tick", me, lease_until=1060.0)
    world.mono = 1059.0
    assert not heal_pass(ctx, T0, world.liveness(), world.kill, supervised=set()).anything
    world.mono = 1061.0
    report = heal_pass(ctx, T0, world.liveness(), world.kill, supervised=set())
    assert report.reclaimed == [("tick", leaked, "lease_expired")]


def test_broken_runs_are_killed_concurrently(ctx: Context, world: FakeWorld) -> None:
    import threading
    import time

    for index in range(4):
        add_job(ctx, JobSpec(name=f"j{index}", command="true", every=60.0))
        claim_now(ctx, f"j{index}", owner(900 + index), lease_until=5000.0)
        world.dead_pids.add(900 + index)
    active, peak = [0], [0]
    lock = threading.Lock()

    def slow_kill(run_id: str, child: Any, grace: float) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.3)  # a child that waits out its kill_grace
        with lock:
            active[0] -= 1
        return 1

    report = heal_pass(ctx, T0, world.liveness(), slow_kill)
    assert len(report.reclaimed) == 4
    assert peak[0] > 1


TEN_MIN = JobSpec(name="wedgy", command="true", every=600.0)  # cadence 10m, default grace 5m


def wedge(ctx: Context, spec: JobSpec, last_run_ago: timedelta, next_in: timedelta, status: str = "error") -> None:
    add_job(ctx, spec, last_status=status, last_run_at=to_iso(T0 - last_run_ago), next_run_at=to_iso(T0 + next_in))


def test_persisted_error_wedge_is_rearmed_to_now_exactly_once(ctx: Context, world: FakeWorld) -> None:
    wedge(ctx, TEN_MIN, timedelta(hours=1), timedelta(days=1))
    report = heal_pass(ctx, T0, world.liveness(), world.kill)
    assert report.rearmed == ["wedgy"]
    assert state_of(ctx, "wedgy")["next_run_at"] == to_iso(T0)
    (row,) = events(ctx, "recovery.persisted_error_rearmed")
    assert row["previous_next_run_at"] == to_iso(T0 + timedelta(days=1))
    assert not heal_pass(ctx, T0 + timedelta(seconds=1), world.liveness(), world.kill).anything
    assert ctx.store.read()["counters"]["persisted_error_rearmed"] == 1


@pytest.mark.parametrize("status", ["error", "timeout", "lost"])
def test_every_failed_status_can_wedge(ctx: Context, world: FakeWorld, status: str) -> None:
    wedge(ctx, TEN_MIN, timedelta(hours=1), timedelta(days=1), status=status)
    assert heal_pass(ctx, T0, world.liveness(), world.kill).rearmed == ["wedgy"]


def test_exactly_at_cadence_plus_grace_is_not_yet_a_wedge(ctx: Context, world: FakeWorld) -> None:
    wedge(ctx, TEN_MIN, timedelta(minutes=15), timedelta(days=1))  # 10m cadence + 5m grace
    assert not heal_pass(ctx, T0, world.liveness(), world.kill).anything
    assert heal_pass(ctx, T0 + timedelta(milliseconds=1), world.liveness(), world.kill).rearmed == ["wedgy"]


def test_job_that_failed_within_its_cadence_is_never_rearmed(ctx: Context, world: FakeWorld) -> None:
    wedge(ctx, TEN_MIN, timedelta(minutes=1), timedelta(days=1))
    assert not heal_pass(ctx, T0, world.liveness(), world.kill).anything


def test_success_or_a_pending_retry_is_not_a_wedge(ctx: Context, world: FakeWorld) -> None:
    wedge(ctx, TEN_MIN, timedelta(hours=1), timedelta(days=1), status="success")
    assert not heal_pass(ctx, T0, world.liveness(), world.kill).anything


def test_cron_wedge_is_rearmed_to_the_next_legal_slot(ctx: Context, world: FakeWorld) -> None:
    spec = JobSpec(name="hourly", command="true", cron="0 * * * *")
    wedge(ctx, spec, timedelta(hours=5), timedelta(days=3))
    assert heal_pass(ctx, T0 + timedelta(minutes=10), world.liveness(), world.kill).rearmed == ["hourly"]
    assert state_of(ctx, "hourly")["next_run_at"] == to_iso(T0 + timedelta(hours=1))


def test_cron_wedge_whose_next_slot_is_already_the_earliest_is_left_as_is(ctx: Context, world: FakeWorld) -> None:
    spec = JobSpec(name="daily", command="true", cron="0 3 * * *")
    next_slot = datetime(2026, 6, 2, 3, 0, tzinfo=timezone.utc)
    add_job(ctx, spec, last_status="error", last_run_at=to_iso(T0 - timedelta(days=3)), next_run_at=to_iso(next_slot))
    report = heal_pass(ctx, T0, world.liveness(), world.kill)
    assert report.rearmed == []
    assert state_of(ctx, "daily")["next_run_at"] == to_iso(next_slot)
    assert not heal_pass(ctx, T0, world.liveness(), world.kill).anything
