"""`cronctl export`: the same jobs for another engine, and what does not translate.

Each format lives in its own module and turns JobSpecs into files plus notes; this
module picks the format (importing only that one) and returns its result. Nothing here
prints or touches the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from cronctl.errors import UsageError
from cronctl.interop.export.base import ExportResult
from cronctl.models import JobSpec

if TYPE_CHECKING:
    from cronctl.interop.export.service import LoopSetup

FORMATS = ("crontab", "systemd", "kubernetes", "systemd-service")


def export_jobs(specs: Sequence[JobSpec], fmt: str, now: datetime, loop: LoopSetup | None = None) -> ExportResult:
    """Translate `specs` into format `fmt`; `now` places the DST windows that are checked.

    `systemd-service` is a unit for the loop itself, which runs `loop` (the command and home in use).
    """
    if fmt == "crontab":
        from cronctl.interop.export.crontab import export_crontab

        return export_crontab(specs, now)
    if fmt == "systemd":
        from cronctl.interop.export.systemd import export_systemd

        return export_systemd(specs, now)
    if fmt == "kubernetes":
        from cronctl.interop.export.kubernetes import export_kube

        return export_kube(specs, now)
    if fmt == "systemd-service" and loop is not None:
        from cronctl.interop.export.service import export_service

        return export_service(specs, loop)
    raise UsageError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
