"""When the loop next has something to claim, from the store as last read.

`DueIndex` keeps the engine's read of the store and re-reads it only when the file
changed (one stat otherwise), so an idle tick parses nothing; our own writes
invalidate it. The instants come from pure functions of the document.

A loop reads the store's jobs one line at a time (`Store.scan_if_changed`): each job
adds to the instants and to the count, and only the jobs the loop watches stay in memory
(a claim, a failed last run, an outbox entry: what healing and the outbox look at). At
10,000 jobs the parsed store was 24 MB of Python objects held for as long as it was
current; now it is the few watched jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from cronctl.loop.late_watch import LateWatch
from cronctl.store import chain_doc
from cronctl.store import claims as claims_mod
from cronctl.store.jsonstore import Store, StoreScan, StoreSignature
from cronctl.store.lazyjobs import NotStoreForm
from cronctl.store.notify_owed import ALERTS, OWED
from cronctl.store.outbox import PENDING
from cronctl.store.suspects import is_suspect
from cronctl.timefmt import from_iso, to_iso

Instants = tuple[datetime | None, datetime | None, int]
# What the notification pump looks at (loop/notify_worker.py): owed entries, and a job reported
# stale or failing (the health pass clears it), or one its config blocks.
NOTIFY_WATCHED = (OWED, ALERTS, "blocked")


class DueIndex:
    """The store as last read, the next instants it holds and how many jobs it has."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._signature: Any = None
        self._doc: dict[str, Any] | None = None
        self._instants: Instants | None = None
        self._job_count = 0
        self._steady = False  # within steady(): looked at the store already
        self._looked = False
        # Jobs with notify targets late (at the least) by this instant are kept too, and the
        # earliest instant another may turn late (loop/late_watch.py): see `watch_late`.
        self._late_cutoff: datetime | None = None
        self._next_late: datetime | None = None

    @contextmanager
    def steady(self) -> Iterator[None]:
        """Within the block the store is looked at (one stat) once, however many steps of a
        tick ask (healing, the outbox, claims); our own writes still invalidate at once."""
        self._steady, self._looked = True, False
        try:
            yield
        finally:
            self._steady = False

    def refresh(self) -> None:
        if self._steady and self._looked and self._signature is not None:
            return
        self._looked = True
        scan, signature = self.store.scan_if_changed(self._signature)
        if scan is None:
            return
        late = LateWatch(self._late_cutoff)
        self._doc, self._job_count, self._instants = _summarize(scan, late)
        self._next_late = late.next_bound
        self._signature = signature

    def seed(self, doc: dict[str, Any], signature: StoreSignature) -> None:
        """Take a whole read the caller already made (its signature says when it is out of
        date); its instants are computed when first asked (force-run never asks)."""
        self._signature = signature
        self._doc = doc
        self._job_count = len(doc["jobs"])
        self._instants = None
        self._next_late = None  # every job is in memory until the next read

    def invalidate(self) -> None:
        """Our own write changed the store: recompute on the next refresh."""
        self._signature = None

    def watch_late(self, now: datetime) -> bool:
        """For the health pass: once a job with notify targets may have gone late since the
        last read (its slot plus grace passed and nothing was written), read again keeping the
        jobs late by `now`. True when it read again; an on-time loop never does."""
        self.refresh()
        if self._next_late is None or self._next_late > now:
            return False
        self._late_cutoff = now
        self.invalidate()
        self.refresh()
        return True

    @property
    def doc(self) -> dict[str, Any]:
        """The store as last read, with (at least) every job the loop watches: a claim, a failed
        last run, an outbox entry. Read-only: every change goes through the lease store, which
        reads afresh under its lock."""
        self.refresh()
        assert self._doc is not None
        return self._doc

    @property
    def signature(self) -> StoreSignature | None:
        """Of the store as last read (None: to be read again)."""
        signature: StoreSignature | None = self._signature
        return signature

    @property
    def watching(self) -> bool:
        """Whether the last read kept any job in memory (a claim, a failed run, something owed)
        or may see one go late: then the loop ticks every second (see Scheduler._idle_hint)."""
        return bool(self._doc is None or self._doc["jobs"] or self._next_late is not None)

    @property
    def job_count(self) -> int:
        return self._job_count

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

    def _computed(self) -> Instants:
        if self._instants is None:
            self._instants = next_instants(self._doc) if self._doc is not None else (None, None, 0)
        return self._instants


