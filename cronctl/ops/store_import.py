"""`cronctl store import-json`: a home's JSON store copied into the PostgreSQL store of `--store`.

The JSON store is only read. A job with a run in flight is refused: that run belongs to
the loop of the JSON home, and no loop of the database would own it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cronctl.context import Context
from cronctl.errors import ConflictError, StoreError
from cronctl.paths import open_home
from cronctl.store import history
from cronctl.store.jsonstore import Store
from cronctl.store.schema import claims_of

if TYPE_CHECKING:
    from cronctl.store.cluster import Imported


@dataclass(frozen=True)
class ImportReport:
    source: Path
    target: str  # the store URL, password redacted
    imported: Imported


def import_json(ctx: Context, source: Path | None, replace: bool) -> ImportReport:
    """Copy the JSON store of `source` (default: this invocation's home) in one transaction."""
    cluster = ctx.cluster
    if cluster is None:
        raise StoreError("store import-json: name the PostgreSQL store with --store URL or $CRONCTL_STORE")
    paths = open_home(source.expanduser().absolute(), create=False) if source is not None else ctx.paths
    doc = Store(paths).read()
    in_flight = sorted(f"{name} ({', '.join(sorted(claims_of(entry)))})"
                       for name, entry in doc["jobs"].items() if claims_of(entry))
    if in_flight:
        raise ConflictError(f"runs in flight in {paths.home}: {'; '.join(in_flight)}; stop its loop and let them "
                            "end (or 'cronctl kill') before importing")
    records = history.read_records(paths, None)
    # A lost connection or a silent database is told as `apply` tells it, never as an internal error.
    imported = cluster.import_document(dict(doc), records, replace)
    return ImportReport(paths.home, cluster.shown, imported)
