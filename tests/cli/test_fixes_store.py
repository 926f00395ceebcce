"""Issue 15, items 6 and 10: a lost jobs.json and hand-edited stores are named, never guessed.

Every test edits the files of a real home, then runs the CLI in-process through its
real entry point and checks the exit code, the one-line message and that no file changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

Edit = Callable[[dict[str, Any]], None]


def _files(home: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(home.iterdir()) if p.name.startswith("jobs.json")}


def _add_two_jobs(cli: Any) -> None:
    assert cli("add", "backup", "--cron", "0 3 * * *", "--", "true").code == 0
    assert cli("add", "report", "--every", "5m", "--", "true").code == 0


def _assert_one_clean_error(result: Any, *words: str) -> None:
    assert result.code == 1, result
    assert result.err.startswith("cronctl: error: "), result.err
    assert result.err.count("\n") == 1, result.err
    assert "Traceback" not in result.err and "internal error" not in result.err
    for word in words:
        assert word in result.err, (word, result.err)


# --- item 6: a deleted jobs.json ------------------------------------------------------------


def test_a_deleted_store_beside_its_backup_is_an_error_that_names_the_recovery(cli: Any, home: Path) -> None:
    _add_two_jobs(cli)
    (home / "jobs.json").unlink()
    before = _files(home)

    for args in (("list",), ("status",), ("add", "third", "--every", "1h", "--", "true"), ("remove", "backup")):
        _assert_one_clean_error(cli(*args), str(home / "jobs.json"), "cronctl doctor --repair", "jobs.json.bak")
    assert _files(home) == before  # the backup was not replaced by an empty document's

    doctor = cli("doctor")
    assert doctor.code == 1 and "missing" in doctor.out
    repaired = cli("doctor", "--repair")
    assert repaired.code == 0, repaired
    assert [job["name"] for job in cli("list", "--json").json()["jobs"]] == ["backup"]  # the last good copy


def test_a_new_home_still_reads_as_empty_even_after_a_transaction_that_changed_nothing(cli: Any, home: Path) -> None:
    assert cli("list").code == 0
    assert cli("pause", "nosuch").code == 1  # creates jobs.lock, writes no store
    assert (home / "jobs.lock").exists() and not (home / "jobs.json").exists()
    assert cli("list").code == 0
    assert cli("add", "first", "--every", "1h", "--", "true").code == 0


def test_starting_empty_on_purpose_is_moving_the_backup_away(cli: Any, home: Path) -> None:
    _add_two_jobs(cli)
    (home / "jobs.json").unlink()
    (home / "jobs.json.bak").rename(home / "old-jobs.json.bak")
    # The audit log still shows jobs were defined (issue 26): refused as with a backup.
    refused = cli("list")
    assert refused.code == 1 and "audit log" in refused.err and "move audit.jsonl and runs/ away" in refused.err
    (home / "audit.jsonl").rename(home / "old-audit.jsonl")
    assert cli("list").code == 0
    assert cli("add", "fresh", "--every", "1h", "--", "true").code == 0


def test_a_missing_store_with_no_backup_but_run_histories_is_refused(cli: Any, home: Path) -> None:
    _add_two_jobs(cli)
    history = home / "runs" / "a" / "history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text("{}\n")
    for name in ("jobs.json", "jobs.json.bak", "audit.jsonl"):
        (home / name).unlink()
    refused = cli("add", "fresh", "--every", "1h", "--", "true")
    assert refused.code == 1 and "run histories" in refused.err and not (home / "jobs.json").exists()


def test_paused_yes_in_a_hand_edited_store_is_refused(cli: Any, home: Path) -> None:
    import json

    _add_two_jobs(cli)
    for place in ("job", "state"):
        doc = json.loads((home / "jobs.json").read_text())
        name = sorted(doc["jobs"])[0]
        (doc["jobs"][name] if place == "job" else doc["jobs"][name]["state"])["paused"] = "yes"
        (home / "jobs.json").write_text(json.dumps(doc))
        result = cli("list")
        assert result.code == 1 and "'yes', not true or false" in result.err and f"job '{name}'" in result.err
        doc["jobs"][name]["paused"] = False
        doc["jobs"][name]["state"]["paused"] = False
        (home / "jobs.json").write_text(json.dumps(doc))


# --- item 10: hand-edited stores ------------------------------------------------------------


def _set(field: str, value: Any) -> Edit:
    return lambda entry: entry.__setitem__(field, value)


def _drop(field: str) -> Edit:
    return lambda entry: entry.pop(field)


def _set_state(field: str, value: Any) -> Edit:
    return lambda entry: entry["state"].__setitem__(field, value)


HAND_EDITS = {
    "bad cron": ("backup", _set("cron", "99 * * * *"), "cron", "minute value 99"),
    "bad duration": ("report", _set("every", "soon"), "every", "'soon'"),
    "bad timeout": ("report", _set("timeout", "zz"), "timeout", "'zz'"),
    "bad zone": ("backup", _set("timezone", "Mars/Olympus"), "timezone", "Mars/Olympus"),
    "bad next_run_at": ("report", _set_state("next_run_at", "tomorrow"), "state.next_run_at", "'tomorrow'"),
    "missing command": ("backup", _drop("command"), "command", "missing"),
    "missing state": ("report", _drop("state"), "state", "missing"),
    "bad overlap": ("report", _set("overlap", "sometimes"), "overlap", "'sometimes'"),
}


def _hand_edit(home: Path, name: str, edit: Edit) -> None:
    path = home / "jobs.json"
    doc = json.loads(path.read_text())
    edit(doc["jobs"][name])
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("case", sorted(HAND_EDITS))
def test_a_hand_edited_job_is_named_with_its_field_by_every_reader(cli: Any, home: Path, case: str) -> None:
    name, edit, field, problem = HAND_EDITS[case]
    _add_two_jobs(cli)
    _hand_edit(home, name, edit)
    before = _files(home)

    for args in (("list",), ("status",), ("status", "--json"), ("show", name)):
        _assert_one_clean_error(cli(*args), f"jobs.json: job '{name}': field '{field}': ", problem)
    assert _files(home) == before


@pytest.mark.parametrize("case", sorted(HAND_EDITS))
def test_doctor_finds_the_hand_edited_job_instead_of_crashing(cli: Any, home: Path, case: str) -> None:
    name, edit, field, problem = HAND_EDITS[case]
    _add_two_jobs(cli)
    _hand_edit(home, name, edit)
    before = _files(home)

    result = cli("doctor", "--json")
    assert result.code == 1, result
    bad = [f for f in result.json()["findings"] if f["check"] == "jobs"]
    assert len(bad) == 1 and bad[0]["level"] == "action", bad
    assert f"job '{name}': field '{field}': " in bad[0]["message"] and problem in bad[0]["message"]
    assert _files(home) == before


def test_doctor_says_the_stored_jobs_are_fine_when_they_are(cli: Any) -> None:
    _add_two_jobs(cli)
    findings = cli("doctor", "--json").json()["findings"]
    assert [f["level"] for f in findings if f["check"] == "jobs"] == ["ok"]
