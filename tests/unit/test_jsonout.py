"""--json written by msgspec (cli/jsonout.py) must be json.dumps's very bytes, or not be
written that way at all: the parser's word (codec.spelled_alike) decides, never a walk."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cronctl.cli import jsonout, render
from cronctl.store import codec


def stdlib(data: Any, indent: int) -> bytes:
    return json.dumps(data, sort_keys=True, default=str, ensure_ascii=False, indent=indent or None).encode()


@pytest.fixture
def fresh_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has parsed nothing yet (another test may have parsed a NaN)."""
    monkeypatch.setattr(codec._Spelling, "alike", True)


def parsed_agrees(text: str) -> bool:
    """Parse text as the store does; when store_json answers, it must be json.dumps's bytes."""
    codec._Spelling.alike = True
    data = codec.parse(text.encode("utf-8", "surrogatepass"))
    answered = [jsonout.store_json({"jobs": [data, {"health": "ok"}]}, indent) for indent in (0, 2)]
    for indent, got in zip((0, 2), answered, strict=True):
        if got is not None:
            assert got == stdlib({"jobs": [data, {"health": "ok"}]}, indent)
    return answered[0] is not None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=25,
)


@settings(max_examples=500)
@given(JSON)
def test_any_parsed_document_gives_the_stdlib_bytes_or_none(data: Any) -> None:
    try:
        parsed_agrees(json.dumps(data, ensure_ascii=False))
    finally:
        codec._Spelling.alike = True


@settings(max_examples=200)
@given(st.dictionaries(st.text(), st.text() | st.integers(-(2**63), 2**63 - 1) | st.booleans() | st.none()
                       | st.floats(min_value=1e-4, max_value=1e15)))
def test_plain_documents_take_the_fast_way(data: dict[str, Any]) -> None:
    try:
        assert parsed_agrees(json.dumps(data, ensure_ascii=False))
    finally:
        codec._Spelling.alike = True


@pytest.mark.parametrize("text", ["1e-05", "2.5e-05", "1e16", "1.5e17", "NaN", "Infinity", "-Infinity", "1e400",
                                  '"\\udcff"'])
def test_a_value_msgspec_writes_otherwise_turns_the_fast_way_off(text: str, fresh_parser: None) -> None:
    codec.parse(b'{"a": [1, ' + text.encode() + b"]}")
    assert not codec.spelled_alike()
    assert jsonout.store_json({"a": 1}, 0) is None


@pytest.mark.parametrize("text", ["0.5", "0.0001", "-0.0", "0.0", "1733160000.123456", "9999999999999998.0"])
def test_floats_spelled_alike_keep_it(text: str, fresh_parser: None) -> None:
    data = codec.parse(b'{"a": ' + text.encode() + b"}")
    assert codec.spelled_alike()
    assert jsonout.store_json(data, 0) == stdlib(data, 0)


def test_print_json_from_the_store_writes_the_same_bytes(fresh_parser: None, monkeypatch: pytest.MonkeyPatch) -> None:
    data = codec.parse('{"jobs": [{"name": "é ✓ \\u2028 \\u001b", "every": "1h", "last_duration": 0.125}]}'.encode())
    for tty in (False, True):
        for from_store in (False, True):
            raw = io.BytesIO()
            out = io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
            out.isatty = lambda tty=tty: tty  # type: ignore[method-assign]
            monkeypatch.setattr("sys.stdout", out)
            out.write("before\n")
            render.print_json(data, from_store=from_store)
            out.flush()
            assert raw.getvalue() == b"before\n" + stdlib(data, 2 if tty else 0) + b"\n"


def test_a_stream_not_in_utf8_gets_text(fresh_parser: None, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="latin-1", errors="replace", write_through=True)
    monkeypatch.setattr("sys.stdout", out)
    render.print_json(codec.parse('{"name": "✓"}'.encode()), from_store=True)
    out.flush()
    assert raw.getvalue() == '{"name": "?"}\n'.encode("latin-1")


@pytest.mark.parametrize("last_duration", [0.25, 1e-05])
def test_list_json_writes_what_json_dumps_wrote(cli, home: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                                 fresh_parser: None, last_duration: float) -> None:
    """Both ways give the same bytes: msgspec's for a store of plain values, json.dumps's
    for one whose runs left a float msgspec spells otherwise (the parser turned it off)."""
    assert cli("add", "job-a", "--every", "1h", "--", "true").code == 0
    assert cli("add", "job-b", "--cron", "5 4 * * *", "--tz", "Europe/Berlin", "--", "echo", "ünï ✓").code == 0
    path = home / "jobs.json"
    doc = json.loads(path.read_text())
    doc["jobs"]["job-a"]["state"]["last_duration"] = last_duration
    path.write_text(json.dumps(doc))
    codec._Spelling.alike = True
    fast = cli("list", "--json")
    assert codec.spelled_alike() is (last_duration == 0.25)
    monkeypatch.setattr(jsonout, "store_json", lambda data, indent: None)
    slow = cli("list", "--json")
    assert fast.code == slow.code == 0
    assert fast.out == slow.out
    assert fast.out == json.dumps(json.loads(fast.out), sort_keys=True, ensure_ascii=False) + "\n"
