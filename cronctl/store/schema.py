"""The shape of the JSON store document, and the lookups every module used to spell out.

The TypedDicts give mypy (and a reader) the document's shape at no runtime cost: the
document stays plain dicts, as `jsonstore` reads and writes them. Code outside `store/`
should not need them: it goes through `store.leases.LeaseStore`, whose arguments and
results are dataclasses.
"""

from __future__ import annotations

from typing import Any, TypedDict


class OwnerDict(TypedDict):
    """Who holds a claim (`claims.Owner.to_dict()`)."""

    generation: str
    pid: int
    start_time: float
    boot_id: str


class ChildDict(TypedDict):
    pid: int
    start_time: float


class Claim(TypedDict, total=False):
    """One run in flight, keyed by run_id under its job's `state.claims`."""

    run_id: str
    slot: str
    trigger: str  # models.Trigger value
    attempt: int
    owner: OwnerDict
    boot_id: str
    claimed_at: str
    lease_until_mono: float
    lease_until: str
    dispatched: bool  # the gate: only a dispatched claim's child may begin
    child: ChildDict | None
    started_at: str | None
    started_mono: float | None
    timeout: float | None
    kill_grace: float
    late: bool
    due_at: str | None  # slot + jitter: the base of fire lateness
    held_until: str  # claimed ahead: the gate opens at this instant


class Retry(TypedDict):
    attempt: int
    due_at: str
    slot: str


class JobState(TypedDict, total=False):
    """A job's stored state (SPEC §2 keys plus cronctl's bookkeeping; `jobs.state.new_state`)."""

    next_run_at: str | None
    last_run_at: str | None
    last_status: str | None
    last_exit_code: int | None
    last_reason: str | None
    last_run_id: str | None
    last_slot: str | None
    last_duration: float | None
    last_late: bool
    last_success_at: str
    last_not_started: dict[str, Any]
    created_at: str
    updated_at: str
    paused: bool
    completed: bool
    runs_started: int
    runs_by_status: dict[str, int]
    consecutive_failures: int
    retry: Retry | None
    claims: dict[str, Claim]
    blocked: str  # the message of a config that blocks every start, recorded once
    rearmed_for: str | None


class JobEntry(TypedDict, total=False):
    """A job: the fields of `JobSpec.to_dict()` plus its `state`."""

    name: str
    state: JobState


class HistoryRecord(TypedDict, total=False):
    """One finished run, as appended to `history/<job>.jsonl`."""

    job: str
    run_id: str
    slot: str
    trigger: str
    attempt: int
    claimed_at: str
    started_at: str | None
    ended_at: str
    duration: float | None
    status: str  # models.RunStatus value
    exit_code: int | None
    signal: int | None
    reason: str | None
    fault: str | None  # models.Fault value
    late: bool
    late_reason: str | None
    output_tail: str
    log: str | None


class Document(TypedDict, total=False):
    version: int
    rev: int
    jobs: dict[str, JobEntry]
    counters: dict[str, int]
    metrics: dict[str, Any]


def find_claim(doc: dict[str, Any], job: str, run_id: str) -> dict[str, Any] | None:
    """The claim `run_id` of `job`, or None if the job or the claim is gone."""
    entry = doc["jobs"].get(job)
    if entry is None:
        return None
    claims: dict[str, Any] = entry["state"].get("claims") or {}
    return claims.get(run_id)


def claims_of(entry: dict[str, Any] | None) -> dict[str, Any]:
    """A job entry's claims by run_id (empty for a missing entry or none yet)."""
    if entry is None:
        return {}
    claims: dict[str, Any] = entry.get("state", {}).get("claims") or {}
    return claims


def job_of_run(doc: dict[str, Any], run_id: str) -> str | None:
    """The job holding claim `run_id`, found by a scan (run ids are unique across jobs)."""
    for name, entry in doc["jobs"].items():
        if run_id in claims_of(entry):
            return str(name)
    return None


def bump_counter(doc: dict[str, Any], counter: str, by: int = 1) -> None:
    """The store's recovery counters (`cronctl metrics`, `doctor`): created on first use."""
    counters = doc.setdefault("counters", {})
    counters[counter] = int(counters.get(counter) or 0) + by
