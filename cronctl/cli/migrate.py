"""Commands that move jobs in from crontab and out to other engines. Registered on the app by cli.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from cronctl.cli.app import JsonOpt, _ctx, _state, app
from cronctl.errors import CronctlError

OutputOpt = Annotated[Optional[Path], typer.Option("-o", "--output", help="Write here instead of standard output.")]


@app.command("import-crontab")
def import_crontab(
    file: Annotated[str, typer.Argument(help="A crontab file (e.g. `crontab -l` output), or - for standard input.")] = "-",
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
    from cronctl.cli import render
    from cronctl.interop import crontab_import, crontab_yaml

    text, source = _read_input(file)
    result = crontab_import.import_crontab(text, source, user_field=user_field, prefix=prefix,
                                           default_zone=zone or crontab_import.host_zone())
    report = crontab_yaml.report_lines(result)
    if dry_run:
        _print_dry_run(result.to_dict(), report, apply, json_out)
        return
    yaml_text = crontab_yaml.render_yaml(result)
    target = output or (_import_path(file) if apply else None)
    _check_jobs_file(yaml_text, target)
    plan = None
    if apply:
        from cronctl.ops import definitions as ops

        assert target is not None
        plan = ops.apply_file(_ctx(), str(target)).to_dict()
    if json_out:
        render.print_json({**result.to_dict(), "report": report, "file": str(target) if target else None,
                           "yaml": None if target else yaml_text, "apply": plan})
        return
    if target is None:
        render.say(yaml_text.rstrip("\n"))
    else:
        render.say(f"wrote {target}: {len(result.jobs)} job(s), {len(result.skipped)} line(s) skipped")
    for line in report:
        render.warn(line)
    if plan is not None:
        render.apply_plan(plan, dry_run=False)


def _read_input(file: str) -> tuple[str, str]:
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        raise CronctlError(f"{file}: cannot read: {exc.strerror}") from None
    # Undecodable bytes survive as surrogates, so their line can be reported and skipped.
    return data.decode("utf-8", "surrogateescape"), "standard input" if file == "-" else str(Path(file).absolute())


def _import_path(file: str) -> Path:
    """Where --apply without -o keeps the file: the store records it as the jobs' source."""
    ctx = _ctx()
    stem = "stdin" if file == "-" else re.sub(r"[^A-Za-z0-9._-]+", "-", str(Path(file).absolute())).strip("-")
    return ctx.paths.home / "imports" / f"{stem}.yaml"


def _check_jobs_file(yaml_text: str, target: Path | None) -> None:
    """Write the file (when there is a target) and read it back as `cronctl validate` would."""
    import tempfile

    from cronctl.jobs.jobfile import load_jobs_file

    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml_text, encoding="utf-8")
        load_jobs_file(target)
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "import.yaml"
        path.write_text(yaml_text, encoding="utf-8")
        load_jobs_file(path)


def _print_dry_run(data: dict[str, Any], report: list[str], apply: bool, json_out: bool) -> None:
    from cronctl.cli import render

    if json_out:
        render.print_json({**data, "report": report})
        return
    for line in report:
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
    json_out: JsonOpt = False,
) -> None:
    """The jobs for another engine, listing per job what does not translate.

    Example: cronctl export --format systemd backup -o units/
    """
    from cronctl.cli import render
    from cronctl.interop.export.formats import export_jobs

    specs, now = _export_specs(file, names or [])
    result = export_jobs(specs, fmt, now, _loop_setup(file) if fmt == "systemd-service" else None)
    if json_out and output is None:
        render.print_json(result.to_dict())
        return
    if output is not None:
        output.mkdir(parents=True, exist_ok=True)
        for item in result.files:
            (output / item.name).write_text(item.text, encoding="utf-8")
            render.say(f"wrote {output / item.name}")
    else:
        separator = "---\n" if fmt == "kubernetes" else "\n"
        if result.files:
            render.say(separator.join(item.text for item in result.files).rstrip("\n"))
    for job, notes in result.notes.items():
        for note in notes:
            render.warn(f"{job}: not translated: {note}")
    for job in result.omitted:
        render.warn(f"{job}: not exported (see above)")
    if not specs:
        render.warn("no jobs to export")


def _loop_setup(file: Path | None) -> Any:
    """For --format systemd-service: this very cronctl, the home in use, the jobs file given."""

    from cronctl.interop.export.service import LoopSetup
    from cronctl.paths import resolve_home

    script = Path(sys.argv[0]).absolute()
    command = (str(script),) if script.name == "cronctl" and script.exists() else (sys.executable, "-m", "cronctl")
    return LoopSetup(command, resolve_home(_state["home"]), file.absolute() if file else None)


def _store_spec(view: Any) -> Any:
    """A stored job as it stands: an operator pause, or a finished one-shot or repeat, is exported paused
    (another engine would otherwise fire a job that cronctl will not fire again)."""
    from cronctl.cli import render

    completed = bool(view.state.get("completed"))
    if completed:
        render.warn(f"{view.spec.name}: completed in cronctl; exported paused")
    return view.spec.with_changes(paused=view.paused or completed)


def _export_specs(file: Path | None, names: list[str]) -> tuple[list[Any], Any]:
    """The jobs to export (a file's, or the store's with their operator pause) and `now`."""
    from cronctl.clock import SystemClock
    from cronctl.errors import JobNotFoundError

    if file is not None:
        from cronctl.jobs.jobfile import load_jobs_file

        specs = load_jobs_file(file).specs
        now = (_state["clock"] or SystemClock()).now()
    else:
        from cronctl.ops import definitions as ops

        ctx = _ctx()
        specs = [_store_spec(view) for view in ops.list_jobs(ctx)]
        now = ctx.clock.now()
    if names:
        known = {spec.name for spec in specs}
        missing = [name for name in names if name not in known]
        if missing:
            raise JobNotFoundError(f"no job named {', '.join(repr(n) for n in missing)} (see 'cronctl list')")
        specs = [spec for spec in specs if spec.name in names]
    return specs, now
