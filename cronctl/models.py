"""Job definitions and the closed sets of words cronctl speaks in.

Dataclasses are converted to plain dicts only at the store and audit boundary.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, field, fields, replace
from datetime import datetime
from enum import Enum
from typing import Any

from cronctl.durations import format_duration, parse_duration
from cronctl.errors import DurationError
from cronctl.timefmt import from_iso, to_iso

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
NAME_MAX = 64


class StrEnum(str, Enum):
    def __str__(self) -> str:
        return str(self.value)


class Overlap(StrEnum):
    SKIP = "skip"
    ALLOW = "allow"
    REPLACE = "replace"


class Catchup(StrEnum):
    LATEST = "latest"
    SKIP = "skip"


class Requires(StrEnum):
    """What a dependant needs of its upstreams in a chain (SPEC §10)."""

    SUCCESS = "success"  # every upstream succeeded
    DONE = "done"  # every upstream finished, in any way


class RunStatus(StrEnum):
    SUCCESS = "success"
    ERROR = "error"
    TIMEOUT = "timeout"
    KILLED = "killed"
    LOST = "lost"
    NOT_STARTED = "not_started"
    # A chain node that did not run because its chain decided so (SPEC §10): its upstream
    # did not satisfy `requires` (reason upstream_failed), or it was paused or overlapped.
    # Not a failure: it bumps no failure streak and starts no retry or on_failure.
    SKIPPED = "skipped"


# The statuses that count as a failure: they bump consecutive_failures, schedule a
# retry and start on_failure (health.FAILED spells the same set for the read side).
FAILED_STATUSES = frozenset({RunStatus.ERROR, RunStatus.TIMEOUT, RunStatus.LOST})


class Trigger(StrEnum):
    """Why a run was claimed: its slot came, a retry fell due, or an operator forced it."""

    SCHEDULE = "schedule"
    RETRY = "retry"
    FORCE = "force"
    CHAIN = "chain"  # its upstreams finished in a chain (SPEC §10)


class Fault(StrEnum):
    """Whose fault a failed run is, as history and `status` say it."""

    JOB = "job"
    PLATFORM = "platform"


class AuditEvent(StrEnum):
    JOB_ADDED = "job.added"
    JOB_UPDATED = "job.updated"
    JOB_REMOVED = "job.removed"
    JOB_PAUSED = "job.paused"
    JOB_RESUMED = "job.resumed"
    SCHEDULER_STARTED = "scheduler.started"
    SCHEDULER_STOPPED = "scheduler.stopped"
    SCHEDULER_STANDBY = "scheduler.standby"
    SCHEDULER_TAKEOVER = "scheduler.takeover"
    SCHEDULER_GENERATION_RESTARTED = "scheduler.generation_restarted"
    SCHEDULER_TICK_STALLED = "scheduler.tick_stalled"
    SCHEDULER_LEADER_KILLED = "scheduler.leader_killed"
    RUN_CLAIMED = "run.claimed"
    RUN_STARTED = "run.started"
    RUN_FINISHED = "run.finished"
    RUN_SKIPPED = "run.skipped"
    RUN_MISSED = "run.missed"
    RUN_RETRY_SCHEDULED = "run.retry_scheduled"
    RUN_SPAWN_FAILED = "run.spawn_failed"
    RUN_FENCED = "run.fenced"
    RUN_KILLED = "run.killed"
    CLAIM_RECLAIMED = "claim.reclaimed"
    RECOVERY_PERSISTED_ERROR_REARMED = "recovery.persisted_error_rearmed"
    RECOVERY_DEADLINE_TERMINATED = "recovery.deadline_terminated"
    FORCE_RUN_REQUESTED = "force_run.requested"
    CHAIN_STARTED = "chain.started"
    CHAIN_TRIGGERED = "chain.triggered"
    CHAIN_FINISHED = "chain.finished"
    CLUSTER_CLOCK_SKEW = "cluster.clock_skew"
    CLUSTER_STORE_OUTAGE = "cluster.store_outage"
    CLUSTER_LOOP_FORGOTTEN = "cluster.loop_forgotten"
    CLUSTER_SESSION_ENDED = "cluster.session_ended"  # a session stuck on a gone client (store/pg/stuck.py)
    CLOCK_JUMPED = "clock.jumped"
    # Notifications (SPEC §12): every delivery try, and the end of trying.
    NOTIFY_SENT = "notify.sent"
    NOTIFY_FAILED = "notify.failed"
    NOTIFY_ABANDONED = "notify.abandoned"


# Fields whose YAML/store value is a duration string; in memory they are seconds.
DURATION_FIELDS = ("every", "timeout", "kill_grace", "starting_deadline", "retry_delay", "jitter", "grace")

DEFAULT_TIMEOUT = 3600.0
DEFAULT_KILL_GRACE = 10.0
DEFAULT_RETRY_DELAY = 60.0


@dataclass(frozen=True)
class JobSpec:
    """What the operator asked for. Exactly one of cron / every / at / after is set."""

    name: str
    command: str | tuple[str, ...]
    cron: str | None = None
    every: float | None = None
    at: datetime | None = None
    timezone: str = "UTC"
    cwd: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    kill_grace: float = DEFAULT_KILL_GRACE
    overlap: Overlap = Overlap.SKIP
    catchup: Catchup = Catchup.LATEST
    starting_deadline: float | None = None
    retries: int = 0
    retry_delay: float = DEFAULT_RETRY_DELAY
    repeat: int | None = None
    jitter: float = 0.0
    grace: float | None = None
    on_failure: str | tuple[str, ...] | None = None
    paused: bool = False
    source: str | None = None  # absolute path of the YAML file that defined it; None = added by hand
    after: tuple[str, ...] = ()  # upstream jobs: set, it runs in their chains instead of on a schedule
    requires: Requires = Requires.SUCCESS
    # Running as operators do (SPEC §13), checked by jobs/operatorfields.py; left out of the
    # stored entry while unset, so a job without them keeps the bytes it always had.
    user: str | None = None  # run as this user (the loop must be root)
    env_file: str | None = None  # KEY=VALUE lines read at each run, never copied into the store
    limits: dict[str, int] = field(default_factory=dict)  # LIMIT_NAMES -> bytes, seconds or a count
    keep_runs: int | None = None  # run logs kept (default history.LOGS_KEPT)
    keep_log: int | None = None  # bytes kept of each run's log (default engine.LOG_CAP)
    # --- alerting (SPEC §12): written to the store only when set, so older stores keep their bytes
    alert_after: int = 1  # failed runs in a row that make the job stale
    notify: tuple[dict[str, Any], ...] | None = None  # None: no notification; () turned off by `notify: []`

    @property
    def schedule_text(self) -> str:
        if self.after:
            return "after " + ", ".join(self.after)
        if self.cron is not None:
            return self.cron
        if self.every is not None:
            return f"every {format_duration(self.every)}"
        return f"at {to_iso(self.at)}"

    def with_changes(self, **changes: Any) -> JobSpec:
        return replace(self, **changes)

    def schedule_fields(self) -> tuple[Any, ...]:
        """What decides the slots: a change here recomputes next_run_at from now."""
        return (self.cron, self.every, self.at, self.timezone, self.jitter)

    def to_dict(self) -> dict[str, Any]:
        """The stored entry's fields, in field order (`show` lists them so).

        Per job written or shown: 10,000 at once for `apply` and `list --json`. So the
        fields are copied in one comprehension and only those that can need it are
        converted or left out, rather than every field going through every test
        (tests/unit/test_models_speed.py compares it with the field-by-field way)."""
        values = self.__dict__  # every field is there, in field order unless set some other way
        out = dict(values) if tuple(values) == _SPEC_FIELD_ORDER else {name: values[name] for name in _SPEC_FIELD_ORDER}
        for name in DURATION_FIELDS:
            value = out[name]
            if value is not None:
                out[name] = _duration_text(value)
        if out["at"] is not None:
            out["at"] = to_iso(out["at"])
        for name in _CONVERTED_FIELDS:  # inline: a call per field was half of this method
            value = out[name]
            if value is None or type(value) is str:
                continue
            if isinstance(value, Enum):
                out[name] = value._value_  # what .value returns, without the descriptor
            elif isinstance(value, tuple):
                out[name] = [dict(item) if isinstance(item, dict) else item for item in value]
            elif isinstance(value, dict):
                out[name] = dict(value)
        if not values["after"]:  # a job outside any chain keeps the store bytes it always had
            for name in CHAIN_FIELDS:
                del out[name]
        for name in OPERATOR_FIELDS:  # unset operator fields (SPEC §13) are not written either
            if not values[name]:
                del out[name]
        for name in ALERT_FIELDS:  # likewise a job without alerting fields
            if values[name] == _SPEC_DEFAULTS[name]:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """Rebuild from the store; the store only ever holds validated specs."""
        kwargs = dict(data)  # a C copy, then the few keys that are not fields dropped
        for key in kwargs.keys() - _SPEC_FIELDS:
            del kwargs[key]
        known = _STORED_DURATIONS
        for key in DURATION_FIELDS:  # the remembered spelling inline; a call only for a new one
            value = kwargs.get(key)
            if value is not None:
                seconds = known.get(value) if type(value) is str else None
                kwargs[key] = seconds if seconds is not None else _stored_duration(value, key)
        if "at" in kwargs:
            kwargs["at"] = from_iso(kwargs["at"])
        for key, kind in _ENUM_FIELDS:
            if key in kwargs:
                value = kwargs[key]
                member = kind._value2member_map_.get(value) if type(value) is str else None
                kwargs[key] = member if member is not None else _stored_enum(kind, value)
        for key in ("command", "on_failure", "after", "notify"):
            if isinstance(kwargs.get(key), list):
                kwargs[key] = tuple(kwargs[key])
        if cls is not JobSpec or not _SPEC_REQUIRED <= kwargs.keys():
            return cls(**kwargs)  # the generated __init__ names what is missing
        # Every read command rebuilds every job's spec (10,000 at once): the frozen
        # dataclass's __init__ sets its 23 fields one object.__setattr__ at a time, two
        # thirds of this method. The values are the same; only the way they are set differs
        # (tests/unit/test_models_speed.py compares both ways).
        # In field order, as __init__ sets them: to_dict then copies the dict whole.
        values = {**_SPEC_TEMPLATE, **kwargs}
        for name, make in _SPEC_FACTORIES:
            if name not in kwargs:
                values[name] = make()
        spec: JobSpec = object.__new__(JobSpec)
        spec.__dict__.update(values)
        return spec


def is_stored_form(entry: dict[str, Any]) -> bool:
    """Whether `entry` (a stored job: its fields and "state"), already read by
    `JobSpec.from_dict`, holds exactly the fields `to_dict` writes back for that spec, with
    the same values: then a reader can show the stored entry and skip the rebuild
    (`list --json` at 10,000 jobs: 35 ms of to_dict). Answered only for the common shape
    (every plain field, no chain, operator or alerting field, whose presence to_dict
    decides by value): anything else says False, and the caller rebuilds as always.

    Of the plain fields, to_dict changes only the spelling of durations and of `at`
    (enum values come back as the very text stored, lists as equal lists, everything
    else as it was stored); so those are compared."""
    if entry.keys() != _PLAIN_ENTRY_KEYS:
        return False
    for name in DURATION_FIELDS:
        value = entry[name]
        if value is None:
            continue
        if type(value) is not str:
            return False  # a number (0) read as seconds: to_dict spells it
        canonical = _CANONICAL_DURATIONS.get(value)
        if not (canonical if canonical is not None else _canonical_duration(value)):
            return False
    at = entry["at"]
    return at is None or (type(at) is str and to_iso(from_iso(at)) == at)


# Stored duration texts already compared with their canonical spelling ("1h": True, "60m": False).
_CANONICAL_DURATIONS: dict[str, bool] = {}


def _canonical_duration(text: str) -> bool:
    seconds = _STORED_DURATIONS.get(text)
    if seconds is None:
        try:
            seconds = parse_duration(text, field="duration")
        except (DurationError, ValueError):
            return False
    same = _duration_text(seconds) == text
    if len(_CANONICAL_DURATIONS) < 4096:
        _CANONICAL_DURATIONS[text] = same
    return same


# A store holds few distinct duration spellings and enum values: each is converted once
# per process ("1h" -> 3600.0), not once per job and field on every read of 10,000 jobs.
_STORED_DURATIONS: dict[str, float] = {}


def _stored_duration(value: Any, key: str) -> float:
    if isinstance(value, str):
        seconds = _STORED_DURATIONS.get(value)
        if seconds is None:
            seconds = parse_duration(value, field=key)  # raises, naming the field, on a bad one
            if len(_STORED_DURATIONS) < 4096:
                _STORED_DURATIONS[value] = seconds
        return seconds
    return parse_duration(value, field=key)


_DURATION_TEXTS: dict[float, str] = {}


def _duration_text(seconds: float) -> str:
    """format_duration, once per distinct value per process (a store holds few)."""
    text = _DURATION_TEXTS.get(seconds)
    if text is None:
        text = format_duration(seconds)  # raises on NaN and infinities: never stored
        if len(_DURATION_TEXTS) < 4096:
            _DURATION_TEXTS[seconds] = text
    return text


def _stored_enum(kind: type[Enum], value: Any) -> Any:
    member = kind._value2member_map_.get(value) if isinstance(value, str) else None
    return member if member is not None else kind(value)  # kind(value) raises on a bad one


CHAIN_FIELDS = ("after", "requires")
OPERATOR_FIELDS = ("user", "env_file", "limits", "keep_runs", "keep_log")
# The limits a job may set, in the order they are applied and shown.
LIMIT_NAMES = ("nice", "memory", "cpu", "nofile", "nproc")
ALERT_FIELDS = ("alert_after", "notify")

# from_dict runs once per job on every read command: fields() per call was a fifth of it.
_ENUM_FIELDS: tuple[tuple[str, type[Enum]], ...] = (("overlap", Overlap), ("catchup", Catchup),
                                                     ("requires", Requires))
_SPEC_FIELD_ORDER = tuple(f.name for f in fields(JobSpec))
_SPEC_FIELDS = frozenset(_SPEC_FIELD_ORDER)
# The fields whose type can hold an enum, a tuple or a dict: to_dict converts these (the
# others hold str, int, bool or None, or are durations and `at`, converted on their own).
_CONVERTED_FIELDS = tuple(f.name for f in fields(JobSpec) if f.name not in DURATION_FIELDS and f.name != "at"
                          and any(word in str(f.type) for word in ("tuple", "dict", "Overlap", "Catchup",
                                                                   "Requires", "Any")))

_SPEC_REQUIRED = frozenset(f.name for f in fields(JobSpec) if f.default is MISSING and f.default_factory is MISSING)
# The defaults of the fields that have one; a factory (env's) is called per spec.
_SPEC_DEFAULTS = {f.name: f.default for f in fields(JobSpec) if f.default is not MISSING}
_SPEC_FACTORIES = tuple((f.name, f.default_factory) for f in fields(JobSpec) if f.default_factory is not MISSING)
# Every field in field order, with its default (None for the required ones and those with
# a factory: from_dict always sets both kinds).
_SPEC_TEMPLATE = {f.name: _SPEC_DEFAULTS.get(f.name) for f in fields(JobSpec)}
# The keys of a stored job that sets no chain, operator or alerting field (is_stored_form).
_PLAIN_ENTRY_KEYS = frozenset(_SPEC_FIELD_ORDER) - set(CHAIN_FIELDS) - set(OPERATOR_FIELDS) - set(ALERT_FIELDS) \
    | {"state"}


def command_text(command: str | tuple[str, ...] | None) -> str:
    """How a command reads to a human."""
    if command is None:
        return ""
    if isinstance(command, str):
        return command
    import shlex

    return shlex.join(command)
