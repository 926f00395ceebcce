"""A failed chain is visible (SPEC §10, §12; issue 22 item 5), whatever ended the node that
failed it: an error, a timeout, a kill, a run lost and reclaimed, a run claimed and never
started, a spawn that failed. Each way: the node reads `failing` (its own alert_after
applies: `status --stale` exits 3 at alert_after 1, 0 below it), `show` and `history
--chain` say the chain failed, `metrics` counts it, the root's targets are owed
`chain_failed` and the node's own are owed `failure`. The store is driven with an
injected clock near now; the views are the real CLI's."""

from __future__ import annotations

import errno
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.loop.engine import spawn_refused
from cronctl.models import RunStatus
from cronctl.ops import definitions
from cronctl.ops.status import status
from cronctl.paths import open_home
from cronctl.store.audit import AuditLog
from cronctl.store.claims import Dispatched, Lease, NewClaim, Outcome, Owner
from cronctl.store.jsonstore import Store
from cronctl.store.leases import RunEnd

# An hour and a bit ago: the root's next slot is an hour ahead of the real clock `status` reads.
T0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1, seconds=10)
CLAIMED = T0 + timedelta(hours=1)
OWNER = Owner("gen-a", 1001, 111.0, "boot-1")
HOOK = [{"url": "http://127.0.0.1:9/x", "on": ["failure", "chain_failed"]}]

Ender = Callable[[Context, NewClaim], None]


def lease() -> Lease:
    return Lease(10_000.0, CLAIMED + timedelta(minutes=5))


def started(ctx: Context, new: NewClaim) -> None:
    ctx.leases.mark_dispatched(OWNER, [Dispatched(new.job, new.run_id, 40_000, 1.0, 5_000.0)], CLAIMED)


def ends_with(outcome: Outcome) -> Ender:
    def end(ctx: Context, new: NewClaim) -> None:
        started(ctx, new)
        ctx.leases.finish_many(OWNER, [RunEnd(new.run_id, outcome, new.job)], CLAIMED + timedelta(seconds=2))
    return end


def lost(ctx: Context, new: NewClaim) -> None:
    """Its loop died mid-run; the healer reclaims it."""
    started(ctx, new)
    assert ctx.leases.reclaim(new.job, new.run_id, OWNER, "owner_dead", CLAIMED + timedelta(seconds=2), 0)


def never_started(ctx: Context, new: NewClaim) -> None:
    """Claimed, and its loop died before the child began: reclaimed not_started."""
    assert ctx.leases.reclaim(new.job, new.run_id, OWNER, "owner_dead", CLAIMED + timedelta(seconds=2), 0)


def spawn_failed(ctx: Context, new: NewClaim) -> None:
    """The loop could not spawn its child (what Engine._spawn_one hands the store)."""
    refused = spawn_refused(new, errno.EAGAIN, "fork: Resource temporarily unavailable")
    ctx.leases.release_refused(OWNER, [refused], CLAIMED + timedelta(seconds=2))


WAYS: dict[str, tuple[Ender, str]] = {
    "error": (ends_with(Outcome(RunStatus.ERROR, "exit_code", exit_code=3, duration=1.0)), "error"),
    "timeout": (ends_with(Outcome(RunStatus.TIMEOUT, "timeout", duration=1.0)), "timeout"),
    "killed": (ends_with(Outcome(RunStatus.KILLED, "operator", signal=15, duration=1.0)), "killed"),
    "lost": (lost, "lost"),
    "not_started": (never_started, "not_started"),
    "spawn_failed": (spawn_failed, "not_started"),
}


def open_ctx(home: Path) -> Context:
    paths = open_home(home)
    clock = FakeClock(T0)
    return Context(paths, Store(paths), AuditLog(paths.audit, clock=clock), clock)


def failed_chain(home: Path, end_b: Ender, alert_after: int = 1) -> tuple[Context, str]:
    """a -> b -> d, every job with a webhook; a succeeds, b ends by `end_b`: the chain's id."""
    ctx = open_ctx(home)
    add: Callable[..., Any] = lambda name, **opts: definitions.add_job(  # noqa: E731
        ctx, definitions.spec_from_options(name, {"command": "true", "notify": HOOK, **opts}))
    add("a", every="1h")
    add("b", after=["a"], alert_after=alert_after)
    add("d", after=["b"])
    [root] = ctx.leases.claim_due(CLAIMED, OWNER, lease()).claims
    ends_with(Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=1.0))(ctx, root)
    [b] = ctx.leases.claim_due(CLAIMED + timedelta(seconds=1), OWNER, lease()).claims
    assert (b.job, b.chain) == ("b", root.run_id)
    end_b(ctx, b)
    return ctx, root.run_id


