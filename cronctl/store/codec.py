"""The store's byte form: one document, sorted keys, one top-level key and one job per line.

`serialize` writes a document exactly as the standard library's ``json.dumps(value,
sort_keys=True, ensure_ascii=False, separators=(", ", ": "))`` wrote every store so far,
but through msgspec, several times faster; `parse` reads it back as ``json.loads`` would.
`jsonstore` owns the file and its lock; `lazyjobs` reads and rewrites single job lines.
"""

from __future__ import annotations

import bisect
import gc
import itertools
import json
from collections.abc import Callable
from typing import Any

import msgspec

Document = dict[str, Any]

CURRENT_VERSION = 1  # of the document's layout ("version"); jsonstore.migrate upgrades older ones


def serialize(doc: Document) -> bytes:
    """The one byte form of a document on disk: stable key order, so equal documents give equal bytes.

    Sorted keys everywhere, one top-level key per line and one job per line::

        {
         "counters": {...},
         "jobs": {
          "backup": {"at": null, "catchup": "latest", ...},
          "report": {...}
         },
         "rev": 42,
         "version": 1
        }

    Still one JSON document a person can read, diff and grep line by line. Every value is
    written exactly as ``json.dumps(value, sort_keys=True, ensure_ascii=False,
    separators=(", ", ": "))`` writes it (the format of every store so far), but by
    msgspec, several times faster (see ``dumps``).
    """
    return b"".join(encode_parts(doc)[0])


def encode_parts(doc: Document, jobs_body: list[bytes] | None = None) -> tuple[list[bytes], int | None]:
    """The document as byte parts, and the index of the part holding "rev" (None: no rev).

    `jobs_body`: the job lines, ready (parts of a non-empty body), instead of serializing
    ``doc["jobs"]``.
    """
    parts = [b"{\n"]
    keys = sorted(doc)
    rev_at = None
    for index, key in enumerate(keys):
        end = b",\n" if index < len(keys) - 1 else b"\n"
        value = doc[key]
        if key == "jobs" and (jobs_body is not None or (isinstance(value, dict) and value)):
            # The body stays parts of its own: pasting megabytes into a bigger string copies them.
            body = jobs_body if jobs_body is not None else [_jobs_body(value)]
            parts += [b" " + dumps(key) + b": {\n", *body, b"\n }" + end]
            continue
        if key == "rev":
            rev_at = len(parts)
        parts.append(b" " + dumps(key) + b": " + dumps(value) + end)
    parts.append(b"}\n")
    return parts, rev_at


_fast_encode = msgspec.json.Encoder(order="sorted").encode
_format = msgspec.json.format
_NOT_PLAIN_DATA = (TypeError, ValueError, OverflowError, msgspec.EncodeError)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _jobs_body(jobs: dict[str, Any]) -> bytes:
    """One line ``  "name": {...}`` per job, sorted, joined by ",\\n"; as ``dumps`` would write each.

    The bulk of a write: made in one comprehension of C calls (a one-key object per job,
    formatted, its braces cut), then checked once, as a whole, for floats msgspec spells
    differently; only the lines where that check fires are made again through ``dumps``.
    """
    names = sorted(jobs)
    try:
        lines = [_format(_fast_encode({name: jobs[name]}), indent=0)[1:-1] for name in names]
    except _NOT_PLAIN_DATA:
        return b",\n".join([b"  " + dumps(name) + b": " + dumps(jobs[name]) for name in names])
    body = b",\n  ".join(lines)
    suspects = _suspect_lines(body, lines, len(b",\n  "))
    for index in suspects:
        lines[index] = dumps(names[index]) + b": " + dumps(jobs[names[index]])
    if suspects:
        body = b",\n  ".join(lines)
    return b"  " + body


def _suspect_lines(body: bytes, lines: list[bytes], gap: int) -> set[int]:
    """Indexes of the lines (joined into body, ``gap`` bytes apart) where ``_may_differ`` fires.

    Only the hits are visited: a separator holds no digit, so no hit straddles two lines.
    """
    hits = []
    for needle, text in ((b"0.0000", body), (b"0e", body.translate(_DIGITS_AS_ZERO))):
        at = text.find(needle)
        while at != -1:
            hits.append(at)
            at = text.find(needle, at + 1)
    if not hits:
        return set()
    ends = list(itertools.accumulate(len(line) + gap for line in lines))
    return {bisect.bisect_right(ends, at) for at in hits}


