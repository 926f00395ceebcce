"""`cronctl export`: the same jobs for another engine, and what does not translate.

Each format lives in its own module (export_crontab, export_systemd,
export_kube) and turns one JobSpec into files plus notes; this module picks
the format and collects the result. Nothing here prints or touches the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from cronctl.errors import UsageError
from cronctl.models import JobSpec

FORMATS = ("crontab", "systemd", "kubernetes")


@dataclass(frozen=True)
class ExportFile:
    name: str
    text: str


@dataclass
class ExportResult:
    """Files to write, and per job what the other engine cannot do as cronctl does."""

    fmt: str
    files: list[ExportFile] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)
    # Jobs with no usable output at all (e.g. a one-shot for Kubernetes).
    omitted: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": self.fmt,
            "files": [{"name": f.name, "text": f.text} for f in self.files],
            "untranslated": self.notes,
            "omitted": self.omitted,
        }


def export_jobs(specs: Sequence[JobSpec], fmt: str, now: datetime) -> ExportResult:
    """Translate `specs` into format `fmt`; `now` places the DST windows that are checked."""
    if fmt == "crontab":
        from cronctl.export_crontab import export_crontab

        return export_crontab(specs, now)
    if fmt == "systemd":
        from cronctl.export_systemd import export_systemd

        return export_systemd(specs, now)
    if fmt == "kubernetes":
        from cronctl.export_kube import export_kube

        return export_kube(specs, now)
    raise UsageError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")


def comment_block(lines: Sequence[str], indent: str = "") -> list[str]:
    """Text as `#` comments, one line per entry, with line breaks flattened."""
    return [f"{indent}# {' '.join(line.split())}".rstrip() for line in lines]


def shared_notes(spec: JobSpec, engine: str) -> list[str]:
    """Fields that no exported engine has: the same words for every format."""
    from cronctl.durations import format_duration

    notes = []
    if spec.repeat is not None:
        notes.append(f"repeat {spec.repeat}: {engine} has no run count; stop it by hand after {spec.repeat} runs")
    if spec.grace is not None:
        notes.append(f"grace {format_duration(spec.grace)}: {engine} has no lateness check "
                     "(cronctl's `status --stale`)")
    return notes
