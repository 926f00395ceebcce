"""COPY's text format made by cronctl, so a big write's rows can be encoded before its transaction.

Issue 21: `apply -f` of 100,000 new jobs spent about a second of its client's CPU inside the
transaction turning rows into COPY text (psycopg's `write_row`), holding the rows it locked
while loops on the same host waited for a core. These functions make the same text from
plain values at any time, connection-free: the apply encodes its new rows on an idle thread
first (`Ahead`, below) and its transaction streams the bytes.

The text format (PostgreSQL's COPY, text mode): one line per row, fields separated by a tab,
`\\N` for NULL, and a backslash, newline, carriage return or tab inside a value escaped by a
backslash. Values are what the callers write: text (a name, a JSON text), booleans, integers
and instants (ISO 8601 with their offset, which `timestamptz` reads whatever the session's zone).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Generic, TypeVar

V = TypeVar("V")

# COPY's bytes are sent in pieces of about this size: the server starts inserting the first
# rows while later ones are still on the way, and no 30 MB string is built in one piece.
CHUNK_BYTES = 1 << 20
_SPECIAL = re.compile(r"[\\\n\r\t]")
_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})


def copy_field(value: Any) -> str:
    """One value as COPY's text format spells it (see the module doc)."""
    if type(value) is str:  # most values: first, and one regex search (100,000 rows of seven)
        return value.translate(_ESCAPES) if _SPECIAL.search(value) else value
    if value is None:
        return "\\N"
    if value is True:
        return "t"
    if value is False:
        return "f"
    if isinstance(value, datetime):
        return value.isoformat()
    return copy_field(str(value))


def copy_line(values: Iterable[Any]) -> bytes:
    """One row's line, UTF-8 (`write_lines` re-encodes it for a connection that speaks another)."""
    return ("\t".join(map(copy_field, values)) + "\n").encode()


def write_lines(copy: Any, lines: Iterable[bytes], encoding: str) -> None:
    """Stream `lines` into an open COPY (psycopg's `Copy`) in pieces of CHUNK_BYTES."""
    for piece in chunks(lines):
        copy.write(piece if encoding == "utf-8" else piece.decode().encode(encoding))


def chunks(lines: Iterable[bytes], size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The lines joined into pieces of about `size` bytes, each ending at a line's end."""
    piece: list[bytes] = []
    held = 0
    for line in lines:
        piece.append(line)
        held += len(line)
        if held >= size:
            yield b"".join(piece)
            piece, held = [], 0
    if piece:
        yield b"".join(piece)


class Ahead(Generic[V]):
    """What was encoded before a write, each kept with the object it was made from: the write takes
    it only for that very object (`is`), so a row rebuilt or changed since is encoded again."""

    def __init__(self) -> None:
        self._made: dict[Any, tuple[object, V]] = {}

    def keep(self, key: Any, made_from: object, made: V) -> None:
        self._made[key] = (made_from, made)

    def take(self, key: Any, made_from: object) -> V | None:
        """What was made from `made_from` under `key`, once (None: encode it now)."""
        hit = self._made.pop(key, None)
        return hit[1] if hit is not None and hit[0] is made_from else None

    def clear(self) -> None:
        self._made.clear()
