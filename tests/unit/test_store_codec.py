"""The store's fast codec writes the bytes the standard library wrote, and reads what it read.

The reference below is the store format as it was written before msgspec (json.dumps per
value, one top-level key and one job per line): every store on disk has these bytes.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronctl.jobs.state import entry_from, new_state
from cronctl.models import JobSpec
from cronctl.paths import open_home
from cronctl.store.jsonstore import Store, empty_document, parse, serialize


def reference_dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def reference_serialize(doc: dict[str, Any]) -> bytes:
    """The store's byte form, spelled with json.dumps alone."""
    lines = []
    for key in sorted(doc):
        value = doc[key]
        if key == "jobs" and value:
            body = ",\n".join(f"  {reference_dumps(name)}: {reference_dumps(value[name])}" for name in sorted(value))
            lines.append(f' "jobs": {{\n{body}\n }}')
        else:
            lines.append(f" {reference_dumps(key)}: {reference_dumps(value)}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode("utf-8")


def ten_thousand_jobs() -> dict[str, Any]:
    """A 10,000-job document shaped as `apply` and the loop shape it, with floats of every size."""
    now = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    doc = empty_document()
    doc["rev"] = 4242
    doc["counters"] = {"run": 123456}
    awkward_floats = [0.5, 1e-05, 2.1457672119140625e-05, 1e16, 1.5e17, 1733160000.123456, 0.0001, -0.0, 5e-324]
    for index in range(10_000):
        spec = JobSpec(name=f"job-{index:05d}", command=f"echo 'job {index}: ünïcode \u2028 \"q\"'", cron=None,
                       every=3600.0)
        state = new_state(now, now + timedelta(hours=1))
        state["last_duration"] = awkward_floats[index % len(awkward_floats)]
        state["last_exit_code"] = index % 3 - 1
        state["last_reason"] = "c0ffee 1e5 0.00001" if index % 7 == 0 else None
        doc["jobs"][spec.name] = entry_from(spec, state)
    return doc


def test_a_10k_job_store_has_the_bytes_the_standard_library_wrote(tmp_path: Path) -> None:
    doc = ten_thousand_jobs()
    expected = reference_serialize(doc)
    assert serialize(doc) == expected
    # And through a real transaction: written, read back, rewritten with nothing changed.
    paths = open_home(tmp_path / "home")
    store = Store(paths)
    with store.transaction() as stored:
        stored.update(json.loads(expected))
    written = paths.store.read_bytes()
    assert written == reference_serialize({**doc, "rev": 1})  # rev is the store's to count
    with store.transaction() as stored:
        stored["jobs"]["job-00000"] = json.loads(json.dumps(stored["jobs"]["job-00000"]))
    assert paths.store.read_bytes() == written


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(jobs=st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=5),
       counters=st.dictionaries(st.text(max_size=5), json_values, max_size=3))
def test_any_json_document_has_the_bytes_the_standard_library_wrote(jobs: dict[str, Any],
                                                                    counters: dict[str, Any]) -> None:
    doc = {"version": 1, "rev": 3, "jobs": jobs, "counters": counters}
    try:
        expected = reference_serialize(doc)
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 store can hold it, before or now
        with pytest.raises(UnicodeEncodeError):
            serialize(doc)
        return
    assert serialize(doc) == expected


@settings(max_examples=300, deadline=None)
@given(value=json_values)
def test_parse_reads_any_stored_value_as_json_loads_does(value: Any) -> None:
    raw = reference_dumps(value).encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return  # not a store a UTF-8 writer could have written
    parsed = parse(raw)
    assert parsed == expected
    assert reference_dumps(parsed) == reference_dumps(expected)  # 1, 1.0 and true stay apart


def test_an_old_store_in_any_layout_reads_and_is_rewritten_in_the_store_form(tmp_path: Path) -> None:
    paths = open_home(tmp_path / "home")
    old = {"version": 1, "rev": 7, "counters": {"run": 2}, "jobs": {"a": {"command": "true", "x": 1e-05}}}
    paths.store.write_text(json.dumps(old, indent=4))
    store = Store(paths)
    assert store.read() == old
    with store.transaction() as doc:
        doc["counters"]["run"] = 3
    assert paths.store.read_bytes() == reference_serialize({**old, "rev": 8, "counters": {"run": 3}})


def test_parse_keeps_what_json_loads_accepts_beyond_json_and_its_errors() -> None:
    assert math.isnan(parse(b'{"x": NaN}')["x"])
    assert parse(b'"\\ud800"') == "\ud800"
    with pytest.raises(json.JSONDecodeError, match="Expecting value"):
        parse(b'{"x": }')
    with pytest.raises(UnicodeDecodeError):
        parse(b'"\xff"')


def test_same_bytes_compares_parts_with_data_as_if_joined() -> None:
    from cronctl.store.codec import same_bytes

    assert same_bytes([b"ab", b"", b"cd"], b"abcd")
    assert not same_bytes([b"ab", b"ce"], b"abcd")  # same length, one byte differs
    assert not same_bytes([b"ab", b"c"], b"abcd")
    assert not same_bytes([b"abcd", b"e"], b"abcd")
