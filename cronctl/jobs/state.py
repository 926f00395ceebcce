"""A job as stored: its spec plus its state, and the state words every reader shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronctl.errors import CronctlError, StoreError, no_job_named
from cronctl.models import JobSpec
from cronctl.schedule.cronexpr import parse_cron
from cronctl.schedule.zones import check_timezone
from cronctl.timefmt import from_iso, to_iso


def new_state(now: datetime, next_run_at: datetime | None) -> dict[str, Any]:
    """The stable state keys of SPEC §2 plus cronctl's own bookkeeping."""
    stamp = to_iso(now)  # once: `apply -f` of 10,000 jobs makes 10,000 states
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
        "created_at": stamp,
        "updated_at": stamp,
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
        raise no_job_named(name) from None
    return entry


@dataclass(frozen=True)
class JobView:
    """A read-only pairing of spec and state for the read commands."""

    spec: JobSpec
    state: dict[str, Any]
    # The stored entry the view was read from (from_entry), for a reader that can show it
    # as it is (views.listed_json); None for a view made from a spec.
    entry: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_entry(cls, entry: dict[str, Any]) -> JobView:
        """The view of a stored entry; StoreError naming the job and field if it was hand-edited badly."""
        try:
            # from_dict takes the spec's fields and leaves "state" aside.
            spec = JobSpec.from_dict(entry)
            _check_schedule(spec)
            state = entry["state"]
            for key in _INSTANT_KEYS:
                from_iso(state.get(key))
            _check_flags(spec, state)
        except (CronctlError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise bad_entry_error(entry, exc) from None
        return cls(spec, state, entry)

    @property
    def next_run_at(self) -> datetime | None:
        return from_iso(self.state.get("next_run_at"))

    @property
    def paused(self) -> bool:
        return bool(self.spec.paused or self.state.get("paused"))

    @property
    def claims(self) -> dict[str, Any]:
        return self.state.get("claims") or {}


def _check_flags(spec: JobSpec, state: dict[str, Any]) -> None:
    """A hand-edited `paused: "yes"` is not true: every reader would take any non-empty
    string for true (and "no" would pause too). Refused, naming the value."""
    if spec.paused is not True and spec.paused is not False:
        raise ValueError(f"'paused' is {spec.paused!r}, not true or false")
    paused = state.get("paused")
    if paused is not None and paused is not True and paused is not False:
        raise ValueError(f"state 'paused' is {paused!r}, not true or false")


# State keys read as instants by every reader (health, list, the loop).
_INSTANT_KEYS = ("next_run_at", "last_run_at")
# (cron, zone) pairs already parsed: from_entry runs per job on every read.
_GOOD_SCHEDULES: set[tuple[str | None, str]] = set()
_GOOD_SCHEDULES_MAX = 4096


def _check_schedule(spec: JobSpec) -> None:
    """The cron and zone that from_dict keeps as text, checked so a bad one names its job."""
    key = (spec.cron, spec.timezone)
    if key in _GOOD_SCHEDULES:
        return
    if spec.cron is not None:
        parse_cron(spec.cron)
    check_timezone(spec.timezone)
    if len(_GOOD_SCHEDULES) >= _GOOD_SCHEDULES_MAX:
        _GOOD_SCHEDULES.clear()
    _GOOD_SCHEDULES.add(key)


def bad_entry_error(entry: Any, exc: BaseException) -> StoreError:
    """`jobs.json: job 'NAME': field 'FIELD': problem`, in the words the YAML errors use."""
    name = entry.get("name") if isinstance(entry, dict) else None
    label = f"job '{name}'" if isinstance(name, str) else "a job without a name"
    field, problem = stored_entry_problem(entry) or (None, _exception_words(exc))
    where = f"jobs.json: {label}: field '{field}'" if field else f"jobs.json: {label}"
    return StoreError(f"{where}: {problem}; the store was not changed. Fix it by hand in jobs.json "
                      "('cronctl doctor' lists every bad job)")


def stored_entry_problem(entry: Any) -> tuple[str, str] | None:
    """(field, problem) of the first unusable field of a stored job entry, or None if it is usable."""
    from cronctl.jobs.jobfile import spec_field_problem

    if not isinstance(entry, dict):
        return "name", f"the entry is not an object but {type(entry).__name__}"
    found = spec_field_problem(entry)
    if found is not None:
        return found
    if "state" not in entry:
        return "state", "missing (every stored job has a state object)"
    state = entry["state"]
    if not isinstance(state, dict):
        return "state", f"expected an object, got {state!r}"
    for key in _INSTANT_KEYS:
        try:
            from_iso(state.get(key))
        except (ValueError, TypeError) as exc:
            return f"state.{key}", f"{state.get(key)!r} is not an ISO 8601 instant with a UTC offset ({exc})"
    return None


def _exception_words(exc: BaseException) -> str:
    if isinstance(exc, CronctlError):
        return str(exc)
    return f"cannot be read ({type(exc).__name__}: {exc})"
