"""The durable, versioned JSON store: one document, read without a lock, changed under one.

The store knows nothing about what jobs mean. It guarantees four things:

- every reader sees a whole document, because a new document only ever appears
  through os.replace() of a fully written and fsynced temp file;
- read-modify-write transactions exclude each other, across processes and across
  threads of one process, through a flock on ``jobs.lock`` (a file that is never
  replaced or deleted, so every waiter locks the same inode);
- a failed write leaves the previous document in place and says so; it is never
  retried and never renamed into place;
- a document that does not parse is never overwritten.

A write goes through these steps, in order: ``open`` (create the temp file),
``write``, ``fsync``, ``backup`` (hard-link the current store to ``jobs.json.bak``),
``rename`` (os.replace onto ``jobs.json``), ``dirfsync``.

Test seam: before each step the store calls the ``fault`` callable given to
``Store(...)``, which may raise (e.g. ``OSError(errno.EIO, ...)``) to simulate a
failing disk. And if the environment variable ``CRONCTL_FAULT_STORE_CRASH`` names
a step, the process SIGKILLs itself at that step, so tests can crash a real writer
(a subprocess or a CLI command) at every point of a write.
"""

from __future__ import annotations

import bisect
import fcntl
import gc
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from cronctl.errors import LockTimeoutError, StoreCorruptError, StoreError, StoreWriteError
from cronctl.paths import Paths
from cronctl.store.locks import describe_lock_holder
from cronctl.store.statefiles import fsync_directory as _fsync_directory

CURRENT_VERSION = 1

WRITE_STEPS = ("open", "write", "fsync", "backup", "rename", "dirfsync")
CRASH_ENV = "CRONCTL_FAULT_STORE_CRASH"

Document = dict[str, Any]

# Waiting for a busy lock polls with a non-blocking flock: a blocking flock cannot be
# given a deadline. The delay doubles from the first value up to the cap, so a short
# hold costs a waiter about a millisecond and a long one costs little CPU.
_FIRST_POLL_DELAY = 0.0005
_MAX_POLL_DELAY = 0.02


def empty_document() -> Document:
    return {"version": CURRENT_VERSION, "rev": 0, "jobs": {}, "counters": {}}


# --- versions -----------------------------------------------------------------


def _upgrade_0_to_1(doc: Document) -> Document:
    """Version 0 (before the first release) had only "version" and "jobs".

    Version 1 added "rev", the write counter that lets a reader tell documents
    apart, and "counters", monotonic sequences such as run ids.
    """
    doc.setdefault("rev", 0)
    doc.setdefault("counters", {})
    doc["version"] = 1
    return doc


_UPGRADES: dict[int, Callable[[Document], Document]] = {0: _upgrade_0_to_1}


def migrate(doc: Document, path: str | os.PathLike[str]) -> Document:
    """Bring a parsed document up to CURRENT_VERSION, one version at a time, in place."""
    if not isinstance(doc, dict):
        raise _shape_error(path, f"the top level is a JSON {_json_type(doc)}, not an object")
    if "version" not in doc:
        raise _shape_error(path, 'it has no "version" key')
    version = doc["version"]
    if not _is_count(version):
        raise _shape_error(path, f'"version" must be a non-negative integer, not {version!r}')
    if version > CURRENT_VERSION:
        raise StoreError(
            f"store {path} was written by a newer cronctl (version {version}); upgrade cronctl "
            f"(this one understands version {CURRENT_VERSION} and older)"
        )
    while doc["version"] < CURRENT_VERSION:
        upgrade = _UPGRADES.get(doc["version"])
        if upgrade is None:
            raise _shape_error(path, f"version {doc['version']} is not a version cronctl ever wrote")
        doc = upgrade(doc)
    # Operators may hand-edit the stable keys ("version", "jobs") and drop the rest.
    doc.setdefault("rev", 0)
    doc.setdefault("counters", {})
    problem = _shape_problem(doc)
    if problem:
        raise _shape_error(path, problem)
    return doc


