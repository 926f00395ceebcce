"""Commands that move jobs in from crontab and out to other engines: import-crontab, export.
Registered on the app by cli/main.py.

Every command module is imported for every command, so each command imports the use-case
module it calls (ops.migrate pulls in the crontab and export code) inside its own body.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, List, Optional

import typer

from cronctl.cli import render
from cronctl.cli.app import JsonOpt, app, cli_clock, open_context
from cronctl.errors import CronctlError

if TYPE_CHECKING:
    from cronctl.interop.export.base import ExportResult
    from cronctl.ops.migrate import CrontabImport

OutputOpt = Annotated[Optional[Path], typer.Option("-o", "--output",
                                                   help="Write here instead of standard output.")]


@app.command("import-crontab")
def import_crontab(
    file: Annotated[str, typer.Argument(help="A crontab file (e.g. `crontab -l` output), "
                                        "or - for standard input.")] = "-",
    user_field: Annotated[bool, typer.Option("--user-field", help="Lines carry a user after the time fields "
                                             "(/etc/crontab, /etc/cron.d).")] = False,
    prefix: Annotated[str, typer.Option("--prefix", help="Put NAME- before every job name.")] = "",
    zone: Annotated[Optional[str], typer.Option("--timezone", "--tz", help="Zone of lines without CRON_TZ "
                                                "(default: this host's zone, which cron uses).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the report only; write and apply nothing.")] = False,
    apply: Annotated[bool, typer.Option("--apply", help="Apply the jobs to the store too (the file goes to -o, "
                                        "else to imports/ in the home).")] = False,
    output: OutputOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Translate a crontab into a cronctl jobs file; every line not imported is reported.

    Example: crontab -l | cronctl import-crontab - -o jobs.yaml
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import migrate

    request = migrate.ImportRequest(file, user_field=user_field, prefix=prefix, zone=zone, dry_run=dry_run,
                                    apply=apply, output=output)
    done = migrate.import_crontab(request, open_context)
    if dry_run:
        _print_dry_run(done, apply, json_out)
    else:
        _print_import(done, json_out)


def _print_import(done: CrontabImport, json_out: bool) -> None:
    if json_out:
        render.print_json({**done.result.to_dict(), "report": done.report,
                           "file": str(done.target) if done.target else None,
                           "yaml": None if done.target else done.yaml_text, "apply": done.plan})
        return
    if done.target is None:
        render.say((done.yaml_text or "").rstrip("\n"))
    else:
        render.say(f"wrote {done.target}: {len(done.result.jobs)} job(s), "
                   f"{len(done.result.skipped)} line(s) skipped")
    for line in done.report:
        render.warn(line)
    if done.plan is not None:
        render.apply_plan(done.plan, dry_run=False)


def _print_dry_run(done: CrontabImport, apply: bool, json_out: bool) -> None:
    data: dict[str, Any] = done.result.to_dict()
    if json_out:
        render.print_json({**data, "report": done.report})
        return
    for line in done.report:
        render.say(line)
    names = ", ".join(job["name"] for job in data["jobs"]) or "none"
    render.say(f"{len(data['jobs'])} job(s) would be imported: {names}")
    if apply:
        render.say("--dry-run: nothing written, nothing applied")


@app.command("export")
def export_cmd(
    fmt: Annotated[str, typer.Option("--format", help="crontab | systemd | kubernetes | systemd-service "
                                     "(a unit for the loop itself)")],
    names: Annotated[Optional[List[str]], typer.Argument(help="Jobs to export (default: all).")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", help="Directory to write the files to "
                                                   "(default: standard output).")] = None,
    file: Annotated[Optional[Path], typer.Option("-f", "--file", help="Export the jobs of this YAML file "
                                                 "instead of the store.")] = None,
    allow_partial: Annotated[bool, typer.Option("--allow-partial", help="Exit 0 even when some jobs cannot be "
                                                "exported (they are named on stderr; default: exit 1).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """The jobs for another engine, listing per job what does not translate.

    A job that cannot be exported at all is named and the command exits 1 (the jobs that
    translate are still written), unless --allow-partial.

    Example: cronctl export --format systemd backup -o units/
    """
    # Imported here: only this command needs it (start-up time).
    from cronctl.ops import migrate

    source = migrate.export_source(file, open_context, cli_clock())
    for job in source.completed:
        render.warn(f"{job}: completed in cronctl; exported paused")
    loop = _loop_setup(file) if fmt == "systemd-service" else None
    result, count = migrate.export(source, fmt, names or [], loop)
    if json_out and output is None:
        render.print_json(result.to_dict())
    else:
        _write_or_print(result, fmt, output)
        _warn_untranslated(result, count, fmt)
    if result.omitted and not allow_partial:
        raise CronctlError(f"{len(result.omitted)} of {count} job(s) not exported: {', '.join(result.omitted)}; "
                           "the others were; --allow-partial accepts a partial export")


def _write_or_print(result: ExportResult, fmt: str, output: Path | None) -> None:
    from cronctl.ops.migrate import write_export  # loaded already by the command

    if output is not None:
        for path in write_export(output, result):
            render.say(f"wrote {path}")
    elif result.files:
        separator = "---\n" if fmt == "kubernetes" else "\n"
        render.say(separator.join(item.text for item in result.files).rstrip("\n"))


def _loop_setup(file: Path | None) -> Any:
    """For --format systemd-service: this very cronctl, the home in use, the jobs file given."""
    import sys

    from cronctl.interop.export.service import LoopSetup

    script = Path(sys.argv[0]).absolute()
    command = (str(script),) if script.name == "cronctl" and script.exists() else (sys.executable, "-m", "cronctl")
    ctx = open_context()
    store = ctx.backend.url.without_password if ctx.backend.url is not None else None
    return LoopSetup(command, ctx.paths.home, file.absolute() if file else None, store)


def _warn_untranslated(result: ExportResult, count: int, fmt: str = "") -> None:
    """What the other engine will not do as cronctl does, per job."""
    for job, notes in result.notes.items():
        for note in notes:
            render.warn(f"{job}: not translated: {note}")
    for job in result.omitted:
        render.warn(f"{job}: not exported (see above)")
    if not count and fmt != "systemd-service":  # that one exports the loop's unit, jobs or none
        render.warn("no jobs to export")
