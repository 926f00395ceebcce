"""Jobs in from a crontab and out to other engines: the files read and written on the way.

`cronctl import-crontab` and `cronctl export` print what these return; nothing here prints.
The store is opened only when it is needed (--apply, or an export of the stored jobs),
through the `open_context` the caller passes, so a crontab translation works without a home.
"""

from __future__ import annotations

import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from cronctl.clock import Clock
from cronctl.context import Context
from cronctl.errors import CronctlError, no_job_named
from cronctl.interop import crontab_import, crontab_yaml
from cronctl.interop.crontab_import import ImportResult
from cronctl.interop.export.base import ExportResult
from cronctl.interop.export.formats import export_jobs
from cronctl.interop.export.service import LoopSetup
from cronctl.jobs.jobfile import load_jobs_file
from cronctl.jobs.state import JobView
from cronctl.models import JobSpec
from cronctl.ops.definitions import apply_file, list_jobs
from cronctl.store.statefiles import write_file_durably

# --- import-crontab --------------------------------------------------------------


@dataclass(frozen=True)
class ImportRequest:
    file: str  # a path, or "-" for standard input
    user_field: bool = False
    prefix: str = ""
    zone: str | None = None  # None: this host's zone
    dry_run: bool = False
    apply: bool = False
    output: Path | None = None


@dataclass(frozen=True)
class CrontabImport:
    result: ImportResult
    report: list[str]  # every line not imported as it was, in words
    yaml_text: str | None = None  # None for a dry run
    target: Path | None = None  # where the jobs file was written; None: nowhere (printed instead)
    plan: dict[str, Any] | None = None  # the apply plan, with --apply


def import_crontab(request: ImportRequest, open_context: Callable[[], Context]) -> CrontabImport:
    """Translate a crontab; unless a dry run, write the jobs file (checked by reading it back)
    to -o, or with --apply to imports/ in the home, and with --apply apply it to the store."""
    text, source = read_input(request.file)
    result = crontab_import.import_crontab(text, source, user_field=request.user_field, prefix=request.prefix,
                                           default_zone=request.zone or crontab_import.host_zone())
    report = crontab_yaml.report_lines(result)
    if request.dry_run:
        return CrontabImport(result, report)
    yaml_text = crontab_yaml.render_yaml(result)
    target = request.output or (import_path(open_context(), request.file) if request.apply else None)
    write_checked_jobs_file(yaml_text, target)
    plan = apply_file(open_context(), str(target)).to_dict() if request.apply and target else None
    return CrontabImport(result, report, yaml_text, target, plan)


def read_input(file: str) -> tuple[str, str]:
    """(text, source name) of a crontab file, or of standard input for "-"."""
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise CronctlError(f"{file}: cannot read: {exc.strerror}") from None
    # Undecodable bytes survive as surrogates, so their line can be reported and skipped.
    return data.decode("utf-8", "surrogateescape"), "standard input" if file == "-" else str(Path(file).absolute())


def import_path(ctx: Context, file: str) -> Path:
    """Where --apply without -o keeps the file: the store records it as the jobs' source."""
    stem = "stdin" if file == "-" else re.sub(r"[^A-Za-z0-9._-]+", "-", str(Path(file).absolute())).strip("-")
    return ctx.paths.home / "imports" / f"{stem}.yaml"


def write_checked_jobs_file(yaml_text: str, target: Path | None) -> None:
    """Write the file (when there is a target) and read it back as `cronctl validate` would;
    without a target the check runs on a temporary copy."""
    if target is not None:
        write_output(target, yaml_text)
        load_jobs_file(target)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "import.yaml"
        path.write_text(yaml_text, encoding="utf-8")
        load_jobs_file(path)


# --- export ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportSource:
    specs: list[JobSpec]
    completed: list[str]  # stored jobs that completed in cronctl: exported paused
    now: datetime  # places the DST windows the formats check


def export_source(file: Path | None, open_context: Callable[[], Context], clock: Clock) -> ExportSource:
    """The jobs of a file, or the stored jobs as they stand (an operator pause kept)."""
    if file is not None:
        return ExportSource(load_jobs_file(file).specs, [], clock.now())
    ctx = open_context()
    views = list_jobs(ctx)
    completed = [view.spec.name for view in views if view.state.get("completed")]
    return ExportSource([_store_spec(view) for view in views], completed, ctx.clock.now())


def export(source: ExportSource, fmt: str, names: list[str],
           loop: LoopSetup | None = None) -> tuple[ExportResult, int]:
    """The jobs of `source` (names: only these) in format `fmt` (`loop`: what systemd-service runs),
    and how many jobs that was."""
    specs = _only(source.specs, names)
    return export_jobs(specs, fmt, source.now, loop), len(specs)


def _store_spec(view: JobView) -> JobSpec:
    """A stored job as it stands: an operator pause, or a finished one-shot or repeat, is exported paused
    (another engine would otherwise fire a job that cronctl will not fire again)."""
    completed = bool(view.state.get("completed"))
    return view.spec.with_changes(paused=view.paused or completed)


def _only(specs: list[JobSpec], names: list[str]) -> list[JobSpec]:
    if not names:
        return specs
    known = {spec.name for spec in specs}
    missing = [name for name in names if name not in known]
    if missing:
        raise no_job_named(*missing)
    return [spec for spec in specs if spec.name in names]


def write_export(output: Path, result: ExportResult) -> Iterator[Path]:
    """Write each file of an export into the directory `output`, yielding each path once written."""
    for item in result.files:
        path = output / item.name
        write_output(path, item.text)
        yield path


def write_output(path: Path, text: str) -> None:
    """Write a file the user named, atomically: a kill or a full disk mid-write leaves the
    file as it was (or absent), never empty or cut short. An existing file keeps its mode."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o7777 if path.exists() else _DEFAULT_MODE
        write_file_durably(path, text.encode("utf-8"), mode)
    except OSError as exc:
        raise CronctlError(f"{path}: cannot write: {exc.strerror or exc}") from None


# What write_text would give under the usual umask 022; the file is a config, not a secret.
_DEFAULT_MODE = 0o644
