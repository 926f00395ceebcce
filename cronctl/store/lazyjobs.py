"""The store's jobs by the line: one-job transactions that cost one job, and reads a chunk at a time.

Finishing a run, renewing a lease or claiming a forced run changes one job of a store
that may hold 50,000. Parsing and serializing the whole document for it costs about 0.2 s at
10,000 jobs. The store's byte form has one job per line (``codec.serialize``), so such a
transaction can parse the top-level keys (small), find the line of each job it touches,
parse just those, and write back the same bytes with only the changed lines replaced.

`LazyJobs` is the ``doc["jobs"]`` such a transaction sees: a real ``dict`` that loads a
job's line the first time the job is looked up, and loads every line before anything
that walks or sizes it (iteration, ``len``, ``items``, ``==``...), so a body that does
walk it is still right, only as slow as a whole-document transaction. Python 3.11's
``dict(...)``, ``{**...}`` and the json encoders go through an overridden ``keys`` or
``items``; nothing in cronctl encodes it with msgspec or compares it from C.

Only bytes this process wrote itself are opened this way (``Store`` checks the file's
signature), so every line is known to be one whole job in the canonical form, and a
store edited by hand or damaged is always parsed, and refused, whole.

`stream` serves a long-running reader (the loop's due index): the top-level keys, then
the jobs a chunk of lines at a time, each chunk parsed on its own. Any chunk that does
not parse alone (a store written by hand) sends the reader back to a whole parse, so
this needs no trust in who wrote the bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from cronctl.store.codec import CURRENT_VERSION, Document, dumps, parse

_JOBS_OPEN = b'\n "jobs": {\n'
_JOBS_CLOSE = b"\n }"
# A chain job's key (an empty `after` is never written); inside a string its quotes would be escaped.
_CHAIN_KEY = b'"after": ['
_SEARCHES_BEFORE_INDEX = 3


class NotStoreForm(ValueError):
    """The jobs section is not in serialize()'s form (the byte offset where a part of it failed to parse)."""


