"""loop/due.next_instants walks the jobs once; it must say what the two walks it replaced
said (ahead_fire for every job, then every job's candidates), for every kind of job state."""

from __future__ import annotations

import itertools
import random
from datetime import datetime, timedelta, timezone
from typing import Any

from cronctl.jobs.state import JobView, entry_from, new_state
from cronctl.loop import due
from cronctl.models import JobSpec
from cronctl.schedule.slots import fire_at
from cronctl.store import chain_doc
from cronctl.store import claims as claims_mod
from cronctl.timefmt import from_iso, to_iso

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def _reference(doc: dict[str, Any]) -> tuple[datetime | None, datetime | None, int]:
    """The code before: two passes."""
    fires = [when for entry in doc["jobs"].values() if (when := claims_mod.ahead_fire(entry)) is not None]
    earliest = chain_doc.earliest_chain_fire(doc)
    for entry in doc["jobs"].values():
        state = entry["state"]
        if state.get("paused") or entry.get("paused") or state.get("completed"):
            continue
        candidates = []
        retry = state.get("retry")
        if retry and retry.get("due_at"):
            candidates.append(from_iso(retry["due_at"]))
        if state.get("next_run_at") and not (entry.get("repeat") is not None
                                             and claims_mod.repeat_spent(JobView.from_entry(entry).spec, state)):
            slot = from_iso(state["next_run_at"])
            jitter = entry.get("jitter")
            if slot is not None and jitter and jitter != "0s":
                slot = fire_at(JobView.from_entry(entry).spec, slot)
            candidates.append(slot)
        for when in candidates:
            if when is not None and (earliest is None or when < earliest):
                earliest = when
    if not fires:
        return earliest, None, 0
    ahead = min(fires)
    return earliest, ahead, sum(1 for when in fires if (when - ahead).total_seconds() <= 1.0)


def _entry(rng: random.Random, index: int) -> dict[str, Any]:
    spec = JobSpec(name=f"j{index}", command="true", every=float(rng.choice([60, 3600])),
                   jitter=rng.choice([0.0, 0.0, 30.0]), repeat=rng.choice([None, None, 1, 3]),
                   paused=rng.random() < 0.1)
    slot = T0 + timedelta(seconds=rng.randrange(-600, 7200)) if rng.random() < 0.9 else None
    state = new_state(T0, slot)
    state["paused"] = rng.random() < 0.1
    state["completed"] = rng.random() < 0.05
    state["runs_started"] = rng.choice([0, 1, 3])
    if rng.random() < 0.2:
        state["retry"] = {"due_at": to_iso(T0 + timedelta(seconds=rng.randrange(-60, 600))), "attempt": 1}
    if rng.random() < 0.2:
        state["claims"] = {"r1": {"trigger": rng.choice(["schedule", "force"]), "dispatched": rng.random() < 0.5}}
    return entry_from(spec, state)


def test_one_pass_says_what_the_two_passes_said() -> None:
    for seed, size in itertools.product(range(40), (0, 1, 3, 30)):
        rng = random.Random(seed * 100 + size)
        doc = {"jobs": {f"j{i}": _entry(rng, i) for i in range(size)}, "chains": {}}
        assert due.next_instants(doc) == _reference(doc), (seed, size)
        assert due.earliest_fire(doc) == _reference(doc)[0]


def _clustered_entry(rng: random.Random, index: int) -> dict[str, Any]:
    """Slots a few milliseconds to seconds apart (runs spawned together), some written with
    another offset or without milliseconds, as a hand-edited store may hold them."""
    entry = _entry(rng, index)
    slot = T0 + timedelta(milliseconds=rng.choice([0, 1, 999, 1000, 1001, 1500, 2500, -3]))
    text = to_iso(slot)
    if rng.random() < 0.15:
        text = slot.astimezone(timezone(timedelta(hours=2))).isoformat()
    elif rng.random() < 0.15:
        text = slot.isoformat(timespec="microseconds")
    entry["state"]["next_run_at"] = text
    return entry


