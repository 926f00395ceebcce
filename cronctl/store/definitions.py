"""Job definitions as the defining commands see the store: read a job, list the names, and
change a named set of jobs in one write that also carries its audit rows.

`Definitions` stands beside `LeaseStore` (store/leases.py): the lease store owns the run
path, this owns what `add`, `edit`, `remove`, `pause`, `resume`, `apply` (and `run -f`,
`migrate --apply`) write. The rules (validation, conflicts, chain rules, messages) stay in
ops/definitions.py, written once; a backend only locks, hands over entries and writes.

An entry is a job as the JSON document holds it: `{**spec.to_dict(), "state": state}`, its
live claims in `state["claims"]`.

- `JsonDefinitions` (here): the document under the store's flock, as always; the audit rows
  go to the log once the document is in place (the file log cannot share its write).
- `PgDefinitions` (store/pg/definitions.py): locks only the rows it names and writes its
  audit rows in the same transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from cronctl.errors import ConflictError
from cronctl.models import JobSpec
from cronctl.store.audit import AuditLog
from cronctl.store.jsonstore import Store

AuditRows = list[tuple[str, dict[str, Any]]]


def already_exists(name: str) -> ConflictError:
    """What adding a job that exists says, whoever finds it (the command, or the store's write)."""
    return ConflictError(f"job '{name}' already exists; change it with 'cronctl edit {name}'")


class DefinitionsEdit(Protocol):
    """One write of definitions, open: the entries it locked and the changes it will commit."""

    @property
    def entries(self) -> Mapping[str, dict[str, Any]]:
        """The locked jobs that exist among those asked for (names, and the source's jobs), by name.

        An entry may be changed in place; it is written only through `replace`."""

    def add(self, entry: dict[str, Any]) -> None:
        """A new job (its name is the entry's `name`); one added meanwhile by another writer
        fails the write (`already_exists` for a single job)."""

    def replace(self, name: str, entry: dict[str, Any]) -> None:
        """A locked job, with its new spec and state (its claims are the lease store's)."""

    def remove(self, name: str) -> None:
        """A locked job gone; its live runs, if any were ended first (`remove --force`), end with it."""

    def linked_specs(self, upstreams: Iterable[str]) -> dict[str, JobSpec]:
        """What the chain rules judge by: every stored job in a chain and the stored jobs named
        in `upstreams` (the `after` of the specs being written), as specs."""

    def audit(self, rows: AuditRows) -> None:
        """Audit rows (event, details) that record this write: kept only if it commits."""


class Definitions(Protocol):
    """The definitions of one store (see the module doc)."""

    def get(self, name: str) -> dict[str, Any] | None:
        """Job `name`'s entry as stored now; None: no such job."""

    def names(self) -> set[str]:
        """Every job's name."""

    def editing(self, names: Collection[str] | None,
                source: str | None = None) -> AbstractContextManager[DefinitionsEdit]:
        """Lock the jobs named (None: every job), and with `source` also every job that file
        defined; the body's changes and audit rows are written on a clean exit, nothing on
        an exception."""

    def prepare(self, entries: Mapping[str, dict[str, Any]], rows: AuditRows) -> None:
        """Work the next `editing` may reuse, done now, before its transaction opens: new jobs'
        entries (by name) and audit rows it may write. The write uses what was prepared only for
        the very same objects (`add(entries[name])`, `audit([... rows[i] ...])`); the rest it
        encodes itself. A store with nothing to gain does nothing."""


class JsonEdit:
    """A `DefinitionsEdit` over the document of one store transaction."""

    def __init__(self, doc: dict[str, Any], names: Collection[str] | None, source: str | None) -> None:
        self._jobs: dict[str, Any] = doc["jobs"]
        self._entries = _asked(self._jobs, names, source)
        self.rows: AuditRows = []

    @property
    def entries(self) -> Mapping[str, dict[str, Any]]:
        return self._entries

    def add(self, entry: dict[str, Any]) -> None:
        self._jobs[entry["name"]] = entry

    def replace(self, name: str, entry: dict[str, Any]) -> None:
        self._jobs[name] = entry  # in place: the document keeps its order, its bytes their form

    def remove(self, name: str) -> None:
        del self._jobs[name]

    def linked_specs(self, upstreams: Iterable[str]) -> dict[str, JobSpec]:
        from cronctl.jobs.state import JobView

        # The whole document is in hand: every stored job, as the chain rules always saw it.
        return {name: JobView.from_entry(entry).spec for name, entry in self._jobs.items()}

    def audit(self, rows: AuditRows) -> None:
        self.rows.extend(rows)


def _asked(jobs: dict[str, Any], names: Collection[str] | None, source: str | None) -> dict[str, Any]:
    if names is None:
        return jobs
    asked = {name: jobs[name] for name in names if name in jobs}
    if source is not None:
        asked.update((name, entry) for name, entry in jobs.items() if entry.get("source") == source)
    return asked


class JsonDefinitions:
    """`Definitions` over the JSON document (store/jsonstore.py) and the audit log file."""

    def __init__(self, store: Store, audit: AuditLog) -> None:
        self.store = store
        self.audit = audit

    def get(self, name: str) -> dict[str, Any] | None:
        entry: dict[str, Any] | None = self.store.read()["jobs"].get(name)
        return entry

    def names(self) -> set[str]:
        return set(self.store.read()["jobs"])

    @contextmanager
    def editing(self, names: Collection[str] | None, source: str | None = None) -> Iterator[DefinitionsEdit]:
        with self.store.transaction() as doc:
            edit = JsonEdit(doc, names, source)
            yield edit
        # After the document is in place, as every definitions command always wrote them.
        if edit.rows:
            self.audit.append_many(edit.rows)

    def prepare(self, entries: Mapping[str, dict[str, Any]], rows: AuditRows) -> None:
        """Nothing: the document is encoded whole at its write, under the store's lock."""
