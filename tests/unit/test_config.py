from __future__ import annotations

from pathlib import Path

import pytest

from cronctl.jobs.jobfile import load_jobs_file
from cronctl.errors import ConfigError
from cronctl.models import Catchup, Overlap

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_jobs_file(path)
    return info.value.problems


def test_example_file_is_valid_and_uses_every_field() -> None:
    loaded = load_jobs_file(REPO / "jobs.example.yaml")
    used = set()
    for spec in loaded.specs:
        used |= {k for k, v in spec.to_dict().items() if v not in (None, {}, 0, 0.0, False)}
    for field in ("cron", "every", "at", "timezone", "command", "cwd", "env", "timeout", "kill_grace",
                  "starting_deadline", "retries", "retry_delay", "repeat", "jitter", "grace", "on_failure",
                  "paused", "after", "requires", "keep_runs", "keep_log", "limits"):
        assert field in used, field
    # user and env_file need root and a file of this host: shown commented, not set.
    text = (REPO / "jobs.example.yaml").read_text()
    assert "# user: " in text and "# env_file: " in text
    overlaps = {s.overlap for s in loaded.specs}
    assert {Overlap.SKIP, Overlap.ALLOW, Overlap.REPLACE} <= overlaps


def test_defaults_apply_and_jobs_override_them(tmp_path: Path) -> None:
    path = write(tmp_path, """
defaults: {timezone: Europe/Berlin, timeout: 5m, catchup: skip}
jobs:
  - {name: a, cron: "0 3 * * *", command: "true"}
  - {name: b, every: 30s, command: ["true"], timeout: 0}
""")
    a, b = load_jobs_file(path).specs
    assert (a.timezone, a.timeout, a.catchup) == ("Europe/Berlin", 300.0, Catchup.SKIP)
    assert b.timeout == 0.0 and b.command == ("true",)
    assert a.source == str(path.absolute())


def test_every_problem_is_reported_with_file_line_job_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, """jobs:
  - name: good
    every: 1m
    command: "true"
  - name: bad-one
    cron: "0 0 32 * *"
    timezone: Mars/Base
    command: "true"
    timout: 5m
  - name: bad-two
    every: 5x
    command: ""
    overlap: sometimes
  - name: good
    every: 1m
    command: "true"
""")
    problems = problems_of(path)
    text = "\n".join(problems)
    assert f"{path}:6: job 'bad-one': field 'cron'" in text and "32" in text
    assert f"{path}:7: job 'bad-one': field 'timezone'" in text and "Mars/Base" in text
    assert f"{path}:9: job 'bad-one': field 'timout': unknown field (did you mean 'timeout'?)" in text
    assert f"{path}:11: job 'bad-two': field 'every'" in text and "5x" in text
    assert f"{path}:12: job 'bad-two': field 'command': is empty" in text
    assert f"{path}:13: job 'bad-two': field 'overlap'" in text and "skip | allow | replace" in text
    assert f"{path}:14: job 'good': field 'name': duplicate name (first defined at line 2)" in text
    assert len(problems) == 7


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ('{name: "Bad Name", every: 1m, command: x}', "name", "not a valid name"),
        ('{name: a, command: x}', "cron", "missing schedule"),
        ('{name: a, every: 1m, cron: "* * * * *", command: x}', "every", "exactly one of"),
        ('{name: a, every: 1m}', "command", "missing"),
        ('{name: a, cron: "0 0 30 2 *", command: x}', "cron", "never"),
        ('{name: a, every: 1m, command: x, retries: -1}', "retries", "at least 0"),
        ('{name: a, every: 1m, command: x, repeat: 0}', "repeat", "at least 1"),
        ('{name: a, every: 1m, command: x, env: {CRONCTL_JOB: y}}', "env", "reserved"),
        ('{name: a, every: 1m, command: x, paused: maybe}', "paused", "true or false"),
        ('{name: a, at: "not a time", command: x}', "at", "not a time"),
        ('{name: a, at: "2030-01-01T00:00:00Z", repeat: 2, command: x}', "repeat", "one-shot"),
        ('{name: a, every: 10ms, command: x}', "every", "at least"),
        ('{name: a, every: 1m, command: [], }', "command", "argv"),
    ],
)
def test_bad_field_is_named(tmp_path: Path, entry: str, field: str, words: str) -> None:
    path = write(tmp_path, f"jobs:\n  - {entry}\n")
    problems = problems_of(path)
    assert any(f"field '{field}'" in p and words in p for p in problems), problems


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  - name: a\n    every: [1m\n")
    (problem,) = problems_of(path)
    assert problem.startswith(f"{path}:") and "invalid YAML" in problem


def test_duplicate_yaml_key_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  - name: a\n    every: 1m\n    every: 2m\n    command: x\n")
    (problem,) = problems_of(path)
    assert "duplicate key 'every'" in problem and f"{path}:4" in problem


def test_unknown_top_level_key_and_bad_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "job: []\ndefaults: {name: x, timeout: nope}\njobs: []\n")
    text = "\n".join(problems_of(path))
    assert "unknown top-level key 'job'" in text
    assert "field 'name' cannot have a default" in text


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path / "nope.yaml")
    assert problem.endswith("nope.yaml: no such file")


def test_relative_cwd_is_resolved_against_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  - {name: a, every: 1m, command: x, cwd: work}\n")
    (spec,) = load_jobs_file(path).specs
    assert spec.cwd == str(tmp_path / "work")


def test_spec_round_trips_through_its_store_dict(tmp_path: Path) -> None:
    from cronctl.models import JobSpec

    for spec in load_jobs_file(REPO / "jobs.example.yaml").specs:
        assert JobSpec.from_dict(spec.to_dict()) == spec