def test_slots_compared_as_text_count_and_order_as_the_instants_do() -> None:
    for seed, size in itertools.product(range(60), (1, 2, 5, 30)):
        rng = random.Random(seed * 1000 + size)
        doc = {"jobs": {f"j{i}": _clustered_entry(rng, i) for i in range(size)}, "chains": {}}
        assert due.next_instants(doc) == _reference(doc), (seed, size)


def _store_with(tmp_path: Any, jobs: dict[str, Any]) -> Any:
    from cronctl.paths import Paths
    from cronctl.store.jsonstore import Store

    tmp_path.mkdir(parents=True, exist_ok=True)
    store = Store(Paths(tmp_path))
    with store.transaction() as doc:
        doc["jobs"].update(jobs)
    return store


def test_the_loop_reads_jobs_one_by_one_and_keeps_only_those_it_watches(tmp_path: Any) -> None:
    from cronctl.store.outbox import PENDING

    for seed in range(8):
        rng = random.Random(seed)
        jobs = {f"j{i}": _clustered_entry(rng, i) if i % 2 else _entry(rng, i) for i in range(40)}
        jobs["j0"]["state"][PENDING] = {"r1": {"rows": []}}
        jobs["j1"]["state"]["last_status"] = "error"
        store = _store_with(tmp_path / str(seed), jobs)
        index = due.DueIndex(store)
        index.refresh()
        whole = store.read()
        assert (index.next_due, index.next_ahead, index.ahead_count) == due.next_instants(whole)
        assert index.job_count == 40
        assert sorted(index.doc["jobs"]) == sorted(name for name, entry in whole["jobs"].items() if due.watched(entry))
        assert {"j0", "j1"} <= set(index.doc["jobs"]) and len(index.doc["jobs"]) < 40
        assert index.doc["counters"] == whole["counters"]


def test_a_store_written_by_hand_or_with_chains_is_read_whole_with_the_same_result(tmp_path: Any) -> None:
    import json

    import pytest

    from cronctl.errors import StoreCorruptError
    from cronctl.paths import Paths

    rng = random.Random(7)
    store = _store_with(tmp_path / "hand", {f"j{i}": _entry(rng, i) for i in range(10)})
    path = Paths(tmp_path / "hand").store
    path.write_text(json.dumps(json.loads(path.read_text()), indent=2))  # one key per line
    index = due.DueIndex(store)
    index.refresh()
    assert (index.next_due, index.next_ahead, index.ahead_count, index.job_count) == (
        *due.next_instants(store.read()), 10)
    canonical = _store_with(tmp_path / "split", {f"j{i}": _entry(rng, i) for i in range(10)})
    split = Paths(tmp_path / "split").store
    text = split.read_text()
    at = text.index('"j7": ')  # jobs j0 to j6 stream, then j7 is on two lines
    split.write_text(text[:at] + text[at:].replace(', "command"', ',\n  "command"', 1))
    index = due.DueIndex(canonical)
    index.refresh()  # the first lines stream, then one is not a whole job: read whole instead
    assert (index.next_due, index.next_ahead, index.ahead_count, index.job_count) == (
        *due.next_instants(canonical.read()), 10)
    path.write_text(path.read_text()[:-30])  # cut short: refused, as a read refuses it
    with pytest.raises(StoreCorruptError):
        due.DueIndex(store).refresh()

    chained = {f"j{i}": _entry(rng, i) for i in range(5)}
    chain_store = _store_with(tmp_path / "chain", chained)
    with chain_store.transaction() as doc:
        doc["chains"] = {"c1": {"started_at": to_iso(T0 - timedelta(hours=1)), "slot": to_iso(T0),
                                "nodes": {"j1": {"status": "ready"}}}}
    index = due.DueIndex(chain_store)
    index.refresh()
    assert index.next_due == T0 - timedelta(hours=1)  # the chain's ready node, decided over every job
    assert index.job_count == 5