def _shape_problem(doc: Document) -> str | None:
    """What makes a current-version document unusable, if anything (only the top level)."""
    for key in ("jobs", "counters"):
        if key not in doc:
            return f'it has no "{key}" object'
        if not isinstance(doc[key], dict):
            return f'"{key}" must be an object, not {_json_type(doc[key])}'
    if not _is_count(doc.get("rev")):
        return f'"rev" must be a non-negative integer, not {doc.get("rev")!r}'
    return None


def _is_count(value: object) -> bool:
    # bool is an int in Python, but true is not a version.
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _json_type(value: object) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "number",
        float: "number",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


def _shape_error(path: str | os.PathLike[str], problem: str) -> StoreCorruptError:
    return StoreCorruptError(
        f"store {path} is not a cronctl store: {problem}; nothing was changed. Run 'cronctl doctor' to recover"
    )


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
    msgspec, several times faster (see ``_dumps``).
    """
    return b"".join(_encode(doc)[0])


def _encode(doc: Document) -> tuple[list[bytes], int | None]:
    """The document as byte parts, and the index of the part holding "rev" (None: no rev)."""
    parts = [b"{\n"]
    keys = sorted(doc)
    rev_at = None
    for index, key in enumerate(keys):
        end = b",\n" if index < len(keys) - 1 else b"\n"
        value = doc[key]
        if key == "jobs" and isinstance(value, dict) and value:
            # The body stays a part of its own: pasting megabytes into a bigger string copies them.
            parts += [b" " + _dumps(key) + b": {\n", _jobs_body(value), b"\n }" + end]
            continue
        if key == "rev":
            rev_at = len(parts)
        parts.append(b" " + _dumps(key) + b": " + _dumps(value) + end)
    parts.append(b"}\n")
    return parts, rev_at


_fast_encode = msgspec.json.Encoder(order="sorted").encode
_format = msgspec.json.format
_NOT_PLAIN_DATA = (TypeError, ValueError, OverflowError, msgspec.EncodeError)
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")


def _jobs_body(jobs: dict[str, Any]) -> bytes:
    """One line ``  "name": {...}`` per job, sorted, joined by ",\\n"; as ``_dumps`` would write each.

    The bulk of a write: made in one comprehension of C calls (a one-key object per job,
    formatted, its braces cut), then checked once, as a whole, for floats msgspec spells
    differently; only the lines where that check fires are made again through ``_dumps``.
    """
    names = sorted(jobs)
    try:
        lines = [_format(_fast_encode({name: jobs[name]}), indent=0)[1:-1] for name in names]
    except _NOT_PLAIN_DATA:
        return b",\n".join([b"  " + _dumps(name) + b": " + _dumps(jobs[name]) for name in names])
    body = b",\n  ".join(lines)
    suspects = _suspect_lines(body, lines, len(b",\n  "))
    for index in suspects:
        lines[index] = _dumps(names[index]) + b": " + _dumps(jobs[names[index]])
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


def _dumps(value: Any) -> bytes:
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


def _same_bytes(parts: list[bytes], data: bytes) -> bool:
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

    The reference for ``_dumps``, and its fallback. json.dumps builds a new encoder on
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
_fast_decode = msgspec.json.Decoder().decode


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
        return json.loads(raw.decode("utf-8"))
    finally:
        if collecting:
            gc.enable()


# --- the store --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreSignature:
    """What one stat says about the store file.

    Every write puts a new inode in place, so an equal signature means the same
    document; an idle loop compares signatures instead of re-parsing.
    """

    ino: int
    mtime_ns: int
    size: int

    @classmethod
    def of(cls, info: os.stat_result) -> StoreSignature:
        return cls(info.st_ino, info.st_mtime_ns, info.st_size)


# No real file has a negative size, so this never equals an existing store's signature.
MISSING_STORE = StoreSignature(0, 0, -1)


class Store:
    def __init__(
        self,
        paths: Paths,
        *,
        lock_timeout: float = 30.0,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        self._paths = paths
        self._lock_timeout = lock_timeout
        self._fault = fault
        # Thread-local, because the scheduler's threads share one Store and each
        # wants the revision its own last transaction wrote.
        self._local = threading.local()

    @property
    def last_written_rev(self) -> int | None:
        """The rev of the last document this thread wrote through this Store, if any."""
        return getattr(self._local, "rev", None)

    # --- reading ----------------------------------------------------------------

    def read(self) -> Document:
        """The current document; no lock is needed because os.replace() swaps whole files."""
        raw, _ = self._read_raw()
        return self._decode(raw)

    def read_if_changed(self, since: StoreSignature | None) -> tuple[Document | None, StoreSignature]:
        """(None, sig) when the store is as it was at ``since``; costs one stat then."""
        try:
            signature = StoreSignature.of(os.stat(self._paths.store))
        except FileNotFoundError:
            signature = MISSING_STORE
        except OSError as exc:
            raise self._read_error(exc) from exc
        if signature == since:
            return None, signature
        raw, signature = self._read_raw()
        return self._decode(raw), signature

    def _read_raw(self) -> tuple[bytes | None, StoreSignature]:
        # fstat and read through one descriptor, so the signature describes exactly
        # the bytes returned even if a writer replaces the file meanwhile.
        try:
            with open(self._paths.store, "rb") as handle:
                signature = StoreSignature.of(os.fstat(handle.fileno()))
                return handle.read(), signature
        except FileNotFoundError:
            return None, MISSING_STORE
        except OSError as exc:
            raise self._read_error(exc) from exc

    def _read_error(self, exc: OSError) -> StoreError:
        return StoreError(f"cannot read store {self._paths.store}: {_reason(exc)}")

    def _decode(self, raw: bytes | None) -> Document:
        if raw is None:
            self._refuse_lost_store()
            return empty_document()
        try:
            doc = parse(raw)
        except UnicodeDecodeError as exc:
            raise self._corrupt(f"not valid UTF-8 at byte {exc.start}") from exc
        except json.JSONDecodeError as exc:
            raise self._corrupt(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from exc
        return migrate(doc, self._paths.store)

    def _refuse_lost_store(self) -> None:
        """A missing store is a new home, unless a backup shows that a store existed.

        Read as empty, it would let the next write replace that backup: every definition
        lost without a word. (jobs.lock alone proves nothing: a transaction that changes
        nothing, such as pausing a job that does not exist, creates it in a new home.)
        """
        if self._paths.store_backup.exists():
            raise StoreCorruptError(
                f"store {self._paths.store} is missing but its backup {self._paths.store_backup} exists; "
                "nothing was changed. 'cronctl doctor --repair' restores the backup; to start with an "
                f"empty store on purpose, move {self._paths.store_backup.name} away first"
            )

    def _corrupt(self, detail: str) -> StoreCorruptError:
        if self._paths.store_backup.exists():
            how = f"'cronctl doctor --repair' restores the last good copy {self._paths.store_backup}"
        else:
            how = "There is no backup to restore: fix the file by hand ('cronctl doctor' explains)"
        return StoreCorruptError(f"cannot parse store {self._paths.store}: {detail}; nothing was changed. {how}")

    # --- changing ---------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[Document]:
        """Lock, read, let the caller mutate the document in place, write it if it changed.

        On an exception in the body nothing is written. A store that does not parse
        raises StoreCorruptError here, before the body runs, so it is never overwritten.

        "Changed" is decided on bytes: the document is serialized and compared with the
        bytes read, so no copy of the document is kept to compare with, and 1, 1.0 and
        true stay different values. A store not in serialize()'s form (written by hand,
        or by an older version) is rewritten in that form by its first transaction.
        """
        with self._exclusive():
            self._remove_stale_temps()
            raw, _ = self._read_raw()
            doc = self._decode(raw)
            rev = doc["rev"]
            yield doc
            doc["rev"] = rev  # the store's to set, never the caller's
            parts, rev_at = _encode(doc)
            if _same_bytes(parts, serialize(empty_document()) if raw is None else raw):
                return
            self._refuse_malformed(doc)
            doc["rev"] = rev + 1
            assert rev_at is not None
            end = b",\n" if parts[rev_at].endswith(b",\n") else b"\n"
            parts[rev_at] = b' "rev": %d%s' % (rev + 1, end)
            write = _AtomicWrite(self._paths, self._fault)
            write.replace(b"".join(parts))
            # Recorded before the directory fsync: the new document is in place even
            # if that fsync fails and raises.
            self._local.rev = rev + 1
            write.flush_directory()

    def restore_backup(self) -> Path | None:
        """Put the last good copy back in place (doctor --repair).

        The unreadable store is kept aside as jobs.json.corrupt-<time> (returned), never
        deleted: it may hold the only record of something an operator needs.
        """
        with self._exclusive():
            try:
                backup = self._paths.store_backup.read_bytes()
            except FileNotFoundError:
                raise StoreError(f"there is no backup {self._paths.store_backup} to restore") from None
            try:
                migrate(json.loads(backup.decode("utf-8")), self._paths.store_backup)
            except (ValueError, UnicodeDecodeError) as exc:
                raise StoreCorruptError(f"the backup {self._paths.store_backup} does not parse either: {exc}") from exc
            kept = None
            if self._paths.store.exists():
                kept = self._paths.store.with_name(f"{self._paths.store.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
                os.link(self._paths.store, kept)
            write = _AtomicWrite(self._paths, self._fault)
            write.replace(backup, keep_backup=False)
            write.flush_directory()
            return kept

    def _refuse_malformed(self, doc: Document) -> None:
        # A caller's bug must not leave behind a store that the next read refuses.
        problem = _shape_problem(doc) if doc.get("version") == CURRENT_VERSION else '"version" was changed'
        if problem:
            raise StoreError(f"refusing to write store {self._paths.store}: {problem}; the store was not changed")

    def _remove_stale_temps(self) -> None:
        # Temp files are only created under the lock, which we hold: any present now
        # was left by a writer that crashed.
        prefixes = (f"{self._paths.store.name}.tmp.", f"{self._paths.store_backup.name}.tmp.")
        with os.scandir(self._paths.home) as entries:
            stale = [entry.path for entry in entries if entry.name.startswith(prefixes)]
        for path in stale:
            # A leftover we cannot remove costs disk space, not correctness.
            with suppress(OSError):
                os.unlink(path)

    # --- locking ----------------------------------------------------------------

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold jobs.lock, excluding other processes and other threads of this one.

        The lock is fcntl.flock on a descriptor of our own, not filelock 4.x. Its
        FileLock falls back by default to a soft marker file, deleted on release,
        where flock is unavailable; and with thread_local=False a second thread
        "acquires" an instance another thread holds (a reentrant count; tried with
        4.3.1). Either would quietly break the exclusion this store relies on, and we
        need the lock file's inode ourselves to name the holder.

        A flock belongs to an open file description, so two descriptors in one process
        exclude each other: that is what makes threads safe. The in-process gate below
        only spares waiting threads from polling.
        """
        lock_path = str(self._paths.store_lock)
        held = _held_locks()
        if lock_path in held:
            raise RuntimeError(f"store transactions do not nest: this thread already holds {lock_path}")
        started = time.monotonic()
        deadline = started + self._lock_timeout
        gate = _gate_for(lock_path)
        if not gate.acquire(timeout=max(deadline - time.monotonic(), 0)):
            raise self._timeout_error(time.monotonic() - started)
        try:
            fd = self._open_lock()
            try:
                self._flock_until(fd, deadline, started)
                held.add(lock_path)
                try:
                    yield
                finally:
                    held.discard(lock_path)
                    # Unlock explicitly: a child forked (without exec) meanwhile shares
                    # this open file description and would otherwise keep the lock.
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        finally:
            gate.release()

    def _open_lock(self) -> int:
        # O_CLOEXEC: a job spawned while we hold the lock must not inherit it.
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            return os.open(self._paths.store_lock, flags, 0o600)
        except OSError as exc:
            raise StoreError(f"cannot open store lock {self._paths.store_lock}: {_reason(exc)}") from exc

    def _flock_until(self, fd: int, deadline: float, started: float) -> None:
        delay = _FIRST_POLL_DELAY
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            except OSError as exc:
                # Never fall back to writing without the lock.
                raise StoreError(f"cannot lock {self._paths.store_lock}: {_reason(exc)}") from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._timeout_error(time.monotonic() - started)
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, _MAX_POLL_DELAY)

    def _timeout_error(self, waited: float) -> LockTimeoutError:
        lock_path = self._paths.store_lock
        return LockTimeoutError(
            f"timed out after {waited:.1f}s waiting for the store lock {lock_path}; "
            f"it is held by {describe_lock_holder(lock_path)}. "
            "Wait for it to finish, or stop that process if it is stuck"
        )


