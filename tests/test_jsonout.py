"""plain_dumps (the fast --json text) must give json.dumps's very bytes, compact and
indented, or None: never other text."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from enum import Enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronctl.cli.jsonout import plain_dumps


def stdlib(data: Any, indent: int) -> str:
    return json.dumps(data, sort_keys=True, default=str, ensure_ascii=False, indent=indent or None)


def agrees(data: Any) -> bool:
    """True when plain_dumps answered (and then with stdlib's bytes), False when it declined."""
    answered = [plain_dumps(data, indent) for indent in (0, 2)]
    for indent, text in zip((0, 2), answered, strict=True):
        if text is not None:
            assert text == stdlib(data, indent)
    return answered[0] is not None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=400)
@given(JSON)
def test_any_json_value_gives_the_stdlib_bytes_or_none(data: Any) -> None:
    agrees(data)


@given(st.dictionaries(st.text(), st.text() | st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.none()))
def test_plain_values_take_the_fast_way(data: dict[str, Any]) -> None:
    assert agrees({"jobs": [data, {"nested": data}]})


@pytest.mark.parametrize("value", [1e16, 1e-5, 2.5e-05, math.nan, math.inf, -math.inf, (1, 2), {1, 2},
                                   datetime(2026, 1, 1, tzinfo=timezone.utc), b"x", "\udcff", {1: "int key"}])
def test_what_differs_is_declined(value: Any) -> None:
    assert not agrees({"a": [value]})


def test_enums_and_str_subclasses_are_declined() -> None:
    class Kind(str, Enum):
        A = "a"

    assert not agrees({"kind": Kind.A})


def test_a_job_document_takes_the_fast_way() -> None:
    doc = {"jobs": [{"name": "job-00001", "command": ["echo", "é ✓ \u2028 \x1b"], "env": {"Z": "1", "a": "2", "É": "3"},
                     "state": {"last_duration": 0.125, "claims": {}, "runs_started": 3, "mono": 12345.678},
                     "paused": False, "every": "1h", "next_fire_at": None}]}
    assert agrees(doc)
