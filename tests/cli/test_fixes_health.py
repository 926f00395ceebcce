"""Issue 15, item 4: a job that can never start, or whose every run fails, is stale.

The CLI tests force real runs in-process (a missing cwd is refused before anything is
spawned; `false` is a real child that fails at once); the unit tests build states by hand.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cronctl.jobs.health import job_health
from cronctl.jobs.state import JobView, new_state
from cronctl.models import JobSpec

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def _alive(_owner: dict[str, Any]) -> bool:
    return True


def _not_expired(_claim: dict[str, Any]) -> bool:
    return False


def _health(spec: JobSpec, **state: Any) -> Any:
    view = JobView(spec, {**new_state(T0, T0 + timedelta(hours=1)), **state})
    return job_health(view, T0 + timedelta(minutes=1), _alive, _not_expired)


def _status_json(cli: Any) -> dict[str, Any]:
    result = cli("status", "--json")
    assert result.code == 0, result
    data: dict[str, Any] = json.loads(result.out)
    return data


# --- blocked_config ------------------------------------------------------------------


def test_a_job_whose_cwd_is_missing_is_wedged_and_stale_naming_the_directory(cli: Any, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    assert cli("add", "report", "--every", "1h", "--cwd", str(missing), "--", "true").code == 0
    assert cli("force-run", "report").code == 0

    stale = cli("status", "--stale")
    assert stale.code == 3, stale
    assert "wedged" in stale.out and str(missing) in stale.out
    job = _status_json(cli)["jobs"][0]
    assert (job["state"], job["fault"]) == ("wedged", "job")
    assert str(missing) in job["reason"] and "blocked_config" in job["reason"]
    assert "cwd" in job["reason"]  # the fix: create it or change the job's cwd


def test_a_job_whose_executable_is_missing_is_wedged_naming_the_program(cli: Any, tmp_path: Path) -> None:
    program = str(tmp_path / "bin" / "no-such-program")
    assert cli("add", "report", "--every", "1h", "--", program, "--flag").code == 0
    assert cli("force-run", "report").code == 0

    assert cli("status", "--stale").code == 3
    job = _status_json(cli)["jobs"][0]
    assert job["state"] == "wedged" and program in job["reason"]


def test_blocked_config_is_over_once_a_run_starts_after_the_refusal() -> None:
    spec = JobSpec(name="report", command=("/bin/true",), every=3600.0, cwd="/gone")
    refused = {"run_id": "r1", "slot": "2026-03-01T11:00:00.000+00:00", "reason": "blocked_config",
               "ended_at": "2026-03-01T11:00:00.100+00:00"}
    blocked = _health(spec, last_not_started=refused, blocked="working directory '/gone' does not exist")
    assert (blocked.state, blocked.stale, blocked.fault) == ("wedged", True, "job")
    assert "'/gone'" in blocked.reason

    later = _health(spec, last_not_started=refused, last_run_at="2026-03-01T11:30:00.000+00:00",
                    last_status="success")
    assert (later.state, later.stale) == ("ok", False)


def test_a_refusal_for_another_reason_is_not_blocked_config() -> None:
    spec = JobSpec(name="report", command="true", every=3600.0)
    other = {"run_id": "r1", "slot": None, "reason": "spawn_failed", "ended_at": "2026-03-01T11:00:00.100+00:00"}
    assert _health(spec, last_not_started=other).state == "ok"


# --- every run fails -------------------------------------------------------------------


def test_failures_become_stale_at_alert_after_and_a_success_clears_it(cli: Any) -> None:
    assert cli("add", "flaky", "--every", "1h", "--alert-after", "3", "--", "false").code == 0
    for run in range(1, 4):
        assert cli("force-run", "flaky").code == 0
        job = _status_json(cli)["jobs"][0]
        assert job["state"] == "failing", job
        assert (job["consecutive_failures"], job["alert_after"]) == (run, 3)
        expected = 3 if run >= 3 else 0
        assert cli("status", "--stale").code == expected, f"after {run} failure(s)"
    assert "3 runs in a row failed" in _status_json(cli)["jobs"][0]["reason"]

    assert cli("edit", "flaky", "--", "true").code == 0
    assert cli("force-run", "flaky").code == 0
    assert _status_json(cli)["jobs"][0]["state"] == "ok"
    assert cli("status", "--stale").code == 0


def test_one_failure_is_stale_by_default_and_alert_after_waits_for_the_streak() -> None:
    spec = JobSpec(name="flaky", command="false", every=3600.0)
    one = _health(spec, last_status="error", last_exit_code=1, last_run_at="2026-03-01T11:59:00.000+00:00",
                  consecutive_failures=1)
    assert (one.state, one.stale, one.fault) == ("failing", True, "job")
    patient = spec.with_changes(alert_after=3)
    two = _health(patient, last_status="error", last_exit_code=1, last_run_at="2026-03-01T11:59:00.000+00:00",
                  consecutive_failures=2)
    assert (two.state, two.stale) == ("failing", False)
    three = _health(patient, last_status="error", last_exit_code=1, last_run_at="2026-03-01T11:59:00.000+00:00",
                    consecutive_failures=3)
    assert (three.state, three.stale) == ("failing", True)


def test_a_hand_edited_streak_that_is_not_a_number_is_ignored() -> None:
    spec = JobSpec(name="flaky", command="false", every=3600.0)
    odd = _health(spec, last_status="error", last_run_at="2026-03-01T11:59:00.000+00:00", consecutive_failures="9")
    assert (odd.state, odd.stale) == ("failing", False)  # 0 failures in a row: below any alert_after