# --- writing --------------------------------------------------------------------


class _AtomicWrite:
    """One write of the store, step by step, remembering the step reached so a failure names it."""

    def __init__(self, paths: Paths, fault: Callable[[str], None] | None) -> None:
        self._paths = paths
        self._fault = fault
        self._step = ""

    def replace(self, data: bytes, keep_backup: bool = True) -> None:
        """Put data in place of the store, or leave the store as it was and raise."""
        store = self._paths.store
        temp = _temp_name(store)
        try:
            self._write_temp(temp, data)
            self._reach("backup")
            if keep_backup:
                self._keep_backup()
            self._reach("rename")
            os.replace(temp, store)
        except BaseException as exc:
            with suppress(OSError):
                os.unlink(temp)
            if isinstance(exc, OSError):
                raise StoreWriteError(
                    f"cannot write store {store}: {_reason(exc)} (at step {self._step}); the store was not changed"
                ) from exc
            raise

    def flush_directory(self) -> None:
        store = self._paths.store
        try:
            self._reach("dirfsync")
            _fsync_directory(self._paths.home)
        except OSError as exc:
            raise StoreWriteError(
                f"wrote store {store} but could not flush its directory {self._paths.home}: {_reason(exc)}; "
                "the new document is in place but may not survive a crash or power loss"
            ) from exc

    def _reach(self, step: str) -> None:
        self._step = step
        if os.environ.get(CRASH_ENV) == step:
            os.kill(os.getpid(), signal.SIGKILL)
        if self._fault is not None:
            self._fault(step)

    def _write_temp(self, temp: Path, data: bytes) -> None:
        self._reach("open")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            self._reach("write")
            _write_all(fd, data)
            self._reach("fsync")
            os.fsync(fd)
        finally:
            os.close(fd)

    def _keep_backup(self) -> None:
        """Make jobs.json.bak the document about to be replaced, atomically.

        A hard link costs no copy, and linking to a temp name first means
        jobs.json.bak is at every instant either the old backup or the new one.
        """
        store, backup = self._paths.store, self._paths.store_backup
        link = _temp_name(backup)
        try:
            os.link(store, link)
        except FileNotFoundError:
            return  # the first write: there is no previous document to keep
        try:
            os.replace(link, backup)
        finally:
            # Normally gone by now. But when the backup already is the store's inode
            # (a writer failed or died between backup and rename), rename(2) of one
            # hard link onto another of the same file does nothing and keeps both names.
            with suppress(FileNotFoundError):
                os.unlink(link)


def _temp_name(target: Path) -> Path:
    return target.with_name(f"{target.name}.tmp.{os.getpid()}.{os.urandom(4).hex()}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _reason(exc: OSError) -> str:
    if exc.strerror:
        return exc.strerror
    if exc.errno:
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


# --- per-process bookkeeping --------------------------------------------------------

_gates: dict[str, threading.Lock] = {}
_gates_guard = threading.Lock()
_held = threading.local()


def _gate_for(lock_path: str) -> threading.Lock:
    with _gates_guard:
        return _gates.setdefault(lock_path, threading.Lock())


def _held_locks() -> set[str]:
    held = getattr(_held, "paths", None)
    if held is None:
        held = _held.paths = set()
    return held


def _forget_locks_in_child() -> None:
    # A forked child has only the forking thread; gates held by the parent's other
    # threads would stay locked forever in it.
    global _gates_guard
    _gates.clear()
    _gates_guard = threading.Lock()
    _held.paths = set()


os.register_at_fork(after_in_child=_forget_locks_in_child)