@pytest.mark.parametrize("way", sorted(WAYS))
def test_a_chain_failed_by_b_shows_b_failing_everywhere(home: Path, cli: Any, way: str) -> None:
    end_b, status_word = WAYS[way]
    ctx, chain = failed_chain(home, end_b)
    report = cli("history", "--chain", chain, "--json").json()
    assert report["outcome"] == "failed", report
    assert [(n["job"], n["status"]) for n in report["nodes"]] == [("a", "success"), ("b", status_word),
                                                                   ("d", "skipped")]
    states = {j.view.spec.name: j.health for j in status(ctx).jobs}
    assert states["b"].state == "failing" and states["b"].stale, states["b"]
    assert f"chain {chain} failed" in states["b"].reason
    assert states["d"].state == "ok" and "upstream b ended" in states["d"].reason
    stale = cli("status", "--stale", "--json")
    assert stale.code == 3 and [j["name"] for j in stale.json()["jobs"]] == ["b"], stale.out
    listed = cli("status", "--json").json()["jobs"]
    assert {j["name"]: j["last_status"] for j in listed}["b"] == status_word
    shown = cli("show", "a").out
    assert f"last chain {chain}: failed" in shown and f"b  [{status_word}]" in shown, shown
    assert "d  [skipped: upstream b" in shown
    metrics = cli("metrics").out
    assert 'cronctl_job_state{job="b",state="failing"} 1.0' in metrics
    assert 'cronctl_chains_total{outcome="failed"} 1.0' in metrics
    assert 'cronctl_runs_total{job="d",status="skipped"} 1.0' in metrics
    owed = {name: sorted(item["event"] for item in (entry["state"].get("notify_owed") or {}).values())
            for name, entry in ctx.store.read()["jobs"].items()}
    assert "chain_failed" in owed["a"] and owed["b"] == ["failure"] and owed["d"] == [], owed


@pytest.mark.parametrize("way", ["killed", "spawn_failed"])
def test_its_own_alert_after_applies(home: Path, cli: Any, way: str) -> None:
    ctx, _ = failed_chain(home, WAYS[way][0], alert_after=2)
    (b,) = [j for j in status(ctx).jobs if j.view.spec.name == "b"]
    assert b.health.state == "failing" and not b.health.stale
    assert cli("status", "--stale").code == 0
    assert cli("status", "--json").json()["jobs"][1]["consecutive_failures"] == 1


def test_a_success_of_the_node_clears_it(home: Path) -> None:
    ctx, _ = failed_chain(home, WAYS["killed"][0])
    [forced] = ctx.leases.claim_force("b", CLAIMED + timedelta(seconds=5), OWNER, lease()).claims
    ends_with(Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=1.0))(ctx, forced)
    (b,) = [j for j in status(ctx).jobs if j.view.spec.name == "b"]
    assert b.health.state == "ok" and b.view.state["consecutive_failures"] == 0


def test_a_spawn_failure_ends_the_node_once_instead_of_claiming_it_every_tick(home: Path) -> None:
    ctx, chain = failed_chain(home, spawn_failed)
    assert ctx.leases.claim_due(CLAIMED + timedelta(seconds=3), OWNER, lease()).claims == []
    doc = ctx.store.read()
    assert doc["chains"][chain]["ended_at"] is not None
    assert doc["jobs"]["b"]["state"]["last_reason"] == "spawn_failed"


def test_a_chain_ended_by_a_claim_writes_skip_owes_chain_failed(home: Path) -> None:
    """d paused: the claim write that skips it ends the chain; the failure is no audit row alone."""
    ctx = open_ctx(home)
    for name, opts in (("a", {"every": "1h", "notify": HOOK}), ("d", {"after": ["a"]})):
        definitions.add_job(ctx, definitions.spec_from_options(name, {"command": "true", **opts}))
    definitions.pause_job(ctx, "d")
    [root] = ctx.leases.claim_due(CLAIMED, OWNER, lease()).claims
    ends_with(Outcome(RunStatus.SUCCESS, None, exit_code=0, duration=1.0))(ctx, root)
    ctx.leases.claim_due(CLAIMED + timedelta(seconds=3), OWNER, lease())
    state = ctx.store.read()["jobs"]["a"]["state"]
    assert [item["event"] for item in state["notify_owed"].values()] == ["chain_failed"]

