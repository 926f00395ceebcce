"""The --json text of a read command, made by msgspec when that gives the very same bytes.

`cronctl list --json` at 10,000 jobs writes 9 MB; the stdlib's encoder (sort_keys, which
the output has always had) takes about 90 ms of it, msgspec about 25 ms for the same
text: its sorted encoding, re-spaced by `msgspec.json.format(indent=0)` into exactly the
separators of `json.dumps` (", " and ": "), or indented (indent=2) for a terminal.

The two agree token for token on plain JSON values: str, int, bool, None, lists, and
dicts with str keys, sorted by code point both ways. They differ on floats written with an
exponent (1e+16 against 1e16, 1e-05 against 0.00001), NaN and the infinities, and
anything `default=str` would turn into text (datetimes, enums, tuples...). So
`plain_dumps` walks the value first and answers None when it holds anything but those
types, or a float outside [1e-4, 1e16) other than zero; the caller then uses json.dumps.
tests/test_jsonout.py compares both ways.
"""

from __future__ import annotations

from typing import Any

import msgspec

_SCALARS = frozenset({str, int, bool, type(None)})
_STR = frozenset({str})
_ALLOWED = _SCALARS | {float, dict, list}
_encode = msgspec.json.Encoder(order="sorted").encode


def plain_dumps(data: Any, indent: int = 0) -> str | None:
    """json.dumps(data, sort_keys=True, ensure_ascii=False) (indent 2: with indent=2), or None
    when that cannot be promised for `data` (then nothing was written)."""
    if not _plain(data):
        return None
    try:
        return msgspec.json.format(_encode(data), indent=indent).decode()
    except (msgspec.EncodeError, OverflowError, UnicodeEncodeError, TypeError, ValueError):
        return None  # a lone surrogate, or whatever else msgspec refuses


def _plain(value: Any) -> bool:
    """Only plain JSON values, floats in the range both write alike (one job: a few µs)."""
    kind = type(value)
    if kind is dict:
        if not set(map(type, value)) <= _STR:
            return False
        values: Any = value.values()
    elif kind is list:
        values = value
    else:
        return kind in _SCALARS or (kind is float and _plain_float(value))
    kinds = set(map(type, values))  # one pass in C: most of a job's values are scalars
    if kinds <= _SCALARS:
        return True
    if not kinds <= _ALLOWED:
        return False
    for item in values:  # only the containers and floats need a closer look
        kind = type(item)
        if kind is dict or kind is list:
            if not _plain(item):
                return False
        elif kind is float and not _plain_float(item):
            return False
    return True


def _plain_float(value: float) -> bool:
    return value == 0.0 or 1e-4 <= abs(value) < 1e16  # NaN fails both: not plain
