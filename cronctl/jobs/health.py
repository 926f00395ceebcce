"""What state a job is really in, in plain words, and whose fault it is.

Pure functions of (job, now, liveness): `status`, `list` and the healer share them,
so the screen and the healer can never disagree about what is wedged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from cronctl.jobs.chain_broken import chain_words, failed_last
from cronctl.jobs.state import JobView
from cronctl.jobs.words import signal_text
from cronctl.models import FAILED_STATUSES
from cronctl.schedule.slots import cadence, grace
from cronctl.timefmt import from_iso

# Failed runs in a row that make a job stale when its definition says nothing (SPEC §12:
# `alert_after`, default 1: the first failure of a nightly backup is news that night).
FAILING_STREAK = 1

# Liveness of a claim's owner: (owner dict) -> True alive / False dead.
OwnerAlive = Callable[[dict[str, Any]], bool]
# Has a claim's lease expired?  (claim dict) -> bool
LeaseExpired = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class JobHealth:
    state: str  # ok due running paused failing late wedged completed (waiting: chain_health)
    reason: str  # plain words
    fault: str | None  # "job", "platform" or None
    # A failing job is stale once its failures in a row reach the job's alert_after.
    chronic: bool = False

    @property
    def stale(self) -> bool:
        return self.state in ("late", "wedged") or self.chronic


def claim_problem(claim: dict[str, Any], owner_alive: OwnerAlive, lease_expired: LeaseExpired) -> str | None:
    """'owner_dead', 'lease_expired' or None for a healthy claim."""
    if not owner_alive(claim.get("owner") or {}):
        return "owner_dead"
    if lease_expired(claim):
        return "lease_expired"
    return None


def job_health(view: JobView, now: datetime, owner_alive: OwnerAlive, lease_expired: LeaseExpired) -> JobHealth:
    state = view.state
    if view.claims:
        return _claimed_health(view, now, owner_alive, lease_expired)
    if state.get("completed"):
        return JobHealth("completed", _completed_reason(view), None)
    if view.paused:
        if view.spec.paused and view.spec.source and not view.state.get("paused"):
            return JobHealth("paused", f"paused by its file {view.spec.source} (set paused: false there)", None)
        return JobHealth("paused", f"paused by an operator; 'cronctl resume {view.spec.name}' re-arms it", None)
    blocked = blocked_by_config(view)
    if blocked is not None:
        return JobHealth("wedged", blocked, "job")
    if persisted_error_wedge(view, now):
        return JobHealth(
            "wedged",
            f"last run {state.get('last_status')} and nothing is scheduled until {state.get('next_run_at')}; "
            "the loop re-arms it on its next tick (or run 'cronctl resume " + view.spec.name + "')",
            "platform",
        )
    next_run = view.next_run_at
    # A slot still ahead is never late: its grace is not worked out (a cron job's is, since
    # working it out may raise for such a slot as for any other).
    if next_run is not None and (next_run < now or view.spec.cron is not None) \
            and now - next_run > timedelta(seconds=grace(view.spec, next_run)):
        return JobHealth(
            "late",
            f"due since {state.get('next_run_at')} and not started; is 'cronctl run' running?",
            "platform",
        )
    if failed_last(state):
        return _failing_health(view, "")
    return _ok_health(_ok_reason(view))


def _failing_health(view: JobView, now_doing: str) -> JobHealth:
    """`failing` until a run succeeds, also while the next run is held or running (SPEC §12)."""
    state = view.state
    streak, limit = failure_streak(state), alert_limit(view)
    reason = _failure_reason(state) + now_doing
    if streak > 1:
        reason = f"{streak} runs in a row failed, none succeeded since; last: {reason}"
    return JobHealth("failing", reason, _failure_fault(state), chronic=streak >= limit)


def alert_limit(view: JobView) -> int:
    """The job's alert_after (at least 1)."""
    value = getattr(view.spec, "alert_after", FAILING_STREAK)
    return value if isinstance(value, int) and value >= 1 else FAILING_STREAK


def failure_streak(state: dict[str, Any]) -> int:
    """Failed runs since the last success (the store's consecutive_failures; 0 when unreadable)."""
    streak = state.get("consecutive_failures")
    return streak if isinstance(streak, int) and not isinstance(streak, bool) else 0


def blocked_by_config(view: JobView) -> str | None:
    """Why the job cannot start, when its latest attempt was refused for its cwd or executable.

    The loop records a refusal in `last_not_started` (the last real run stays as it was)
    and the pre-flight's words in `blocked`, removed again once a run starts. Without
    this, a job that never started would read "waiting for its first run".
    """
    state = view.state
    refused = state.get("last_not_started")
    if not isinstance(refused, dict) or refused.get("reason") != "blocked_config":
        return None
    last_run = state.get("last_run_at")
    if last_run is not None and str(refused.get("ended_at") or "") <= str(last_run):
        return None  # a run started after the refusal
    check = state.get("blocked")
    if not isinstance(check, str) or not check:
        check = "its working directory or executable does not exist or is not usable"
    return (f"cannot start: {check} (run {refused.get('run_id')} refused at {refused.get('ended_at')}, "
            f"blocked_config). Create what is missing, or fix the job's cwd, command, user or env_file; "
            f"then 'cronctl force-run "
            f"{view.spec.name}' checks it now (the job reads wedged until a run starts)")


