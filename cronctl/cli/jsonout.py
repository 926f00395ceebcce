"""The --json text of a document built from the store's values, written by msgspec.

`cronctl list --json` at 10,000 jobs writes 9 MB: `json.dumps(sort_keys=True)` takes
about 85 ms of it, msgspec's sorted encoder about 20 ms for the same bytes, spaced by
`msgspec.json.format` into json.dumps's separators (", " and ": "; indent=2 for a
terminal, as `render.print_json` re-indents). The two agree token for token on plain JSON
values (str, int, bool, None, lists, dicts with str keys sorted by code point) and on
floats in [1e-4, 1e16) or zero; they differ on other floats, NaN and the infinities, and
on whatever `default=str` would turn into text.

A walk of every value to prove that cost as much as it saved. Instead the caller
promises the types (a document made of values the store's parser returned plus cronctl's
own strings, ints, bools and None), and the parser says whether any value it returned
holds a float, NaN or string msgspec would write otherwise (`codec.spelled_alike`). When
it did, the caller's json.dumps writes as before. tests/unit/test_jsonout.py compares both.
"""

from __future__ import annotations

import codecs
import sys
from typing import Any

import msgspec

from cronctl.store.codec import spelled_alike

_encode = msgspec.json.Encoder(order="sorted").encode


def store_json(data: Any, indent: int) -> bytes | None:
    """json.dumps(data, sort_keys=True, ensure_ascii=False) as UTF-8 (indent 2: its indent=2
    form), or None when the parser saw a value written otherwise (then use json.dumps)."""
    if not spelled_alike():
        return None
    try:
        return msgspec.json.format(_encode(data), indent=indent)
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError, UnicodeEncodeError):
        return None  # not the document the caller promised: json.dumps judges it


def write_line(text: bytes) -> None:
    """text and a newline on stdout, as `sys.stdout.write(text.decode() + "\\n")` would put
    them: straight to the byte stream when stdout encodes UTF-8 (no 9 MB str made and
    encoded again), through the text stream otherwise."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    encoding = getattr(stream, "encoding", None)
    if buffer is None or not encoding or codecs.lookup(encoding).name != "utf-8":
        stream.write(text.decode("utf-8") + "\n")
        return
    stream.flush()  # what was written as text comes first
    buffer.write(text + b"\n")
