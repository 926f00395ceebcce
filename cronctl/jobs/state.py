"""A job as stored: its spec plus its state, and the state words every reader shares."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronctl.errors import JobNotFoundError
from cronctl.models import JobSpec
from cronctl.timefmt import from_iso, to_iso


def new_state(now: datetime, next_run_at: datetime | None) -> dict[str, Any]:
    """The stable state keys of SPEC §2 plus cronctl's own bookkeeping."""
    return {
        "next_run_at": to_iso(next_run_at),
        "last_run_at": None,
        "last_status": None,
        "last_exit_code": None,
        "last_reason": None,
        "last_run_id": None,
        "last_slot": None,
        "last_duration": None,
        "last_late": False,
        "created_at": to_iso(now),
        "updated_at": to_iso(now),
        "paused": False,
        "completed": False,
        "runs_started": 0,
        "consecutive_failures": 0,
        "retry": None,
        "claims": {},
    }


def entry_from(spec: JobSpec, state: dict[str, Any]) -> dict[str, Any]:
    return {**spec.to_dict(), "state": state}


def get_entry(doc: dict[str, Any], name: str) -> dict[str, Any]:
    try:
        entry: dict[str, Any] = doc["jobs"][name]
    except KeyError:
        raise JobNotFoundError(f"no job named '{name}' (see 'cronctl list')") from None
    return entry


@dataclass(frozen=True)
class JobView:
    """A read-only pairing of spec and state for the read commands."""

    spec: JobSpec
    state: dict[str, Any]

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> JobView:
        # from_dict takes the spec's fields and leaves "state" aside.
        return cls(JobSpec.from_dict(entry), entry.get("state") or {})

    @property
    def next_run_at(self) -> datetime | None:
        return from_iso(self.state.get("next_run_at"))

    @property
    def paused(self) -> bool:
        return bool(self.spec.paused or self.state.get("paused"))

    @property
    def claims(self) -> dict[str, Any]:
        return self.state.get("claims") or {}