def _claimed_health(view: JobView, now: datetime, owner_alive: OwnerAlive, lease_expired: LeaseExpired) -> JobHealth:
    """A job with a claim: wedged when the claim is broken, else failing (its last finished run
    failed), running (a child started) or due (claimed for a slot whose child has not begun)."""
    for run_id, claim in view.claims.items():
        problem = claim_problem(claim, owner_alive, lease_expired)
        if problem == "owner_dead":
            return JobHealth(
                "wedged",
                f"run {run_id} belongs to a cronctl loop that is no longer alive; "
                "the next loop tick reclaims it (or 'cronctl resume " + view.spec.name + "')",
                "platform",
            )
        if problem == "lease_expired":
            return JobHealth(
                "wedged",
                f"run {run_id} has not been renewed by its loop since {claim.get('lease_until')}; "
                "the loop may be hung. 'cronctl resume " + view.spec.name + "' releases it",
                "platform",
            )
    started = {run_id: claim for run_id, claim in sorted(view.claims.items()) if child_started(claim, now)}
    where = ", ".join(_run_where(run_id, claim) for run_id, claim in started.items())
    if failed_last(view.state):
        doing = f"; now running {where}" if started else f"; next run {', '.join(view.claims)} is due"
        return _failing_health(view, doing)
    if started:
        return JobHealth("running", f"running ({where})", None)
    claim = next(iter(view.claims.values()))
    starts = claim.get("held_until") or claim.get("due_at") or claim.get("slot")
    return JobHealth("due", f"claimed for its slot {claim.get('slot')}; starts at {starts}", None)


def child_started(claim: dict[str, Any], now: datetime) -> bool:
    """The run's child is past its gate: dispatched, and its start instant has come."""
    if not claim.get("dispatched"):
        return False
    started = from_iso(claim.get("started_at"))
    return started is None or started <= now


def _run_where(run_id: str, claim: Any) -> str:
    """A running run, with the host that runs it when the store knows (PostgreSQL)."""
    owner = claim.get("owner") if isinstance(claim, dict) else None
    host = claim.get("host") if isinstance(claim, dict) else None
    host = host or (owner.get("host") if isinstance(owner, dict) else None)
    return f"{run_id} on {host}" if host else run_id


def persisted_error_wedge(view: JobView, now: datetime) -> bool:
    """A recurring job that failed, then was pushed into the future and never revisited."""
    state = view.state
    # The last status first: every reader asks this of every job, and most last ran well.
    if state.get("last_status") not in FAILED_STATUSES or state.get("retry"):
        return False
    if view.spec.at is not None or view.claims or view.paused or state.get("completed"):
        return False
    if state.get("rearmed_for") is not None and state.get("rearmed_for") == state.get("last_run_at"):
        return False  # already re-armed once for this failure
    last_run, next_run = from_iso(state.get("last_run_at")), view.next_run_at
    if last_run is None or next_run is None or next_run <= now:
        return False
    limit = (cadence(view.spec, last_run) or 0.0) + grace(view.spec, last_run)
    return (now - last_run).total_seconds() > limit


def _completed_reason(view: JobView) -> str:
    if view.spec.at is not None:
        return "one-shot job done"
    return f"finished its {view.spec.repeat} runs"


def _ok_health(reason: str) -> JobHealth:
    """JobHealth("ok", reason, None), one per reason (they are few, and a frozen dataclass is
    slow to make: `list` of 10,000 jobs made 10,000 of them)."""
    health = _OK_HEALTHS.get(reason)
    if health is None:
        health = JobHealth("ok", reason, None)
        if len(_OK_HEALTHS) < 1024:
            _OK_HEALTHS[reason] = health
    return health


_OK_HEALTHS: dict[str, JobHealth] = {}


def _ok_reason(view: JobView) -> str:
    if view.state.get("last_status") is None:
        return "waiting for its first run"
    return f"last run {view.state['last_status']}"


def _failure_reason(state: dict[str, Any]) -> str:
    status, reason = state.get("last_status"), state.get("last_reason")
    words = {
        "error": _error_words(state),
        "timeout": "the job ran past its timeout and was stopped",
        "lost": "cronctl's loop stopped while this run was in progress; the job itself may be fine — "
                "re-run it if the work did not complete",
    }.get(status or "", f"last run {status}")
    retry = state.get("retry")
    tail = f"; retry {retry['attempt']} at {retry['due_at']}" if retry else ""
    return f"{words}{f' ({reason})' if reason and status != 'lost' else ''}{tail}{chain_words(state)}"


def _error_words(state: dict[str, Any]) -> str:
    """A failed run's end in words: its exit code, or the signal that killed it."""
    code, signal = state.get("last_exit_code"), state.get("last_signal")
    if isinstance(signal, int) and not isinstance(signal, bool):
        return f"the job was {signal_text(signal)}"
    if code is None:  # a store written before last_signal was kept, or an exit status lost
        return "the job was killed by a signal" if state.get("last_reason") == "killed_by_signal" \
            else "the job ended without an exit status"
    return f"the job exited with code {code}"


def _failure_fault(state: dict[str, Any]) -> str:
    """A lost run, or a chain node that never started (not for want of its cwd or executable), is cronctl's."""
    status = state.get("last_status")
    nothing_ran = status == "not_started" and state.get("last_reason") != "blocked_config"
    return "platform" if status == "lost" or nothing_ran else "job"
