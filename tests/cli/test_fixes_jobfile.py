"""Issue 15, item 11: a past one-shot instant is warned about; a YAML alias bomb is refused."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from cronctl.errors import ConfigError
from cronctl.jobs.jobfile import load_jobs_file
from tests.conftest import cronctl_bin, subprocess_env

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)

PAST_AND_FUTURE = """\
jobs:
  - name: cleanup
    every: 1h
    command: "true"
  - name: migrate
    at: 2026-05-31T09:00:00+02:00
    command: "true"
  - name: launch
    at: 2026-12-24T09:00:00+01:00
    command: "true"
"""


def _laughs(levels: int) -> str:
    """The classic billion-laughs document: each level is nine aliases of the one below."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    lines.append("jobs:")
    lines.append(f"  - {{name: x, every: 1h, command: 'true', env: {{A: *l{levels}}}}}")
    return "\n".join(lines) + "\n"


def test_a_past_at_is_a_warning_naming_file_line_job_and_instant(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(PAST_AND_FUTURE)
    loaded = load_jobs_file(path)
    assert loaded.warnings(NOW) == [
        f"{path}:6: job 'migrate': field 'at': 2026-05-31T07:00:00.000+00:00 is in the past; "
        "a running loop fires it at once"
    ]
    assert loaded.warnings(datetime(2026, 1, 1, tzinfo=timezone.utc)) == []


def test_validate_and_apply_refuse_a_new_past_at_unless_allow_past(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(PAST_AND_FUTURE)
    for command in ("validate", "apply"):  # issue 26: a past `at` fires at once: refused, naming file and line
        refused = cli(command, "-f", str(path))
        assert refused.code == 1 and refused.out == ""
        assert refused.err.startswith(f"cronctl: error: {path}:6: job 'migrate': field 'at': ") and \
            "--allow-past" in refused.err
    assert cli("list", "--json").json()["jobs"] == []
    warning = f"cronctl: warning: {path}:6: job 'migrate': field 'at': "
    for command in ("validate", "apply"):
        result = cli(command, "-f", str(path), "--allow-past")
        assert result.code == 0
        assert warning in result.err and "is in the past" in result.err
        assert "warning" not in result.out
    # stored already: applying the same file again needs no flag (its one-shot keeps its catch-up)
    assert cli("apply", "-f", str(path)).code == 0
    assert "warning" not in cli("apply", "-f", str(path), "--json").out  # --json keys stay as they were


def test_a_billion_laughs_document_is_refused_at_once_naming_the_file(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_laughs(9))
    # Not a timing assertion: before the limit this ran for minutes, so a timeout is the failure.
    result = subprocess.run([*cronctl_bin(), "validate", "-f", str(path)], env=subprocess_env(home),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result
    assert result.stderr.startswith(f"cronctl: error: {path}: refused: ")
    assert "alias" in result.stderr and "Traceback" not in result.stderr


def test_the_limit_raises_a_config_error_in_process(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_laughs(7))  # 9**8 values: far past the limit, cheap to refuse
    with pytest.raises(ConfigError, match="aliases expand to more than"):
        load_jobs_file(path)


def test_ordinary_anchors_still_load(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  - {name: first, every: 1h, command: 'true', env: &env {A: '1', B: '2'}}\n"
        + "".join(f"  - {{name: job{n}, every: 1h, command: 'true', env: *env}}\n" for n in range(50))
    )
    specs = load_jobs_file(path).specs
    assert len(specs) == 51 and specs[-1].env == {"A": "1", "B": "2"}
