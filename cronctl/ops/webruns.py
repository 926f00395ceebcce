"""One job's runs as the dashboard keeps them between polls: compact, in end order.

The loop may serve a page for 1,000 jobs with a day of 1-minute runs each: 1.44 million
records, about 1.5 GB as Python dicts. The timeline needs of each run only its start,
end and slot instants, its status and whether it started late, so those are kept in
parallel arrays (25 bytes a run, about 36 MB for that day), decoded from the history
lines through a struct that skips every other field; the strip and the last outcome
keep the last RECENT runs' few fields. A full record is read from the store when asked
for (`HistoryReader.records`).
"""

from __future__ import annotations

from array import array
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

RECENT = 20  # outcomes in a job's strip
STATUSES = ["success", "error", "timeout", "killed", "lost", "not_started", "skipped", "running"]
CODE = {name: index for index, name in enumerate(STATUSES)}
NOT_RUN = {CODE["skipped"], CODE["not_started"]}
NAN = float("nan")


class Run(msgspec.Struct, omit_defaults=True):
    """The fields of a history record the dashboard keeps; the others are skipped when decoding."""

    run_id: str | None = None
    status: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    slot: str | None = None
    late: bool | None = None
    duration: float | None = None
    reason: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    chain: str | None = None
    fault: str | None = None


_RUNS = msgspec.json.Decoder(list[Run])
_RUN = msgspec.json.Decoder(Run)


def decode_runs(data: bytes) -> list[Run]:
    """The complete lines of `data` as Runs; a damaged line is skipped (SPEC §8), the others kept."""
    if not data:
        return []
    try:
        return _RUNS.decode(b"[" + data.rstrip(b"\n").replace(b"\n", b",") + b"]")
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    runs = []
    for line in data.splitlines():
        try:
            runs.append(_RUN.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return runs


def epoch(text: str | None) -> float:
    if not text:
        return NAN
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return NAN


@dataclass
class RunIndex:
    """A job's runs in end order: parallel arrays (epoch seconds, NaN when unknown) and its last runs."""

    ends: array[float] = field(default_factory=lambda: array("d"))
    starts: array[float] = field(default_factory=lambda: array("d"))
    slots: array[float] = field(default_factory=lambda: array("d"))
    codes: bytearray = field(default_factory=bytearray)
    late: bytearray = field(default_factory=bytearray)
    recent: deque[Run] = field(default_factory=lambda: deque(maxlen=RECENT))
    # Bumped when runs are reordered (one ended before the last kept): the timeline starts over.
    version: int = 0

    def __len__(self) -> int:
        return len(self.ends)

    def add(self, runs: list[Run]) -> None:
        for run in runs:
            end = epoch(run.ended_at)
            if len(self.ends) and end < self.ends[-1]:
                self._insert(run, end)
                continue
            self._append(run, end)
        if runs:
            recent = sorted([*self.recent, *runs], key=lambda r: (r.ended_at or "", r.run_id or ""))
            self.recent = deque(recent[-RECENT:], maxlen=RECENT)

    def _append(self, run: Run, end: float) -> None:
        self.ends.append(end)
        self.starts.append(epoch(run.started_at))
        self.slots.append(epoch(run.slot))
        self.codes.append(CODE.get(run.status or "", CODE["error"]))
        self.late.append(1 if run.late else 0)

    def _insert(self, run: Run, end: float) -> None:
        """A run that ended before the last one kept (two writers, or a clock step): put in its place."""
        self._append(run, end)
        ends = self.ends
        order = sorted(range(len(ends)), key=lambda i: ends[i] if ends[i] == ends[i] else float("-inf"))
        self.ends, self.starts, self.slots = (array("d", (column[i] for i in order))
                                              for column in (self.ends, self.starts, self.slots))
        self.codes, self.late = (bytearray(column[i] for i in order) for column in (self.codes, self.late))
        self.version += 1


def last_outcome(index: RunIndex) -> dict[str, Any] | None:
    """The job's last run as the page shows it (status, duration, reason...)."""
    if not index.recent:
        return None
    return msgspec.structs.asdict(index.recent[-1])