def watched(entry: dict[str, Any]) -> bool:
    """Whether the loop keeps this job in memory between reads: healing or the outbox may need it."""
    state = entry["state"]
    return is_suspect(entry) or PENDING in state or any(key in state for key in NOTIFY_WATCHED)


def _summarize(scan: StoreScan, late: LateWatch) -> tuple[dict[str, Any], int, Instants]:
    """The watched jobs (under the store's top-level keys), the job count and the instants."""
    top, jobs = scan.one_by_one()
    if not top.get("chains"):
        try:
            return _fold(top, jobs, None, late)
        except NotStoreForm:
            pass  # a store written by hand: parsed whole below (which says what is wrong, if anything)
    # Chains are decided over every job (a running node's claim), so such a store is read whole.
    doc = scan.whole()
    late.reset()  # what a first try noted is counted again
    return _fold(doc, iter(doc["jobs"].items()), chain_doc.earliest_chain_fire(doc), late)


def _fold(top: dict[str, Any], jobs: Iterator[tuple[str, Any]],
          chain_fire: datetime | None, late: LateWatch) -> tuple[dict[str, Any], int, Instants]:
    found = _Instants()
    kept: dict[str, Any] = {}
    count = 0
    for name, entry in jobs:
        count += 1
        found.add(entry)
        if watched(entry) or late.keeps(entry):
            kept[name] = entry
    return {**top, "jobs": kept}, count, found.result(chain_fire)


def next_instants(doc: dict[str, Any]) -> Instants:
    """earliest_fire(doc), the earliest slot that may be claimed ahead, and how many slots
    fire within a second of that one (whose children are to be spawned together)."""
    found = _Instants()
    for entry in doc["jobs"].values():
        found.add(entry)
    return found.result(chain_doc.earliest_chain_fire(doc))  # a chain's ready job or due retry


class _Instants:
    """next_instants, one job at a time.

    A job whose next slot may be claimed ahead has that fire as its only candidate (no
    retry, not paused, not done), so its state is read once, not twice. Most such jobs
    fire at their slot itself (no jitter, no repeat): their slots are compared as the
    store's fixed-width UTC text, which orders as the instants do, and only the earliest
    is parsed (parsing every slot was most of a loop's start at 10,000 jobs).
    """

    def __init__(self) -> None:
        self.earliest: datetime | None = None
        self.fires: list[datetime] = []
        self.plain: list[str] = []  # canonical UTC text of slots that fire as they are

    def add(self, entry: dict[str, Any]) -> None:
        text = _plain_ahead_slot(entry)
        if text is not None:
            self.plain.append(text)
            return
        when = claims_mod.ahead_fire(entry)
        if when is not None:
            self.fires.append(when)
            self._consider(when)
            return
        if entry["state"].get("paused") or entry.get("paused"):
            return
        self._consider(claims_mod.wake_at(entry))

    def _consider(self, when: datetime | None) -> None:
        if when is not None and (self.earliest is None or when < self.earliest):
            self.earliest = when

    def result(self, chain_fire: datetime | None) -> Instants:
        self._consider(chain_fire)
        first_plain = from_iso(min(self.plain)) if self.plain else None
        self._consider(first_plain)
        fires = self.fires + ([first_plain] if first_plain is not None else [])
        if not fires:
            return self.earliest, None, 0
        ahead = min(fires)
        last = ahead + timedelta(seconds=1)
        last_text = _text_at_or_after(last)
        together = sum(1 for when in self.fires if when <= last) + sum(1 for text in self.plain if text <= last_text)
        return self.earliest, ahead, together


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
