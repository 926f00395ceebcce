"""The words of the run path's interface (store/leases.py): what goes in and comes out.

Frozen dataclasses and plain values; no store document leaks out of a `LeaseStore`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cronctl.models import JobSpec
from cronctl.store.claims import Dispatched, Event, Outcome, Owner


@dataclass(frozen=True)
class HeldGate:
    """A run claimed ahead whose child waits at its gate, to be marked dispatched now."""

    job: str
    run_id: str
    spec: JobSpec  # as claimed: a job edited since is handed back, not started
    slot: str
    advanced_to: str | None  # what the claim set next_run_at to (unhold puts it back)
    run: Dispatched  # the child, with the monotonic instant its gate opens
    opens_at: datetime  # slot + jitter


@dataclass(frozen=True)
class Unhold:
    """A run claimed ahead to hand back with its slot: nothing of it ran."""

    job: str
    run_id: str
    advanced_to: str | None


@dataclass(frozen=True)
class Refused:
    """A claimed run whose child could not be spawned.

    `outcome` None: released at once (spawn failure). Otherwise a blocked config,
    recorded once as `outcome`, then released without a record while it stays the same.
    """

    job: str
    run_id: str
    outcome: Outcome | None
    event: Event  # the row that says why
    # Record `outcome` every time, with `event` (a forced run whose spawn failed: whoever
    # asked for it, perhaps with --wait, learns it from its record), not as a blocked config.
    always_record: bool = False


@dataclass(frozen=True)
class RunEnd:
    """A run's end as its supervisor saw it; `job` None: looked up from the claim."""

    run_id: str
    outcome: Outcome
    job: str | None = None
    log: str | None = None  # the run's log file, kept in its history record


@dataclass(frozen=True)
class RunClaim:
    """A read view of one claim (a run in flight)."""

    job: str
    run_id: str
    slot: str
    trigger: str
    attempt: int
    owner: Owner | None
    dispatched: bool
    child: dict[str, Any] | None  # {"pid", "start_time"} once dispatched
    kill_grace: float | None
    lease_until: str | None
    owner_host: str | None = None  # PostgreSQL: the host the owner runs on (its pid means nothing elsewhere)
    # What the healer judges a claim by: the boot and monotonic instants its lease and
    # start were taken in (one host's clock), and the timeout its deadline follows from.
    boot_id: str | None = None
    lease_until_mono: float | None = None
    started_mono: float | None = None
    timeout: float | None = None

    @property
    def owner_dict(self) -> dict[str, Any]:
        """The owner as the liveness checks take it ({} for none)."""
        if self.owner is None:
            return {}
        return {**self.owner.to_dict(), **({"host": self.owner_host} if self.owner_host else {})}

    @property
    def lease_fields(self) -> dict[str, Any]:
        """The lease as the liveness checks take it (proc/liveness.py, loop/cluster.py)."""
        return {"boot_id": self.boot_id, "lease_until_mono": self.lease_until_mono, "lease_until": self.lease_until}


def run_claim(job: str, claim: dict[str, Any]) -> RunClaim:
    """The read view of a stored claim (its owner's `host` where the backend marks it)."""
    owner = claim.get("owner")
    return RunClaim(
        job=job, run_id=str(claim["run_id"]), slot=str(claim["slot"]), trigger=str(claim["trigger"]),
        attempt=int(claim["attempt"]), owner=Owner.from_dict(owner) if owner else None,
        dispatched=bool(claim.get("dispatched")), child=claim.get("child"),
        kill_grace=claim.get("kill_grace"), lease_until=claim.get("lease_until"),
        owner_host=owner.get("host") if isinstance(owner, dict) else None,
        boot_id=claim.get("boot_id"), lease_until_mono=claim.get("lease_until_mono"),
        started_mono=claim.get("started_mono"), timeout=claim.get("timeout"),
    )