def dumps(value: Any) -> bytes:
    """One value in the store's form: ``_stdlib_dumps(value)``, UTF-8 encoded, byte for byte.

    msgspec writes sorted keys and, through ``format(indent=0)``, the ", " and ": "
    separators; strings are escaped as the standard library escapes them with
    ensure_ascii=False. Only floats may differ: below 1e-4 or from 1e16 on, Python writes
    "1e-05" and "1e+16" where msgspec writes "0.00001" and "1e16" (NaN and infinities,
    which are not JSON, msgspec writes as null: no store cronctl writes holds them).
    """
    try:
        data = _format(_fast_encode(value), indent=0)
    except _NOT_PLAIN_DATA:
        data = None  # e.g. a set: the standard library raises the error a caller expects
    if data is None or _may_differ(data):
        return _stdlib_dumps(value).encode("utf-8")
    return data


def _may_differ(data: bytes) -> bool:
    """Whether msgspec's output may spell a float otherwise than Python does.

    Such a float has a digit followed by "e", or starts "0.0000". A string that merely
    looks like one ("c0ffee", "sleep 0.00001") costs the slower encoder, never a
    different byte.
    """
    return b"0.0000" in data or b"0e" in data.translate(_DIGITS_AS_ZERO)


def same_bytes(parts: list[bytes], data: bytes) -> bool:
    """Whether the parts, joined, are data; without joining them (a copy of the whole store)."""
    if sum(map(len, parts)) != len(data):
        return False
    offset = 0
    for part in parts:
        if not data.startswith(part, offset):
            return False
        offset += len(part)
    return True


def _make_stdlib_dumps() -> Callable[[Any], str]:
    """json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": ")), built once.

    The reference for ``dumps``, and its fallback. json.dumps builds a new encoder on
    every call; the C encoder made once gives the same text.
    """
    from json import encoder as json_encoder

    make = getattr(json_encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return lambda value: json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
    encode = make(None, json.JSONEncoder().default, json_encoder.encode_basestring, None, ": ", ", ",
                  True, False, True)

    def dumps(value: Any) -> str:
        if isinstance(value, str):
            return json_encoder.encode_basestring(value)
        return "".join(encode(value, 0))

    return dumps


_stdlib_dumps = _make_stdlib_dumps()


class _Spelling:
    """Whether every value `parse` has returned in this process is one msgspec writes
    exactly as ``json.dumps`` does (`spelled_alike`)."""

    alike = True


def _float_alike(text: str) -> float:
    """A JSON float, as the decoder would make it; one written otherwise by msgspec
    (1e-05 as 1e-5, 1e+16 as 1e16) is noted. Called for floats only: a store of new jobs
    holds none, a store of jobs that ran a few per job."""
    value = float(text)
    if value != 0.0 and not 1e-4 <= abs(value) < 1e16:
        _Spelling.alike = False
    return value


def spelled_alike() -> bool:
    """Whether every value `parse` has returned so far in this process is plain JSON that
    msgspec's sorted encoder, spaced by ``format(indent=0)``, writes byte for byte as
    ``json.dumps(sort_keys=True, ensure_ascii=False)`` does: no float outside [1e-4, 1e16)
    but zero, no NaN or infinity, no lone surrogate (the last two only json.loads
    accepts, and only a document json.loads parsed can hold them). So a --json document
    built from parsed values and cronctl's own strings, ints and bools can be written by
    msgspec without a walk of its values (cli/jsonout.py)."""
    return _Spelling.alike


_fast_decode = msgspec.json.Decoder(float_hook=_float_alike).decode


def parse(raw: bytes) -> Any:
    """The JSON value of raw bytes, as json.loads gives it; raises what json.loads raises.

    msgspec parses valid JSON about a third faster than json.loads; anything it refuses
    (malformed input, NaN, a lone surrogate escape) goes to json.loads, whose verdict
    and error message are the ones cronctl always gave. The cyclic garbage collector
    is paused meanwhile: a parse allocates hundreds of thousands of containers, none of
    them garbage, and would otherwise trigger full collections over all of them.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _fast_decode(raw)
    except msgspec.DecodeError:
        _Spelling.alike = False  # NaN, a lone surrogate, a number msgspec cannot hold: json.loads's values
        return json.loads(raw.decode("utf-8"))
    finally:
        if collecting:
            gc.enable()
