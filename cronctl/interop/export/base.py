"""What every export format shares: the result shape and the notes no engine can honour.

Each format lives in its own module (crontab, systemd, kubernetes) and imports this
one; `formats.export_jobs` picks the format. Nothing here prints or touches the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cronctl.models import JobSpec


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
    return notes + operator_notes(spec)


# Where each engine keeps what SPEC §13's fields say, for the note that they were not exported.
_OPERATOR_HOMES = {
    "user": "the user column of /etc/cron.d, systemd's User=, Kubernetes' securityContext.runAsUser",
    "env_file": "systemd's EnvironmentFile=, Kubernetes' envFrom",
    "limits": "ulimit in the command, systemd's Nice=/LimitAS=/LimitCPU=/LimitNOFILE=/LimitNPROC=, "
              "Kubernetes' resources",
}


def operator_notes(spec: JobSpec) -> list[str]:
    """user, env_file and limits are not written into exports: say so, and where they go instead."""
    notes = []
    for name, value in (("user", spec.user), ("env_file", spec.env_file), ("limits", spec.limits)):
        if value:
            shown = ", ".join(f"{k} {v}" for k, v in value.items()) if isinstance(value, dict) else value
            notes.append(f"{name} {shown}: not exported; set it in the engine ({_OPERATOR_HOMES[name]})")
    return notes
