"""Job chains in the store document (SPEC §10): triggers recorded in the finish write,
ready nodes claimed in the claim write, skips, retries, heals. Pure: no process, no clock."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone
from typing import Any

from cronctl.jobs.state import entry_from, new_state
from cronctl.models import AuditEvent, JobSpec, Requires, RunStatus
from cronctl.schedule.slots import first_slot
from cronctl.store import chain_doc
from cronctl.store.chains import claim_ready
from cronctl.store.claims import ClaimBatch, Lease, NewClaim, Outcome, Owner, claim_due, finish
from cronctl.timefmt import to_iso

T0 = datetime(2026, 3, 1, 2, 0, tzinfo=timezone.utc)
REVISIONS = itertools.count(1)
OWNER = Owner("gen-1", 4242, 1.0, "boot")
LEASE = Lease(1e9, T0 + timedelta(days=1))
OK = Outcome(RunStatus.SUCCESS, None, exit_code=0)
FAIL = Outcome(RunStatus.ERROR, "exit_code", exit_code=3)


def job(name: str, *after: str, **fields: Any) -> JobSpec:
    if after:
        return JobSpec(name=name, command="true", after=tuple(after), **fields)
    return JobSpec(name=name, command="true", cron="0 2 * * *", **fields)


def document(*specs: JobSpec) -> dict[str, Any]:
    jobs = {s.name: entry_from(s, new_state(T0 - timedelta(hours=1), first_slot(s, T0 - timedelta(hours=1))))
            for s in specs}
    # A revision of its own, as every store write has (chain_doc caches per revision).
    return {"version": 1, "rev": next(REVISIONS), "jobs": jobs, "counters": {}}


def diamond(**d_fields: Any) -> dict[str, Any]:
    return document(job("a"), job("b", "a"), job("c", "a"), job("d", "b", "c", **d_fields))


def tick(doc: dict[str, Any], now: datetime = T0) -> ClaimBatch:
    """What the loop's claim write does: scheduled claims, then the chain's ready nodes."""
    batch = claim_due(doc, now, OWNER, LEASE)
    claim_ready(doc, now, OWNER, LEASE, batch)
    return batch


def end(doc: dict[str, Any], new: NewClaim, outcome: Outcome = OK, now: datetime = T0) -> list[AuditEvent]:
    done = finish(doc, new.job, new.run_id, OWNER, outcome, now)
    assert not done.fenced
    return [event.name for event in done.events]


def by_job(batch: ClaimBatch) -> dict[str, NewClaim]:
    return {new.job: new for new in batch.claims}


def nodes(doc: dict[str, Any]) -> dict[str, str]:
    (chain,) = doc["chains"].values()
    return {name: node["status"] for name, node in chain["nodes"].items()}


def test_a_diamond_fires_each_job_once_and_d_after_both() -> None:
    doc = diamond()
    root = by_job(tick(doc))["a"]
    assert end(doc, root)[-1] == AuditEvent.CHAIN_TRIGGERED
    chain_id = root.run_id
    assert nodes(doc) == {"a": "success", "b": "ready", "c": "ready", "d": "waiting"}
    second = by_job(tick(doc))
    assert sorted(second) == ["b", "c"]
    assert second["b"].spec.env == {"CRONCTL_CHAIN_ID": chain_id, "CRONCTL_UPSTREAM": root.run_id}
    assert doc["jobs"]["b"]["state"]["claims"][second["b"].run_id]["chain"] == chain_id
    assert tick(doc).claims == [], "a running node is not claimed again"
    end(doc, second["b"])
    assert tick(doc).claims == [], "d waits for c"
    end(doc, second["c"])
    last = by_job(tick(doc))["d"]
    assert last.spec.env["CRONCTL_UPSTREAM"] == f"{second['b'].run_id},{second['c'].run_id}"
    assert AuditEvent.CHAIN_FINISHED in end(doc, last)
    chain = doc["chains"][chain_id]
    assert chain["outcome"] == "success" and chain["ended_at"] is not None
    assert tick(doc).claims == []


def test_the_history_record_names_its_chain() -> None:
    doc = diamond()
    root = by_job(tick(doc))["a"]
    done = finish(doc, "a", root.run_id, OWNER, OK, T0)
    assert done.record is not None and done.record["chain"] == root.run_id


def test_a_failing_upstream_skips_its_dependants_with_upstream_failed() -> None:
    doc = diamond()
    end(doc, by_job(tick(doc))["a"])
    running = by_job(tick(doc))
    end(doc, running["b"], FAIL)
    done = finish(doc, "c", running["c"].run_id, OWNER, OK, T0)
    skipped = [e.details for e in done.events if e.name == AuditEvent.RUN_SKIPPED]
    chain_id = running["c"].spec.env["CRONCTL_CHAIN_ID"]
    assert len(skipped) == 1
    run_id = skipped[0].pop("run_id")
    assert skipped == [{"job": "d", "chain": chain_id, "reason": "upstream_failed", "upstream": "b",
                        "upstream_status": "error", "slot": to_iso(T0), "ended_at": to_iso(T0)}]
    assert nodes(doc)["d"] == "skipped"
    # The skip is a run of d: its LAST, counted, not a failure (the upstream failed, not d).
    state = doc["jobs"]["d"]["state"]
    assert (state["last_status"], state["last_reason"], state["last_run_id"]) == ("skipped", "upstream_failed", run_id)
    assert state["runs_by_status"] == {"skipped": 1} and not state.get("consecutive_failures")
    assert doc["chains"][chain_id]["nodes"]["d"]["run_id"] == run_id
    assert next(iter(doc["chains"].values()))["outcome"] == "failed"


def test_requires_done_runs_after_a_failed_upstream() -> None:
    doc = diamond(requires=Requires.DONE)
    end(doc, by_job(tick(doc))["a"])
    running = by_job(tick(doc))
    end(doc, running["b"], FAIL)
    end(doc, running["c"])
    assert "d" in by_job(tick(doc))


def test_a_skip_cascades_to_the_dependants_of_the_skipped_job() -> None:
    doc = document(job("a"), job("b", "a"), job("c", "b", requires=Requires.DONE))
    end(doc, by_job(tick(doc))["a"], FAIL)
    assert nodes(doc) == {"a": "error", "b": "skipped", "c": "skipped"}


def test_retries_of_b_delay_d_and_do_not_rerun_a() -> None:
    doc = document(job("a"), job("b", "a", retries=1, retry_delay=30.0), job("d", "b"))
    end(doc, by_job(tick(doc))["a"])
    first = by_job(tick(doc))["b"]
    assert AuditEvent.RUN_RETRY_SCHEDULED in end(doc, first, FAIL)
    assert nodes(doc) == {"a": "success", "b": "retrying", "d": "waiting"}
    assert doc["jobs"]["b"]["state"].get("retry") is None, "the retry belongs to the chain"
    assert tick(doc, T0 + timedelta(seconds=10)).claims == []
    retry = by_job(tick(doc, T0 + timedelta(seconds=31)))
    assert list(retry) == ["b"] and retry["b"].attempt == 2
    assert retry["b"].spec.env["CRONCTL_CHAIN_ID"] == first.spec.env["CRONCTL_CHAIN_ID"]
    end(doc, retry["b"], now=T0 + timedelta(seconds=32))
    assert list(by_job(tick(doc, T0 + timedelta(seconds=33)))) == ["d"], "d after b's retry; a not again"


def test_a_trigger_written_before_a_crash_is_claimed_once_after_restart() -> None:
    doc = diamond()
    end(doc, by_job(tick(doc))["a"])  # the loop dies here: b and c are recorded ready
    other = Owner("gen-2", 5353, 2.0, "boot")
    batch = claim_due(doc, T0, other, LEASE)
    claim_ready(doc, T0, other, LEASE, batch)
    assert sorted(by_job(batch)) == ["b", "c"]
    assert tick(doc).claims == []


def test_a_released_claim_makes_its_node_ready_again() -> None:
    from cronctl.store.claims import release

    doc = diamond()
    end(doc, by_job(tick(doc))["a"])
    running = by_job(tick(doc))
    release(doc, "b", running["b"].run_id)  # its child could not be spawned
    assert list(by_job(tick(doc))) == ["b"]


def test_an_upstream_reclaimed_as_lost_resolves_its_dependants() -> None:
    doc = document(job("a"), job("b", "a"), job("c", "a", requires=Requires.DONE))
    root = by_job(tick(doc))["a"]
    lost = Outcome(RunStatus.LOST, "executor_lost_mid_run")
    assert not finish(doc, "a", root.run_id, None, lost, T0).fenced  # the healer: no owner
    assert nodes(doc) == {"a": "lost", "b": "skipped", "c": "ready"}


def test_overlap_skip_skips_the_node_in_the_later_chain_and_never_runs_a_job_twice_per_chain() -> None:
    doc = document(job("a"), job("b", "a"), job("d", "b"))
    seen: set[tuple[str, str]] = set()
    clock = T0
    for _ in range(50):
        batch = tick(doc, clock)
        for new in batch.claims:
            key = (new.job, new.spec.env.get("CRONCTL_CHAIN_ID", new.run_id))
            assert key not in seen
            seen.add(key)
        for new in batch.claims:
            if new.job == "a":
                end(doc, new, now=clock)  # b of the previous chain is still running
        doc["jobs"]["a"]["state"]["next_run_at"] = to_iso(clock)
        clock += timedelta(seconds=1)
    skipped = [c["nodes"]["b"] for c in doc["chains"].values() if c["nodes"]["b"]["status"] == "skipped"]
    assert skipped and all(node["reason"] == "overlap" for node in skipped)


def test_a_forced_run_of_a_root_starts_no_chain() -> None:
    from cronctl.store.claims import claim_force

    doc = diamond()
    forced = claim_force(doc, "a", T0, OWNER, LEASE).claims[0]
    end(doc, forced)
    assert not doc.get("chains")


def test_the_loop_wakes_for_a_ready_node_and_a_due_retry() -> None:
    doc = diamond()
    assert chain_doc.earliest_chain_fire(doc) is None
    end(doc, by_job(tick(doc))["a"], now=T0 + timedelta(seconds=5))
    assert chain_doc.earliest_chain_fire(doc) == T0 + timedelta(seconds=5)


# --- health: waiting, wedged ------------------------------------------------------------------


def test_a_dependant_waits_while_its_chain_runs_and_is_wedged_past_its_upstreams_deadlines() -> None:
    from cronctl.jobs.chain_health import chain_health, upstream_deadline
    from cronctl.jobs.state import JobView

    doc = document(job("a", timeout=60.0), job("b", "a", timeout=30.0, retries=1, retry_delay=5.0), job("d", "b"))
    end(doc, by_job(tick(doc))["a"])
    tick(doc)  # b runs
    views = {name: JobView.from_entry(entry) for name, entry in doc["jobs"].items()}
    specs = {name: view.spec for name, view in views.items()}
    chains = doc["chains"]
    limit = upstream_deadline("d", {"a", "b", "d"}, specs)
    assert limit == (60 + 10) + (30 + 10) * 2 + 5 + 60
    assert chain_health(chains, views["b"], specs, T0) is None, "b runs: its own health says so"
    waiting = chain_health(chains, views["d"], specs, T0 + timedelta(seconds=limit))
    assert waiting is not None and waiting.state == "waiting" and "waiting on b in chain" in waiting.reason
    wedged = chain_health(chains, views["d"], specs, T0 + timedelta(seconds=limit + 1))
    assert wedged is not None and wedged.state == "wedged" and wedged.stale


def test_waiting_names_only_the_upstreams_of_its_own_chain() -> None:
    from cronctl.jobs.chain_health import chain_health
    from cronctl.jobs.state import JobView
    from cronctl.store.chains import start_forced

    doc = diamond()
    start_forced(doc, "b", "forced-at-b", T0)  # a chain started at b: c is not in it
    views = {name: JobView.from_entry(entry) for name, entry in doc["jobs"].items()}
    specs = {name: view.spec for name, view in views.items()}
    waiting = chain_health(doc["chains"], views["d"], specs, T0)
    assert waiting is not None and waiting.reason == "waiting on b in chain forced-at-b"


def test_a_forced_chain_is_claimed_under_its_own_id_and_a_scheduled_root_is_told_its_chain() -> None:
    from cronctl.store.chains import mark_roots, start_forced

    doc = diamond()
    root = claim_due(doc, T0, OWNER, LEASE)
    mark_roots(doc, root)
    (a,) = root.claims
    assert a.extra_env == {"CRONCTL_CHAIN_ID": a.run_id, "CRONCTL_UPSTREAM": ""}
    start_forced(doc, "c", "20260301T020000-forced00", T0)
    (c,) = tick(doc).claims
    assert c.run_id == "20260301T020000-forced00" and c.spec.env["CRONCTL_CHAIN_ID"] == c.run_id


def test_chains_are_counted_by_outcome_for_metrics() -> None:
    from cronctl.ops.chains import chain_counts

    doc = document(job("a"), job("b", "a"))
    end(doc, by_job(tick(doc))["a"], FAIL)
    assert chain_counts(doc) == ({"failed": 1}, 0)
    doc["jobs"]["a"]["state"]["next_run_at"] = to_iso(T0)
    end(doc, by_job(tick(doc))["a"])
    assert chain_counts(doc) == ({"failed": 1}, 1)
    end(doc, by_job(tick(doc))["b"])
    assert chain_counts(doc) == ({"failed": 1, "success": 1}, 0)


def test_a_forced_chain_runs_its_paused_root_as_a_plain_force_run_would() -> None:
    from cronctl.store.chains import start_forced

    doc = diamond()
    doc["jobs"]["a"]["state"]["paused"] = True
    doc["jobs"]["a"]["state"]["next_run_at"] = None  # nothing scheduled fires
    start_forced(doc, "a", "20260301T020000-forced01", T0)
    assert [new.job for new in tick(doc).claims] == ["a"]


def test_a_paused_dependant_is_skipped_and_its_chain_goes_on() -> None:
    doc = document(job("a"), job("b", "a"), job("c", "b", requires=Requires.DONE))
    doc["jobs"]["b"]["state"]["paused"] = True
    end(doc, by_job(tick(doc))["a"])
    batch = tick(doc)
    assert batch.claims == [] and nodes(doc) == {"a": "success", "b": "skipped", "c": "skipped"}
    assert [e.details["reason"] for e in batch.events if e.name == AuditEvent.RUN_SKIPPED] == ["paused",
                                                                                            "upstream_failed"]


def test_a_dependant_edited_onto_a_schedule_mid_chain_leaves_the_chain() -> None:
    doc = document(job("a"), job("b", "a"), job("c", "b"))
    end(doc, by_job(tick(doc))["a"])
    running = by_job(tick(doc))["b"]
    doc["jobs"]["c"].update({"cron": "0 3 * * *"})
    doc["jobs"]["c"].pop("after")
    doc["jobs"]["c"].pop("requires")
    doc["rev"] += 1  # the edit is a store write of its own
    end(doc, running)
    assert nodes(doc) == {"a": "success", "b": "success", "c": "skipped"}
    assert doc["chains"][running.spec.env["CRONCTL_CHAIN_ID"]]["nodes"]["c"]["reason"] == "definition_changed"


def test_a_failed_chain_owes_chain_failed_to_its_roots_targets() -> None:
    hook = ({"url": "http://127.0.0.1:9/x", "on": ["chain_failed"]},)
    doc = document(job("a", notify=hook), job("b", "a"), job("c", "a"), job("d", "b", "c"))
    end(doc, by_job(tick(doc))["a"])
    running = by_job(tick(doc))
    end(doc, running["b"], FAIL)
    assert "notify_owed" not in doc["jobs"]["a"]["state"]  # the chain is still open
    end(doc, running["c"])
    (owed,) = doc["jobs"]["a"]["state"]["notify_owed"].values()
    chain_id = next(iter(doc["chains"]))
    assert (owed["event"], owed["body"]["chain"], owed["body"]["status"]) == ("chain_failed", chain_id, "failed")
    assert "b error" in owed["body"]["reason"] and "d skipped" in owed["body"]["reason"]
    assert all("notify_owed" not in doc["jobs"][name]["state"] for name in "bcd")
