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

import fcntl
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

from cronctl.errors import LockTimeoutError, StoreCorruptError, StoreError, StoreWriteError
from cronctl.paths import Paths
from cronctl.store.codec import CURRENT_VERSION, Document, encode_parts, parse, same_bytes, serialize
from cronctl.store.lazyjobs import JobLines, LazyJobs, open_lazily, stream
from cronctl.store.locks import describe_lock_holder
from cronctl.store.statefiles import fsync_directory as _fsync_directory

WRITE_STEPS = ("open", "write", "fsync", "backup", "rename", "dirfsync")
CRASH_ENV = "CRONCTL_FAULT_STORE_CRASH"


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


@dataclass(frozen=True)
class StoreScan:
    """One read of the store, for a reader that takes its jobs one at a time."""

    store: Store
    raw: bytes | None

    def one_by_one(self) -> tuple[Document, Iterator[tuple[str, Any]]]:
        """The top-level keys (with no jobs) and the jobs, each parsed as it is taken.

        The iterator raises NotStoreForm at a line not in serialize()'s form (a store
        written by hand): the reader then starts again with `whole`."""
        streamed = stream(self.raw) if self.raw is not None else None
        if streamed is not None:
            return migrate(streamed[0], self.store._paths.store), streamed[1]
        doc = self.whole()
        return {**doc, "jobs": {}}, iter(doc["jobs"].items())

    def whole(self) -> Document:
        """The document parsed whole, as `Store.read` gives it (and refuses it)."""
        return self.store._decode(self.raw)


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
        # The signature of the document this Store last wrote (or found in serialize()'s
        # form), under the lock: the one whose job lines a transaction may parse lazily.
        self._written: StoreSignature | None = None
        # A transaction's rename not yet made durable by a directory fsync (transaction(flush=False)):
        # the next transaction that writes makes it so, or flush_directory().
        self._dir_unflushed = False

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
        scan, signature = self.scan_if_changed(since)
        return (None if scan is None else scan.whole()), signature

    def chain_free(self) -> bool:
        """Whether no job runs after another: found in the bytes, without parsing them, when
        the document is in serialize()'s form (`show` asks before drawing a chain graph)."""
        raw, _ = self._read_raw()
        lines = JobLines.of(raw) if raw is not None else None
        if lines is not None:
            return lines.chain_free()
        return not any(entry.get("after") for entry in self._decode(raw)["jobs"].values())

    def scan_if_changed(self, since: StoreSignature | None) -> tuple[StoreScan | None, StoreSignature]:
        """(None, sig) when the store is as it was at ``since``; else its bytes, to be read one
        job at a time (`StoreScan`): a long-running reader need not hold every job at once."""
        try:
            if StoreSignature.of(os.stat(self._paths.store)) == since:
                return None, since
        except FileNotFoundError:
            if since == MISSING_STORE:
                return None, since
        except OSError as exc:
            raise self._read_error(exc) from exc
        raw, signature = self._read_raw()
        return StoreScan(self, raw), signature

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
        evidence = jobs_once_defined(self._paths.audit, self._paths.runs_dir)
        if evidence:
            raise StoreCorruptError(
                f"store {self._paths.store} is missing and has no backup, but {evidence} that jobs were "
                "defined here; nothing was changed. Put jobs.json back from a backup of yours; or, to start "
                "again with an empty store (then re-apply your jobs file), move audit.jsonl and runs/ away first"
            )

    def _corrupt(self, detail: str) -> StoreCorruptError:
        if self._paths.store_backup.exists():
            how = f"'cronctl doctor --repair' restores the last good copy {self._paths.store_backup}"
        else:
            how = "There is no backup to restore: fix the file by hand ('cronctl doctor' explains)"
        return StoreCorruptError(f"cannot parse store {self._paths.store}: {detail}; nothing was changed. {how}")

    # --- changing ---------------------------------------------------------------

    @contextmanager
    def transaction(self, lazy_jobs: bool = False, flush: bool = True) -> Iterator[Document]:
        """Lock, read, let the caller mutate the document in place, write it if it changed.

        On an exception in the body nothing is written. A store that does not parse
        raises StoreCorruptError here, before the body runs, so it is never overwritten.

        "Changed" is decided on bytes: the document is serialized and compared with the
        bytes read, so no copy of the document is kept to compare with, and 1, 1.0 and
        true stay different values. A store not in serialize()'s form (written by hand,
        or by an older version) is rewritten in that form by its first transaction.

        `lazy_jobs`: the body looks up the few jobs it changes by name. When the store
        is the document this Store last wrote, ``doc["jobs"]`` is then a `LazyJobs`
        that parses a job's line when it is first looked up, and only changed lines
        are serialized again (see `lazyjobs`). Otherwise it is an ordinary dict.

        `flush=False`: the document is fsync'd and renamed into place, but the directory is
        not fsync'd: until the next transaction that writes (or `flush_directory`), a power
        loss may bring back the document before it (a process's death cannot). For a write
        whose caller makes another at once, with nothing of the first made known before it
        (a chain hop: the upstream's end, then its dependants' claims; store/json_unit.py).
        """
        with self._exclusive():
            self._remove_stale_temps()
            raw, signature = self._read_raw()
            doc, jobs = self._open(raw, signature, lazy_jobs)
            rev = doc["rev"]
            yield doc
            doc["rev"] = rev  # the store's to set, never the caller's
            body = jobs.body() if doc.get("jobs") is jobs and jobs is not None else None
            parts, rev_at = encode_parts(doc, body)
            if same_bytes(parts, serialize(empty_document()) if raw is None else raw):
                self._written = signature  # the bytes are serialize()'s: as good as written
                return
            self._refuse_malformed(doc)
            doc["rev"] = rev + 1
            assert rev_at is not None
            end = b",\n" if parts[rev_at].endswith(b",\n") else b"\n"
            parts[rev_at] = b' "rev": %d%s' % (rev + 1, end)
            write = _AtomicWrite(self._paths, self._fault)
            self._written = write.replace(b"".join(parts))
            # Recorded before the directory fsync: the new document is in place even
            # if that fsync fails and raises.
            self._local.rev = rev + 1
            self._dir_unflushed = True
            if flush:
                write.flush_directory()  # this rename's, and that of any write before it
                self._dir_unflushed = False

    def flush_directory(self) -> None:
        """Make the last rename durable, if a transaction(flush=False) left it not yet so."""
        if self._dir_unflushed:
            _AtomicWrite(self._paths, self._fault).flush_directory()
            self._dir_unflushed = False

    def _open(self, raw: bytes | None, signature: StoreSignature,
              lazy_jobs: bool) -> tuple[Document, LazyJobs | None]:
        """The document to hand a transaction's body, and its lazy jobs if it has them.

        Lazily only bytes this Store wrote itself (same inode, size and mtime): they were
        serialized by us, whole, so every job line is known good without parsing it.
        """
        if lazy_jobs and raw is not None and signature == self._written:
            opened = open_lazily(raw)
            if opened is not None:
                return migrate(opened[0], self._paths.store), opened[1]
        self._written = None
        return self._decode(raw), None

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
            self._written = None  # the backup's bytes may be in any form
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

    def replace(self, data: bytes, keep_backup: bool = True) -> StoreSignature:
        """Put data in place of the store, or leave the store as it was and raise; the new
        store's signature."""
        store = self._paths.store
        temp = _temp_name(store)
        try:
            signature = self._write_temp(temp, data)
            self._reach("backup")
            if keep_backup:
                self._keep_backup()
            self._reach("rename")
            os.replace(temp, store)
            return signature
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

    def _write_temp(self, temp: Path, data: bytes) -> StoreSignature:
        self._reach("open")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            self._reach("write")
            _write_all(fd, data)
            self._reach("fsync")
            os.fsync(fd)
            return StoreSignature.of(os.fstat(fd))  # a rename changes neither inode nor mtime
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


def jobs_once_defined(audit: Path, runs_dir: Path) -> str | None:
    """What in a home shows that it once had jobs, as "X shows" (None: nothing): a job.added
    row in the audit log, or a job's run history. Only read when the store is missing."""
    found: list[str] = []
    try:
        with open(audit, "rb") as handle:
            tail = b""
            while chunk := handle.read(1 << 20):
                if b'"job.added"' in tail + chunk:
                    found.append(f"the audit log {audit}")
                    break
                tail = chunk[-16:]
    except OSError:
        pass
    try:
        if any((entry / "history.jsonl").exists() for entry in runs_dir.iterdir()):
            found.append(f"the run histories in {runs_dir}")
    except OSError:
        pass
    if not found:
        return None
    return " and ".join(found) + (" show" if len(found) > 1 else " shows")
