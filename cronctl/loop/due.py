"""When the loop next has something to claim, from the store as last read.

`DueIndex` keeps the engine's read of the store and re-reads it only when the file
changed (one stat otherwise), so an idle tick parses nothing; our own writes
invalidate it. The instants come from pure functions of the document.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from cronctl.store import chain_doc
from cronctl.store import claims as claims_mod
from cronctl.store.jsonstore import Store, StoreSignature
from cronctl.timefmt import from_iso, to_iso


class DueIndex:
    """The store as last read, and the next instants it holds (computed when first asked:
    a force-run without a loop reads the document but never asks when anything is due)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._signature: Any = None
        self._doc: dict[str, Any] | None = None
        self._instants: tuple[datetime | None, datetime | None, int] | None = None

    def refresh(self) -> None:
        doc, signature = self.store.read_if_changed(self._signature)
        if doc is None:
            return
        self.seed(doc, signature)

    def seed(self, doc: dict[str, Any], signature: StoreSignature) -> None:
        """Take a read the caller already made (its signature says when it is out of date)."""
        self._signature = signature
        self._doc = doc
        self._instants = None

    def invalidate(self) -> None:
        """Our own write changed the store: recompute on the next refresh."""
        self._signature = None

    @property
    def doc(self) -> dict[str, Any]:
        """Read-only: every change goes through the lease store, which reads afresh under its lock."""
        self.refresh()
        assert self._doc is not None
        return self._doc

    @property
    def next_due(self) -> datetime | None:
        """earliest_fire of the document."""
        return self._computed()[0]

    @property
    def next_ahead(self) -> datetime | None:
        """The earliest slot that may be claimed ahead."""
        return self._computed()[1]

    @property
    def ahead_count(self) -> int:
        """Slots that fire with (or within a second of) next_ahead."""
        return self._computed()[2]

    def _computed(self) -> tuple[datetime | None, datetime | None, int]:
        if self._instants is None:
            self._instants = next_instants(self._doc) if self._doc is not None else (None, None, 0)
        return self._instants


def next_instants(doc: dict[str, Any]) -> tuple[datetime | None, datetime | None, int]:
    """earliest_fire(doc), the earliest slot that may be claimed ahead, and how many slots
    fire within a second of that one (whose children are to be spawned together).

    One pass over the jobs (it runs on every change of the store, for every job): a job
    whose next slot may be claimed ahead has that fire as its only candidate (no retry,
    not paused, not done), so its state is read once, not twice. Most such jobs fire at
    their slot itself (no jitter, no repeat): their slots are compared as the store's
    fixed-width UTC text, which orders as the instants do, and only the earliest is parsed
    (parsing every slot was most of a loop's start at 10,000 jobs).
    """
    earliest = chain_doc.earliest_chain_fire(doc)  # a chain's ready job or due retry
    fires: list[datetime] = []
    plain: list[str] = []  # canonical UTC text of slots that fire as they are
    for entry in doc["jobs"].values():
        text = _plain_ahead_slot(entry)
        if text is not None:
            plain.append(text)
            continue
        when = claims_mod.ahead_fire(entry)
        if when is not None:
            fires.append(when)
            if earliest is None or when < earliest:
                earliest = when
            continue
        if entry["state"].get("paused") or entry.get("paused"):
            continue
        candidate = claims_mod.wake_at(entry)
        if candidate is not None and (earliest is None or candidate < earliest):
            earliest = candidate
    first_plain = from_iso(min(plain)) if plain else None
    if first_plain is not None and (earliest is None or first_plain < earliest):
        earliest = first_plain
    if not fires and first_plain is None:
        return earliest, None, 0
    ahead = min(fires + ([first_plain] if first_plain is not None else []))
    last = ahead + timedelta(seconds=1)
    last_text = _text_at_or_after(last)
    together = sum(1 for when in fires if when <= last) + sum(1 for text in plain if text <= last_text)
    return earliest, ahead, together


def _plain_ahead_slot(entry: dict[str, Any]) -> str | None:
    """The job's next slot as the store wrote it, when it may be claimed ahead and fires
    exactly at the slot; None when it needs the general rule (claims_mod.ahead_fire)."""
    state = entry["state"]
    text = state.get("next_run_at")
    if not isinstance(text, str) or len(text) != _CANONICAL_LENGTH or not text.endswith("+00:00"):
        return None
    if state.get("claims") or state.get("retry") or state.get("completed") or state.get("paused") \
            or entry.get("paused") or entry.get("repeat") is not None or entry.get("jitter") not in (None, "", "0s"):
        return None
    return text


_CANONICAL_LENGTH = len("2026-01-01T00:00:00.000+00:00")  # to_iso's form: fixed width, UTC


def _text_at_or_after(when: datetime) -> str:
    """The store text of `when` rounded up to the millisecond: text <= it iff instant <= when."""
    rounded = when + timedelta(microseconds=(-when.microsecond) % 1000)
    text = to_iso(rounded)
    assert text is not None
    return text


def earliest_fire(doc: dict[str, Any]) -> datetime | None:
    """The first instant any job may need a claim (a retry or a slot plus its jitter)."""
    return next_instants(doc)[0]
