"""models.is_stored_form: True only when to_dict of the spec read from an entry gives that
entry's fields back, value for value (then `list --json` shows the stored entry as it is)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronctl.jobs.state import JobView, entry_from, new_state
from cronctl.models import DURATION_FIELDS, JobSpec, is_stored_form

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def plain_entry(**fields: Any) -> dict[str, Any]:
    spec = JobSpec(name="job-a", command="true", every=3600.0)
    entry = json.loads(json.dumps(entry_from(spec, new_state(NOW, NOW))))  # as a store read gives it
    entry.update(fields)
    return entry


def agrees(entry: dict[str, Any]) -> bool:
    """is_stored_form(entry), checked against the rebuild it stands for."""
    spec = JobView.from_entry(entry).spec
    said = is_stored_form(entry)
    if said:
        assert {k: v for k, v in entry.items() if k != "state"} == spec.to_dict()
        assert json.dumps(entry, sort_keys=True) == json.dumps(entry_from(spec, entry["state"]), sort_keys=True)
    return said


def test_what_apply_and_add_write_is_the_stored_form() -> None:
    assert agrees(plain_entry())
    assert agrees(plain_entry(every=None, cron="5 4 * * *", timezone="Europe/Berlin", command=["echo", "ü"],
                              env={"A": "1"}, overlap="allow", catchup="skip", timeout="1d1s500ms", grace="1m30s",
                              starting_deadline="1m", retries=3, repeat=2, jitter="10s", on_failure=["x", "y"],
                              paused=True, source="/etc/jobs.yaml", cwd="/tmp"))
    assert agrees(plain_entry(every=None, at="2026-12-24T09:00:00.000+00:00"))


@pytest.mark.parametrize("fields", [
    {"every": "60m"}, {"timeout": "3600s"}, {"jitter": 0}, {"kill_grace": "10000ms"},
    {"every": None, "at": "2026-12-24T09:00:00+00:00"}, {"every": None, "at": "2026-12-24T10:00:00.000+01:00"},
    {"after": []}, {"requires": "success"}, {"user": None}, {"limits": {}}, {"alert_after": 1}, {"notify": None},
    {"unknown_key": 1},
])
def test_an_entry_to_dict_would_change_is_not(fields: dict[str, Any]) -> None:
    assert not agrees(plain_entry(**fields))


def test_an_entry_missing_a_plain_field_is_not() -> None:
    entry = plain_entry()
    del entry["cwd"]
    assert not agrees(entry)


@pytest.mark.parametrize("fields", [{"after": ["x"]}, {"user": "nobody"}, {"alert_after": 3},
                                    {"notify": [{"url": "https://example.invalid/h"}]}])
def test_the_shapes_with_optional_fields_are_rebuilt(fields: dict[str, Any]) -> None:
    assert not is_stored_form(plain_entry(**fields))  # to_dict decides those keys: the caller rebuilds


DURATION_TEXT = st.sampled_from(["1h", "60m", "1m30s", "90s", "0s", "500ms", "1d1s500ms", "2h", "7200s", "10s",
                                 "1h0m", "0.5s"])


@settings(max_examples=300)
@given(st.fixed_dictionaries({name: st.none() | DURATION_TEXT for name in DURATION_FIELDS if name != "every"}),
       DURATION_TEXT)
def test_durations_count_only_when_spelled_as_to_dict_spells_them(durations: dict[str, Any], every: str) -> None:
    entry = plain_entry(**durations, every=every)
    try:
        JobView.from_entry(entry)
    except Exception:  # noqa: BLE001  # a spelling the store refuses: not this test's business
        return
    agrees(entry)


def test_list_json_shows_what_the_rebuild_showed(cli, home, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A store with plain, hand-spelled, chain and alerting jobs: the same bytes either way."""
    from cronctl.cli import views

    assert cli("add", "plain", "--every", "1h", "--", "true").code == 0
    assert cli("add", "spelled", "--every", "1h", "--", "true").code == 0
    assert cli("add", "at-job", "--at", "2030-01-01T00:00:00Z", "--", "true").code == 0
    assert cli("add", "alerting", "--cron", "5 4 * * *", "--alert-after", "3",
               "--notify", "https://example.invalid/hook/secret", "--", "true").code == 0
    assert cli("add", "chained", "--after", "plain", "--", "true").code == 0
    assert cli("add", "jittered", "--every", "1h", "--jitter", "10m", "--", "true").code == 0
    assert cli("add", "paused", "--every", "1h", "--paused", "--", "true").code == 0
    for name in ("slot-no-ms", "slot-offset", "slot-z"):
        assert cli("add", name, "--every", "1h", "--", "true").code == 0
    path = home / "jobs.json"
    doc = json.loads(path.read_text())
    doc["jobs"]["spelled"]["every"] = "60m"
    doc["jobs"]["at-job"]["at"] = "2030-01-01T01:00:00+01:00"
    doc["jobs"]["slot-no-ms"]["state"]["next_run_at"] = "2030-01-01T00:00:00+00:00"
    doc["jobs"]["slot-offset"]["state"]["next_run_at"] = "2030-01-01T01:00:00.000+01:00"
    doc["jobs"]["slot-z"]["state"]["next_run_at"] = "2030-01-01T00:00:00.000Z"
    path.write_text(json.dumps(doc))
    shown = cli("list", "--json")
    assert '"next_fire_at": "2030-01-01T00:00:00.000+00:00"' in shown.out
    monkeypatch.setattr(views, "is_stored_form", lambda entry: False)
    rebuilt = cli("list", "--json")
    assert shown.code == rebuilt.code == 0
    assert shown.out == rebuilt.out
    assert '"every": "1h"' in shown.out and "secret" not in shown.out
