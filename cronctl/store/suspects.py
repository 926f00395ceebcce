"""The jobs the healer looks at, as typed claims (`LeaseStore.suspects`).

Only a job with a run in flight (a claim) or a failed last run can need healing (SPEC §6);
every other job costs the healer nothing. Each backend finds those jobs its own way (the
JSON store in the loop's cached read, PostgreSQL with one query on its indexes); both hand
them over in these words, so the healer never reads a store document.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cronctl.jobs.state import JobView
from cronctl.models import FAILED_STATUSES
from cronctl.store.lease_types import RunClaim, run_claim


@dataclass(frozen=True)
class Suspect:
    """A job the healer looks at: its spec and state as read, and its claims."""

    view: JobView
    claims: tuple[RunClaim, ...]

    @property
    def job(self) -> str:
        return self.view.spec.name


def is_suspect(entry: dict[str, Any]) -> bool:
    """Whether a stored job may need healing: a claim, or a failed last run."""
    state = entry["state"]
    return bool(state.get("claims")) or state.get("last_status") in FAILED_STATUSES


def suspect_of(entry: dict[str, Any]) -> Suspect:
    """The typed view of a stored suspect job (StoreError naming it if it was hand-edited badly)."""
    view = JobView.from_entry(entry)
    return Suspect(view, tuple(run_claim(view.spec.name, claim) for claim in view.claims.values()))


def suspects_in(jobs: dict[str, Any]) -> list[Suspect]:
    """The suspect jobs among stored entries by name, in the order the store holds them."""
    return [suspect_of(entry) for entry in jobs.values() if is_suspect(entry)]