class JobLines:
    """Where the jobs section and each job's line are in the bytes of one document."""

    def __init__(self, raw: bytes, opens_at: int, start: int, end: int) -> None:
        self.raw = raw
        self._opens_at = opens_at  # the newline before ' "jobs": {'
        self.start = start  # the first job line
        self.end = end  # the newline that ends the last job line
        self._lookups = 0
        self._index: dict[bytes, int] | Literal[False] | None = None  # None: not built yet

    @classmethod
    def of(cls, raw: bytes) -> JobLines | None:
        """The layout of raw, or None when it has no job line (then there is little to save)."""
        opens_at = raw.find(_JOBS_OPEN)
        if opens_at == -1:
            return None
        start = opens_at + len(_JOBS_OPEN)
        # From the end: only top-level lines (" \"key\": ...") and "}" follow the jobs.
        end = raw.rfind(_JOBS_CLOSE, start)
        if end == -1:
            return None
        return cls(raw, opens_at, start, end)

    def rest(self) -> bytes:
        """The document with an empty jobs object: every top-level key but the jobs."""
        return self.raw[: self._opens_at + 1] + b' "jobs": {}' + self.raw[self.end + len(_JOBS_CLOSE):]

    def find(self, name: str) -> tuple[int, int] | None:
        """The span of the value on the job's line, or None when the document has no such job.

        The first few jobs are searched for in the bytes; from the fourth on, an index of
        every line's key is built once (a search is a scan of the whole section: 2 ms at
        10,000 jobs, and a batch of ends or renewals looks up hundreds)."""
        key = dumps(name)
        self._lookups += 1
        if self._index is None and self._lookups > _SEARCHES_BEFORE_INDEX:
            self._index = self._key_index()
        if self._index:
            at = self._index.get(key, -1)
        else:
            at = self._search(b"  " + key + b": ")
        if at == -1:
            return None
        line_end = self.raw.find(b"\n", at, self.end + 1)
        value_end = line_end - 1 if self.raw[line_end - 1] == ord(",") else line_end
        return at + len(key) + 4, value_end  # past '  "name": '

    def _search(self, prefix: bytes) -> int:
        if self.raw.startswith(prefix, self.start):
            return self.start
        at = self.raw.find(b"\n" + prefix, self.start, self.end)
        return -1 if at == -1 else at + 1

    def _key_index(self) -> dict[bytes, int] | Literal[False]:
        """Each line's key (as written, quotes included) to where its line starts; False when a
        key holds an escape (it could hide a '": '): then every job is searched for."""
        raw, at, end = self.raw, self.start, self.end
        index: dict[bytes, int] = {}
        while at < end:
            close = raw.find(b'": ', at + 3)
            key = raw[at + 2:close + 1]
            if close == -1 or b"\\" in key:
                return False
            index[key] = at
            line_end = raw.find(b"\n", close, end)
            at = end if line_end == -1 else line_end + 1
        return index

    def value(self, span: tuple[int, int]) -> Any:
        return parse(self.raw[span[0]:span[1]])

    def entries(self, chunk_bytes: int = 1 << 18) -> Iterator[tuple[str, Any]]:
        """Every job, parsed a chunk of lines at a time (the memory of a few hundred jobs,
        not of them all; each chunk is one C-level parse).

        Raises NotStoreForm where a chunk does not parse on its own (a store written by
        hand, with a job over several lines): then the caller parses the document whole,
        which also says what is wrong with it, if anything.
        """
        raw, at, end = self.raw, self.start, self.end
        while at < end:
            cut = raw.find(b",\n", min(at + chunk_bytes, end), end)  # the end of a line past the chunk
            stop = end if cut == -1 else cut
            try:
                jobs = parse(b"{" + raw[at:stop] + b"}")
            except ValueError:
                raise NotStoreForm(at) from None
            yield from jobs.items()
            at = end if cut == -1 else cut + 2

    def chain_free(self) -> bool:
        """Whether no job runs after another (then a finish never starts a chain)."""
        return self.raw.find(_CHAIN_KEY, self.start, self.end) == -1

    def chain_names(self) -> list[str] | None:
        """The jobs whose line has an `after` key, from the bytes (None: a key with an escape).
        A chain's write looks up these few, not every job (chain_doc._upstream_names)."""
        names: list[str] = []
        raw, at = self.raw, self.raw.find(_CHAIN_KEY, self.start, self.end)
        while at != -1:
            line = max(self.start, raw.rfind(b"\n", self.start, at) + 1)
            key = raw[line + 2:raw.find(b'": ', line + 3) + 1]
            if b"\\" in key:
                return None
            names.append(parse(key))
            line_end = raw.find(b"\n", at, self.end)
            at = -1 if line_end == -1 else raw.find(_CHAIN_KEY, line_end, self.end)
        return names


