"""ops.migrate and ops.resume: the use cases behind import-crontab, export and resume, without the CLI."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from cronctl.clock import FakeClock
from cronctl.context import Context
from cronctl.errors import CronctlError, JobNotFoundError
from cronctl.ops import migrate
from cronctl.ops.definitions import add_job, list_jobs, pause_job, spec_from_options
from cronctl.ops.resume import resume

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
CRONTAB = "MAILTO=root\n0 3 * * * /usr/bin/backup\n@reboot /usr/bin/boot-task\n"


@pytest.fixture
def ctx(tmp_path: Path) -> Context:
    return Context.open(tmp_path / "home", clock=FakeClock(NOW))


def no_context() -> Context:
    raise AssertionError("the store was opened although the command does not need it")


def crontab_file(tmp_path: Path) -> Path:
    path = tmp_path / "crontab"
    path.write_text(CRONTAB)
    return path


def test_a_translation_without_apply_opens_no_store(tmp_path: Path) -> None:
    output = tmp_path / "out" / "jobs.yaml"
    done = migrate.import_crontab(migrate.ImportRequest(str(crontab_file(tmp_path)), zone="UTC", output=output),
                                  no_context)
    assert done.target == output and done.plan is None
    assert output.read_text() == done.yaml_text
    assert [job.line for job in done.result.jobs] == [2] and any("@reboot" in line for line in done.report)


def test_a_dry_run_writes_nothing(tmp_path: Path) -> None:
    output = tmp_path / "jobs.yaml"
    done = migrate.import_crontab(migrate.ImportRequest(str(crontab_file(tmp_path)), zone="UTC", dry_run=True,
                                                        apply=True, output=output), no_context)
    assert (done.yaml_text, done.target, done.plan) == (None, None, None)
    assert not output.exists()


def test_apply_without_output_keeps_the_file_in_the_home_and_applies_it(tmp_path: Path, ctx: Context) -> None:
    done = migrate.import_crontab(migrate.ImportRequest(str(crontab_file(tmp_path)), zone="UTC", apply=True),
                                  lambda: ctx)
    assert done.target is not None and done.target.parent == ctx.paths.home / "imports"
    assert done.plan is not None and done.plan["applied"] and done.plan["create"]
    assert [view.spec.source for view in list_jobs(ctx)] == [str(done.target)] * len(done.plan["create"])


def test_an_unreadable_crontab_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(CronctlError, match=f"{missing}: cannot read"):
        migrate.import_crontab(migrate.ImportRequest(str(missing)), no_context)


def test_stored_jobs_are_exported_as_they_stand(ctx: Context) -> None:
    for name in ("plain", "held", "done"):
        add_job(ctx, spec_from_options(name, {"every": "1h", "command": "true"}))
    pause_job(ctx, "held")
    with ctx.store.transaction() as doc:
        doc["jobs"]["done"]["state"]["completed"] = True
    source = migrate.export_source(None, lambda: ctx, FakeClock(datetime(2000, 1, 1, tzinfo=timezone.utc)))
    assert source.completed == ["done"]
    assert {spec.name: spec.paused for spec in source.specs} == {"done": True, "held": True, "plain": False}
    assert source.now == NOW, "the store's jobs are placed by the context's clock"


def test_exporting_an_unknown_job_names_it(ctx: Context) -> None:
    add_job(ctx, spec_from_options("known", {"every": "1h", "command": "true"}))
    source = migrate.export_source(None, lambda: ctx, FakeClock(NOW))
    with pytest.raises(JobNotFoundError, match="'ghost'"):
        migrate.export(source, "crontab", ["known", "ghost"])
    result, count = migrate.export(source, "crontab", ["known"])
    assert count == 1 and result.files


def test_each_export_file_exists_when_it_is_reported(tmp_path: Path, ctx: Context) -> None:
    for name in ("a", "b"):
        add_job(ctx, spec_from_options(name, {"cron": "0 3 * * *", "command": "true"}))
    result, _ = migrate.export(migrate.export_source(None, lambda: ctx, FakeClock(NOW)), "systemd", [])
    written = []
    for path in migrate.write_export(tmp_path / "units", result):
        assert path.read_text() == next(f.text for f in result.files if f.name == path.name)
        written.append(path.name)
    assert written == [item.name for item in result.files] and len(written) >= 4


def test_resume_of_an_unknown_job_changes_nothing(ctx: Context) -> None:
    add_job(ctx, spec_from_options("real", {"every": "1h", "command": "true"}))
    pause_job(ctx, "real")
    before = ctx.paths.store.read_bytes()
    with pytest.raises(JobNotFoundError, match="'ghost'"):
        resume(ctx, ["real", "ghost"])
    assert ctx.paths.store.read_bytes() == before


def test_resume_clears_the_pause_and_releases_nothing_without_a_stuck_run(ctx: Context) -> None:
    add_job(ctx, spec_from_options("real", {"every": "1h", "command": "true"}))
    pause_job(ctx, "real")
    done = resume(ctx, None)
    assert done.released == []
    assert [(job.name, job.cleared) for job in done.jobs] == [("real", ["paused"])]
    assert not list_jobs(ctx)[0].paused
