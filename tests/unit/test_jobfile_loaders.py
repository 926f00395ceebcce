"""Jobs files are parsed by libyaml's C parser when PyYAML has it (issue 14: `apply -f` of
10,000 jobs): every document must come out exactly as PyYAML's pure-Python parser reads it.

The same values, the same line of every mapping and key (the `FILE:LINE:` of messages),
the same refusals with the same words. The C parser words its errors its own way, so a
document it refuses is read again by the pure one; these tests compare the loader
cronctl uses with the pure parser alone, on generated and hand-picked documents.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronctl.errors import ConfigError
from cronctl.jobs import yamlfile

PATH = Path("/jobs.yaml")

needs_libyaml = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")

# Characters where YAML parsers are known to part ways: byte order marks, the C1 line
# break, Unicode line separators, tabs, carriage returns, escapes, surrogates' neighbours.
TRICKY = ["\ufeff", "\x85", "\u2028", "\u2029", "\t", "\r", "\r\n", "\\x41", "\\U0001F600", "\\N", "\\_",
          "\ud7ff", "\ue000", "\ufffe", "\x7f", "\x1b", "é", "😀", "<<: *a", "&a", "*a", "!!str", "!!int",
          "? ", ": ", "- ", "---", "...", "%TAG ! tag:x,2000:\n", "|-\n", ">+\n", "'", '"', "#", "~", "0o17",
          "0x1F", "1_000", ".inf", "1e3", "2030-01-01", "2030-01-01 10:00:00", "y", "off", "=", "\n", "  "]

tricky_texts = st.lists(st.sampled_from(TRICKY + list("abc:{}[],-\n ")), max_size=40).map("".join)

# Valid documents of every shape, dumped in both styles, then one character changed.
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=12),
                    st.sampled_from(["every", "1h", "0 3 * * *", "2030-01-01T10:00:00Z", "off", "~", "- x"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
dumped = st.tuples(values, st.booleans()).map(
    lambda v: yaml.safe_dump(v[0], allow_unicode=True, default_flow_style=v[1], sort_keys=False))
mutated = dumped.flatmap(lambda text: st.tuples(st.just(text), st.integers(0, max(len(text) - 1, 0)),
                                                st.sampled_from(TRICKY + list(":{}[],-#&*!|>'\" \n")))
                         .map(lambda t: t[0][:t[1]] + t[2] + t[0][t[1] + 1:]))

# Hand-picked documents of the other suites (syntax errors, tags, anchors, odd keys).
SNIPPETS = [
    "jobs: [\n", "jobs:\n  - {? [a, b] : 1}\n", "jobs:\n  - &a [*a]\n", "jobs: !!python/object:os.system x\n",
    "jobs:\n  - {name: a, every: 1m, command: !!binary aGVsbG8=}\n", "jobs:\n  - {name: a, name: b}\n", "\t",
    "%YAML 9.9\n---\n", "jobs:\n  - {name: a, at: 2030-01-01 10:00:00, command: x}\n", "--- a\n--- b\n",
    "jobs: {? {a: 1} : 2}\n", "jobs:\n  - {name: a, every: 1m, command: x, 1: 2}\n", '"\\U10010000": 1\n',
    "[" * 3000 + "]" * 3000 + "\n",
    "jobs:\n  - {name: a, every: 1m, command: x, on_failure: &a [*a], env: &e {A: *e}}\n",
    "jobs:\n  - {name: a, every: 1m, command: x, retries: !!int }\n",
]


def outcome(parse: Any, text: str) -> tuple[str, Any]:
    """("ok", the value with every mapping's lines) or ("error", the messages)."""
    try:
        return "ok", shape(parse(text))
    except ConfigError as exc:
        # Where Python's stack runs out decides the words after "RecursionError" (one frame
        # more or less): not the parser's doing.
        return "error", [re.sub(r"RecursionError: .*", "RecursionError", problem) for problem in exc.problems]


def shape(value: Any) -> Any:
    """The value as comparable data, with the line marks cronctl's messages are made of."""
    if isinstance(value, dict):
        lines = (getattr(value, "line", None), sorted(getattr(value, "key_lines", {}).items()))
        return "map", type(value).__name__, lines, [(shape(k), shape(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple, set)):
        items = sorted(value, key=repr) if isinstance(value, set) else value
        return type(value).__name__, [shape(item) for item in items]
    return type(value).__name__, repr(value)


def used_loader(text: str) -> Any:
    return yamlfile.parse_yaml(PATH, text)


def pure_loader(text: str) -> Any:
    return yamlfile._load_yaml(PATH, text, yamlfile._PyLineLoader)


def as_read_from_a_file(text: str) -> str:
    # _read_text decodes strictly: a lone surrogate never reaches the parser.
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


@needs_libyaml
def test_the_c_parser_is_the_one_used_when_pyyaml_has_libyaml() -> None:
    assert issubclass(yamlfile._LineLoader, yaml.CSafeLoader)


@needs_libyaml
def test_a_big_file_has_the_same_values_and_lines_under_both_parsers() -> None:
    lines = ["defaults: {timezone: UTC}", "jobs:"]
    for index in range(300):
        lines += [f"  - name: job-{index:03d}", "    every: 1h", f'    command: ["echo", "{index}"]',
                  f"    env: {{A: '{index}', B: {index}}}"]
    text = "\n".join(lines) + "\n"
    fast = outcome(lambda t: yamlfile._load_yaml(PATH, t, yamlfile._LineLoader), text)  # no fallback
    pure = outcome(pure_loader, text)
    assert fast == pure and fast[0] == "ok"
    last = yamlfile.parse_yaml(PATH, text)["jobs"][299]  # after 2 + 299 * 4 lines
    assert (last.line, last.key_lines) == (1199, {"name": 1199, "every": 1200, "command": 1201, "env": 1202})


@pytest.mark.parametrize("text", [
    *SNIPPETS,
    "jobs:\n  - name: a\n    every: 1m\n    every: 2m\n    command: x\n",  # duplicate key, line 4
    "jobs:\n  - !!set {? a, ? a}\n",  # a set's duplicate member is a duplicate key too
    "a: &a {x: 1}\njobs:\n  - {<<: *a, name: b}\n",  # merge keys
    "- " * 1200 + "x\n",  # deeper than libyaml's nesting limit of 1,000: PyYAML decides
    "jobs:\n  - {name: a\ufeff, every: 1m, command: x}\n",  # a BOM inside the text
    "\ufeffjobs: []\n",  # a BOM that starts it
    "jobs: [\u0085]\n", "jobs: 'a\u2028b'\n", 'jobs: "\\x00"\n',
    "{? '' : {'0': null,\\x41? '' : null}}\n", "{a: 1, x?: 2}\n", "[x? c]\n",  # ? inside a plain scalar in flow
])
def test_hand_picked_documents_read_as_the_pure_parser_reads_them(text: str) -> None:
    assert outcome(used_loader, text) == outcome(pure_loader, text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(dumped, mutated, tricky_texts))
def test_generated_documents_read_as_the_pure_parser_reads_them(text: str) -> None:
    text = as_read_from_a_file(text)
    assert outcome(used_loader, text) == outcome(pure_loader, text)


# --- the direct build (yamldirect.py) against PyYAML's generic construction ----------------


def generic_outcome(loader: Any, text: str, direct: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    with monkeypatch.context() as patched:
        patched.setattr(yamlfile._LineConstructor, "direct", direct)
        return outcome(lambda t: yamlfile._load_yaml(PATH, t, loader), text)


LOADERS = [yamlfile._PyLineLoader, *([yamlfile._LineLoader] if yaml.__with_libyaml__ else [])]
# Documents the direct build hands to the generic path (and one it keeps): a merge key, tags on
# collections, duplicate and unhashable keys, a scalar the constructor refuses, depth past its limit.
GIVEN_UP = [
    "a: {x: 1}\njobs:\n  - {<<: {x: 2}, name: b}\n", "jobs: !!set {? a, ? a}\n", "jobs: !!omap [a: 1, b: 2]\n",
    "jobs:\n  - name: a\n    name: b\n", "jobs: {? [a, b] : 1}\n", "jobs: {? {a: 1} : 1}\n",
    "jobs: {1: a, 1: b, true: c, '1': d}\n", "jobs: !!int\n", "jobs: !!timestamp 2030-13-45\n",
    "jobs: !!float x\n", "x: !!binary '%%'\n", "= : 1\n", "- " * 70 + "x\n", "[" * 70 + "]" * 70 + "\n",
    "jobs:\n  - {name: a, at: 2030-01-01 10:00:00, retries: 3, on: yes, x: ~, y: 1.5, z: 0o17}\n",
]


@pytest.mark.parametrize("loader", LOADERS, ids=lambda loader: loader.__name__)
@pytest.mark.parametrize("text", [*SNIPPETS, *GIVEN_UP])
def test_the_direct_build_gives_the_generic_values_and_errors(loader: Any, text: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    assert generic_outcome(loader, text, True, monkeypatch) == generic_outcome(loader, text, False, monkeypatch)


@pytest.mark.parametrize("loader", LOADERS, ids=lambda loader: loader.__name__)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(text=st.one_of(dumped, mutated, tricky_texts))
def test_generated_documents_build_directly_as_generically(loader: Any, text: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    text = as_read_from_a_file(text)
    assert generic_outcome(loader, text, True, monkeypatch) == generic_outcome(loader, text, False, monkeypatch)


def test_a_jobs_file_is_built_directly_not_generically(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is the one taken for a plain jobs file (not a fallback that hides it)."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the generic construction was used")

    monkeypatch.setattr(yaml.constructor.BaseConstructor, "construct_document", refuse)
    text = "jobs:\n  - name: a\n    every: 1h\n    retries: 2\n    command: [echo, hi]\n    env: {A: '1'}\n"
    for loader in LOADERS:
        document = yamlfile._load_yaml(PATH, text, loader)
        job = document["jobs"][0]
        assert job == {"name": "a", "every": "1h", "retries": 2, "command": ["echo", "hi"], "env": {"A": "1"}}
        assert (job.line, job.key_lines) == (2, {"name": 2, "every": 3, "retries": 4, "command": 5, "env": 6})


def test_a_document_past_the_node_limit_is_refused_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yamlfile, "MAX_EXPANDED_NODES", 5)
    for loader in LOADERS:
        with pytest.raises(ConfigError, match="refused: its aliases expand to more than"):
            yamlfile._load_yaml(PATH, "jobs: [a, b, c, d, e]\n", loader)
        assert yamlfile._load_yaml(PATH, "jobs: [a, b]\n", loader) == {"jobs": ["a", "b"]}