class LazyJobs(dict[str, Any]):
    """``doc["jobs"]`` of a transaction over `JobLines`: each job parsed when first looked up."""

    def __init__(self, lines: JobLines) -> None:
        super().__init__()
        self._lines = lines
        # Every name looked up, with its line's value span (None: it had no line).
        self._looked: dict[str, tuple[int, int] | None] = {}
        self._whole = False
        self._chain_free: bool | None = None

    @property
    def chain_free(self) -> bool:
        """Read by chain_doc: with no chain job, no finish needs the whole graph."""
        if self._chain_free is None:
            self._chain_free = self._lines.chain_free()
        return self._chain_free

    def chain_names(self) -> list[str] | None:
        """The names of the jobs with an `after`, as stored (None: ask every job)."""
        return None if self._whole else self._lines.chain_names()

    # --- loading ---------------------------------------------------------------------

    def _load(self, name: object) -> None:
        if self._whole or not isinstance(name, str) or name in self._looked:
            return
        span = self._lines.find(name)
        self._looked[name] = span
        if span is not None:
            dict.__setitem__(self, name, self._lines.value(span))

    def load_all(self) -> None:
        if self._whole:
            return
        for name, value in self._lines.entries():
            if name not in self._looked:  # a job the body looked up may have changed or gone
                dict.__setitem__(self, name, value)
        self._whole = True

    # --- lookups: one job ------------------------------------------------------------

    def __getitem__(self, name: str) -> Any:
        self._load(name)
        return dict.__getitem__(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        self._load(name)
        return dict.get(self, name, default)

    def __contains__(self, name: object) -> bool:
        self._load(name)
        return dict.__contains__(self, name)

    def __setitem__(self, name: str, value: Any) -> None:
        self._load(name)
        dict.__setitem__(self, name, value)

    def __delitem__(self, name: str) -> None:
        self._load(name)
        dict.__delitem__(self, name)

    def pop(self, name: str, *default: Any) -> Any:
        self._load(name)
        return dict.pop(self, name, *default)

    def setdefault(self, name: str, default: Any = None) -> Any:
        self._load(name)
        return dict.setdefault(self, name, default)

    # --- everything else sees every job ----------------------------------------------

    def __iter__(self) -> Iterator[str]:
        self.load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self.load_all()
        return dict.__len__(self)

    def __eq__(self, other: object) -> bool:
        self.load_all()
        if isinstance(other, LazyJobs):
            other.load_all()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None

    def __repr__(self) -> str:
        self.load_all()
        return dict.__repr__(self)

    def __reversed__(self) -> Iterator[str]:
        self.load_all()
        return dict.__reversed__(self)

    def __or__(self, other: Any) -> Any:  # dict's own would copy from C, around load_all
        return self.copy() | other

    def __ior__(self, other: Any) -> Any:
        self.update(other)
        return self

    def keys(self):  # type: ignore[no-untyped-def]
        self.load_all()
        return dict.keys(self)

    def values(self):  # type: ignore[no-untyped-def]
        self.load_all()
        return dict.values(self)

    def items(self):  # type: ignore[no-untyped-def]
        self.load_all()
        return dict.items(self)

    def copy(self) -> dict[str, Any]:
        self.load_all()
        return dict(dict.items(self))

    def popitem(self) -> tuple[str, Any]:
        self.load_all()
        return dict.popitem(self)

    def clear(self) -> None:
        self.load_all()
        dict.clear(self)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.load_all()
        dict.update(self, *args, **kwargs)

    def __reduce__(self) -> Any:
        return (dict, (self.copy(),))

    # --- writing back ----------------------------------------------------------------

    def body(self) -> list[bytes] | None:
        """The jobs section with the changed lines replaced, as parts; None when a job was
        added or removed, or every job loaded (then the caller serializes them all)."""
        if self._whole:
            return None
        raw = self._lines.raw
        edits: list[tuple[tuple[int, int], bytes]] = []
        for name, span in self._looked.items():
            present = dict.__contains__(self, name)
            if (span is not None) != present:
                return None
            if span is None:
                continue
            new = dumps(dict.__getitem__(self, name))
            if raw[span[0]:span[1]] != new:
                edits.append((span, new))
        parts: list[bytes] = []
        at = self._lines.start
        for (value_start, value_end), new in sorted(edits):
            parts += [raw[at:value_start], new]
            at = value_end
        parts.append(raw[at:self._lines.end])
        return parts


def open_lazily(raw: bytes) -> tuple[Document, LazyJobs] | None:
    """The document of raw with its jobs as a `LazyJobs`; None when raw is not a current
    document with a job line."""
    opened = _opened(raw)
    if opened is None:
        return None
    lines, doc = opened
    jobs = LazyJobs(lines)
    doc["jobs"] = jobs
    return doc, jobs


def stream(raw: bytes) -> tuple[Document, Iterator[tuple[str, Any]]] | None:
    """The top-level keys of raw (with an empty jobs object), and its jobs one at a time;
    None when raw is not a current document with a job line (parse it whole then)."""
    opened = _opened(raw)
    return None if opened is None else (opened[1], opened[0].entries())


def _opened(raw: bytes) -> tuple[JobLines, Document] | None:
    """The job lines of raw and its other top-level keys, parsed; None when raw is not a
    current document in serialize()'s layout with a job line."""
    lines = JobLines.of(raw)
    if lines is None:
        return None
    try:
        top = parse(lines.rest())
    except ValueError:
        return None
    if not isinstance(top, dict) or top.get("version") != CURRENT_VERSION:
        return None
    return lines, top
