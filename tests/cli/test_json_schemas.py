"""Every --json output validates against its documented schema in docs/schemas/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def validator(name: str) -> Draft202012Validator:
    resources = []
    for path in SCHEMAS.glob("*.schema.json"):
        schema = json.loads(path.read_text())
        resources.append((schema["$id"], Resource.from_contents(schema)))
    registry = Registry().with_resources(resources)
    return Draft202012Validator(json.loads((SCHEMAS / f"{name}.schema.json").read_text()), registry=registry)


def check(name: str, data: Any) -> None:
    errors = sorted(validator(name).iter_errors(data), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


@pytest.fixture
def populated(cli, tmp_path: Path):  # type: ignore[no-untyped-def]
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("""jobs:
  - {name: hourly, cron: "0 * * * *", timezone: Europe/Berlin, command: "true", retries: 1, env: {A: b}}
  - {name: often, every: 30s, command: [echo, hi], overlap: allow, repeat: 5, jitter: 2s}
  - {name: once, at: "2030-01-01T00:00:00Z", command: "false", paused: true}
""")
    assert cli("apply", "-f", str(jobs)).code == 0
    assert cli("force-run", "often").code == 0
    return jobs


@pytest.mark.slow
def test_every_json_output_matches_its_schema(cli, populated: Path) -> None:  # type: ignore[no-untyped-def]
    outputs = {
        "list": cli("list", "--json"),
        "job": cli("show", "often", "--json"),
        "status": cli("status", "--json"),
        "history": cli("history", "--json"),
        "next": cli("next", "-n", "3", "--json"),
        "apply": cli("apply", "-f", str(populated), "--dry-run", "--json"),
        "audit": cli("audit", "--json"),
        "force-run": cli("force-run", "often", "--wait", "--json"),
        "doctor": cli("doctor", "--json"),
    }
    for name, result in outputs.items():
        assert result.code in (0, 1), (name, result.err)
        check(name, result.json())
    assert outputs["history"].json()["runs"], "a run was recorded"


def test_schemas_are_valid_json_schema() -> None:
    for path in SCHEMAS.glob("*.schema.json"):
        Draft202012Validator.check_schema(json.loads(path.read_text()))
