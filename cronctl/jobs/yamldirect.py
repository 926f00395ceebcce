"""A jobs file's YAML nodes built into values directly, for the documents every jobs file is.

PyYAML's generic construction (`construct_object`) pays for what a jobs file never has:
per node a dispatch on the tag, a memo of the node, a recursion guard, and a generator
per mapping and sequence. With no node shared (a text without `&`), a mapping, a sequence
and a string are built here in one walk that also counts the nodes: `apply -f` of
100,000 jobs spent 2.2 s of its 6.4 s parse in the generic construction and 0.4 s in a
separate count of the nodes.

The values are the generic construction's, exactly: a mapping is the caller's line-aware
dict with the same lines, a string its node's text, any other scalar (an int, a bool, a
timestamp...) is handed to the constructor's own `construct_object`. Whatever the
generic path decides or words itself is left to it: a merge key (`<<`), a tag on a
collection (`!!set`, `!!omap`), a duplicate or unhashable key, a scalar it refuses, a
document deeper than `MAX_DEPTH`, more nodes than the caller's limit. Then `build_direct`
returns `GENERIC` and the caller constructs the document the generic way from scratch,
so those documents get the values and errors they always got.
"""

from __future__ import annotations

from typing import Any

import yaml

_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
# Keys flatten_mapping rewrites (a merge `<<`, a `=` value key): the generic path's.
_FLATTENED = frozenset({"tag:yaml.org,2002:merge", "tag:yaml.org,2002:value"})
# A jobs file is five levels deep. Deeper documents go the generic way, so that where
# Python's stack runs out (a RecursionError, a refusal) stays where it always was.
MAX_DEPTH = 64

GENERIC: Any = object()  # build_direct's answer: construct this document the generic way


class _GiveUp(Exception):
    """The document has something only the generic construction decides."""


def build_direct(constructor: yaml.constructor.SafeConstructor, root: yaml.Node,
                 mapping_type: type[dict[Any, Any]], limit: int) -> Any:
    """The document's value, or GENERIC. `mapping_type` is what every mapping is built as
    (given its `line` and `key_lines` as the generic construct_mapping gives them); past
    `limit` nodes this gives up (the caller's count refuses such a document)."""
    builder = _Builder(constructor, mapping_type, limit)
    try:
        return builder.value(root, 0)
    except _GiveUp:
        return GENERIC
    finally:
        constructor.constructed_objects = {}  # as construct_document leaves them
        constructor.recursive_objects = {}


class _Builder:
    def __init__(self, constructor: yaml.constructor.SafeConstructor, mapping_type: type[dict[Any, Any]],
                 limit: int) -> None:
        self.constructor = constructor
        self.mapping_type = mapping_type
        self.left = limit  # nodes still allowed

    def value(self, node: yaml.Node, depth: int) -> Any:
        self.left -= 1
        if self.left < 0 or depth > MAX_DEPTH:
            raise _GiveUp
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _STR:
                return node.value
            return self._scalar(node)
        if isinstance(node, yaml.MappingNode) and node.tag == _MAP:
            return self._mapping(node, depth + 1)
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
            return [self.value(child, depth + 1) for child in node.value]
        raise _GiveUp

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        try:
            return self.constructor.construct_object(node, deep=True)
        except Exception:  # the generic path raises it again, in its own words
            raise _GiveUp from None

    def _mapping(self, node: yaml.MappingNode, depth: int) -> Any:
        result = self.mapping_type()
        result.line = node.start_mark.line + 1  # type: ignore[attr-defined]
        key_lines: dict[str, int] = {}
        result.key_lines = key_lines  # type: ignore[attr-defined]
        for key_node, value_node in node.value:
            if key_node.tag in _FLATTENED:
                raise _GiveUp
            key = self.value(key_node, depth)
            if isinstance(key, str):
                if key in result:
                    raise _GiveUp  # a duplicate key: refused by the generic path, in its words
                key_lines[key] = key_node.start_mark.line + 1
            elif not _hashable(key):
                raise _GiveUp
            result[key] = self.value(value_node, depth)
        return result


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True
