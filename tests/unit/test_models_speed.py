"""JobSpec.from_dict sets the fields without the dataclass's __init__ (speed): the spec it
builds must be the one __init__ builds, field for field, for every shape of stored entry."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest

from cronctl.durations import format_duration
from cronctl.models import JobSpec, Overlap, Requires

ENTRIES: list[dict[str, Any]] = [
    {"name": "a", "command": "true"},
    {"name": "b", "command": ["echo", "hi"], "every": "1h", "timezone": "Europe/Berlin", "env": {"A": "1"},
     "timeout": "2h", "kill_grace": "5s", "overlap": "allow", "catchup": "skip", "starting_deadline": "1m",
     "retries": 3, "retry_delay": "30s", "repeat": 2, "jitter": "10s", "grace": "90s",
     "on_failure": ["notify", "x"], "paused": True, "source": "/etc/jobs.yaml", "state": {}},
    {"name": "c", "command": "x", "at": "2026-12-24T09:00:00.000+00:00", "cwd": "/tmp"},
    {"name": "d", "command": "x", "after": ["a", "b"], "requires": "done"},
    {"name": "e", "command": "x", "cron": "0 3 * * *", "unknown_key": 1},
    {"name": "f", "command": "x", "every": "90s", "user": "nobody", "env_file": "/etc/f.env",
     "limits": {"nofile": 1024}, "keep_runs": 5, "keep_log": 4096, "alert_after": 3,
     "notify": [{"url": "https://example.invalid/h", "on": ["failure"]}], "timeout": "1d1s500ms"},
    {"name": "g", "command": "x", "after": ["f"], "notify": [], "alert_after": 1, "limits": {}, "user": None},
]


def _by_init(entry: dict[str, Any]) -> JobSpec:
    spec = JobSpec.from_dict(entry)
    return JobSpec(**{f.name: getattr(spec, f.name) for f in fields(JobSpec)})


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry["name"])
def test_from_dict_builds_what_init_builds(entry: dict[str, Any]) -> None:
    spec = JobSpec.from_dict(entry)
    assert spec == _by_init(entry)
    assert vars(spec) == vars(_by_init(entry))
    assert JobSpec.from_dict(spec.to_dict()) == spec


def test_each_spec_gets_its_own_env_and_the_enums_and_tuples_of_init() -> None:
    one, two = JobSpec.from_dict({"name": "a", "command": "x"}), JobSpec.from_dict({"name": "b", "command": "x"})
    assert one.env == {} and one.env is not two.env
    spec = JobSpec.from_dict(ENTRIES[1])
    assert spec.overlap is Overlap.ALLOW and spec.command == ("echo", "hi") and spec.every == 3600.0
    assert JobSpec.from_dict(ENTRIES[3]).requires is Requires.DONE
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]  # still frozen


def test_an_entry_without_a_required_field_fails_as_init_does() -> None:
    with pytest.raises(TypeError, match="command"):
        JobSpec.from_dict({"name": "a"})


def test_durations_format_the_same_remembered_or_not() -> None:
    assert [format_duration(x) for x in (90, 90, 0.5, 86400 + 1.5, 0)] == ["1m30s", "1m30s", "500ms", "1d1s500ms",
                                                                          "0s"]
    with pytest.raises(ValueError):
        format_duration(float("nan"))


def _to_dict_before(spec: JobSpec) -> dict[str, Any]:
    """JobSpec.to_dict as it was written before it was made faster: the reference."""
    from enum import Enum

    from cronctl.models import ALERT_FIELDS, CHAIN_FIELDS, DURATION_FIELDS, OPERATOR_FIELDS
    from cronctl.timefmt import to_iso

    out: dict[str, Any] = {}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if f.name in CHAIN_FIELDS and not spec.after:
            continue
        if f.name in OPERATOR_FIELDS and not value:
            continue  # unset operator fields (SPEC §13) are left out
        if f.name in ALERT_FIELDS and value == f.default:
            continue  # alerting fields (SPEC §12) are written only when set
        if f.name in DURATION_FIELDS and value is not None:
            value = format_duration(value)
        elif f.name == "at":
            value = to_iso(value)
        elif isinstance(value, Enum):
            value = value.value
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, dict):
            value = dict(value)
        out[f.name] = value
    return out


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry["name"])
def test_to_dict_writes_what_it_wrote_before(entry: dict[str, Any]) -> None:
    spec = JobSpec.from_dict(entry)
    assert spec.to_dict() == _to_dict_before(spec)
    assert list(spec.to_dict()) == list(_to_dict_before(spec))  # the same keys in the same order
    assert spec.to_dict()["env"] is not spec.env
