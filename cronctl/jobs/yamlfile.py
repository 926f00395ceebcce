"""Jobs files as YAML: PyYAML's safe loading with the line of every mapping and key,
duplicate keys refused, the alias-expansion limit, and libyaml's parser where it reads
as PyYAML's does. Split from jobfile.py so that only the commands that read a jobs file
import PyYAML (jobfile.load_jobs_file imports this module when it runs).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from cronctl.errors import ConfigError
from cronctl.jobs.yamldirect import GENERIC, build_direct

# A jobs file of thousands of jobs is a few hundred thousand nodes; aliases that expand past
# this are a "billion laughs" document, which every later walk of the values would pay for.
MAX_EXPANDED_NODES = 1_000_000


class AliasBomb(Exception):
    """The document's aliases expand to more nodes than any jobs file needs."""


# --- YAML with line numbers -------------------------------------------------


class _LineDict(dict):  # type: ignore[type-arg]
    line: int = 0
    key_lines: dict[str, int]


class _LineConstructor(yaml.constructor.SafeConstructor):
    """Safe construction that remembers lines and refuses duplicate keys (PyYAML keeps the last silently).

    Mixed into both parsers below: libyaml's and PyYAML's own give the same nodes and marks.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        result = _LineDict()
        result.line = node.start_mark.line + 1
        result.key_lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                # `? [a, b]: 1` makes a list key; SafeLoader's own check was bypassed by this override.
                raise yaml.constructor.ConstructorError(
                    None, None, f"a {type(key).__name__} cannot be a mapping key", key_node.start_mark
                ) from None
            if isinstance(key, str) and key in result:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            result[key] = self.construct_object(value_node, deep=True)
            if isinstance(key, str):
                result.key_lines[key] = key_node.start_mark.line + 1
        return result

    # False when the text has no anchor ("&"), so no alias and no shared node: set by _load_yaml.
    may_share_nodes = True

    # False: every document goes through PyYAML's generic construction (the tests compare the two).
    direct = True

    def construct_document(self, node: yaml.Node) -> Any:
        # Composing is linear in the text, but each alias re-uses a whole subtree: nine
        # levels of nine aliases are 9**9 values to walk. Refuse before constructing.
        if self.may_share_nodes:
            _check_expansion(node)
        elif self.direct:
            built = build_direct(self, node, _LineDict, MAX_EXPANDED_NODES)  # past it: the count below refuses
            if built is not GENERIC:
                return built
            self.reset_construction()  # a direct build given up may have left the generic one's state
            _check_node_count(node)
        else:
            _check_node_count(node)
        return super().construct_document(node)

    def reset_construction(self) -> None:
        """The state construct_document leaves behind (a construction that raised leaves more)."""
        self.constructed_objects = {}
        self.recursive_objects = {}
        self.state_generators = []
        self.deep_construct = False


class _PyLineLoader(_LineConstructor, yaml.SafeLoader):
    """PyYAML's pure-Python parser: the reference, whose error messages users see."""


def _construct_line_mapping(loader: yaml.SafeLoader | yaml.CSafeLoader, node: yaml.MappingNode) -> Any:
    # Every mapping of the document is built by _LineConstructor.construct_mapping: a
    # _LineDict that knows its lines, instead of SafeLoader's plain dict.
    return loader.construct_mapping(node)


_PyLineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_line_mapping)

# The loader of every jobs file; PyYAML built without libyaml has the pure one only.
_LineLoader: type[yaml.SafeLoader | yaml.CSafeLoader] = _PyLineLoader
if yaml.__with_libyaml__:

    class _CLineLoader(_LineConstructor, yaml.CSafeLoader):
        """libyaml's parser: about 3x faster on a big file (10,000 jobs: 0.75-1.0 s instead of 2.3-3.1 s)."""

    _CLineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_line_mapping)
    _LineLoader = _CLineLoader


def _check_node_count(root: yaml.Node) -> None:
    """_check_expansion for a tree that shares no node (a text without anchors): its
    expanded size is its number of nodes, counted without remembering each node (the
    walk with memory was a sixth of `apply -f` of 10,000 jobs)."""
    count = 0
    pending = [root]
    while pending:
        node = pending.pop()
        count += 1
        if isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                pending.append(key)
                pending.append(value)
    if count > MAX_EXPANDED_NODES:
        raise AliasBomb(_TOO_MANY)


_TOO_MANY = (f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values; "
             "a jobs file never needs that many (is it an alias bomb?)")


def _check_expansion(root: yaml.Node) -> None:
    """Raise AliasBomb when the tree, with every alias expanded, exceeds MAX_EXPANDED_NODES."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        sizes[id(node)] = 1  # a recursive alias counts once: the walks below stop at a depth limit
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(key) + size(value) for key, value in node.value)
        if total > MAX_EXPANDED_NODES:
            raise AliasBomb(_TOO_MANY)
        sizes[id(node)] = total
        return total

    size(root)


# Where libyaml reads a document differently from PyYAML (found by comparing the two on
# generated documents, tests/unit/test_jobfile_loaders.py): it takes a tab where PyYAML refuses
# one, strips every leading BOM (PyYAML one), reads a bare `!` tag as '' (PyYAML None) and
# takes a `#` right after a block scalar's `|` or `>`. A text with any of these goes to PyYAML.
# So does one with a flow collection and a `?`: inside `{...}` or `[...]`, libyaml reads
# `x?` as a plain scalar where PyYAML ends the scalar at the `?` and refuses the document.
_LIBYAML_DIFFERS = re.compile(r"[\t\ufeff]|!(?=[\s,\]}]|$)|[|>][-+0-9]*#")


def _libyaml_differs(text: str) -> bool:
    return bool(_LIBYAML_DIFFERS.search(text)) or ("?" in text and ("{" in text or "[" in text))


def parse_yaml(path: Path, text: str) -> Any:
    """The YAML value of a jobs file's text; ConfigError naming the file (and line) if it is not YAML."""
    if _LineLoader is _PyLineLoader or _libyaml_differs(text):
        return _load_yaml(path, text, _PyLineLoader)
    try:
        return _load_yaml(path, text, _LineLoader)
    except ConfigError:
        # libyaml words its errors its own way ("did not find expected node content") and
        # refuses some documents PyYAML reads (nesting past 1,000 levels, a BOM inside the
        # text): a document it refuses is read again by PyYAML's parser, so a bad file gets
        # the message it always got and PyYAML decides what is valid. Only bad files pay twice.
        return _load_yaml(path, text, _PyLineLoader)


def _load_yaml(path: Path, text: str, loader: type[yaml.SafeLoader | yaml.CSafeLoader]) -> Any:
    try:
        # yaml.load, with the loader told whether the text can share nodes at all.
        instance = loader(text)
        try:
            instance.may_share_nodes = "&" in text  # type: ignore[union-attr]
            return instance.get_single_data()
        finally:
            instance.dispose()
    except AliasBomb as exc:
        raise ConfigError([f"{path}: refused: {exc}"]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError([f"{path}{line}: invalid YAML: {exc.problem or exc.context}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: invalid YAML: {exc}"]) from None
    except (ValueError, TypeError, OverflowError, RecursionError, LookupError, AttributeError) as exc:
        # PyYAML lets some of its own failures escape raw: an escape like "\U10010000"
        # (chr() out of range), nesting deeper than the interpreter's stack, an empty value
        # with an explicit type (`!!int`: IndexError, `!!bool`: KeyError, `!!timestamp`:
        # AttributeError).
        raise ConfigError([f"{path}: invalid YAML: {type(exc).__name__}: {exc}"]) from None
