"""The loop's seams of issue 21 item 4, with fakes: requests are answered through the small
`Controls` protocol (no engine needed), and the claim-ahead state of `loop.held.HeldRuns`
decides releases, quiet windows and reports without any I/O."""

from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

from cronctl.loop import control
from cronctl.loop.held import STARTED_REPORT_DELAY, HeldRun, HeldRuns
from cronctl.models import JobSpec
from cronctl.paths import Paths
from cronctl.store.claims import ClaimBatch

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


class FakeControls:
    """What a loop offers its requests: force-runs and kills, recorded."""

    def __init__(self) -> None:
        self.forced: list[str] = []
        self.killed: list[tuple[str, str]] = []

    def force(self, job: str) -> ClaimBatch:
        self.forced.append(job)
        return ClaimBatch()  # as if its overlap skipped it

    def kill_run(self, run_id: str, reason: str) -> bool:
        self.killed.append((run_id, reason))
        return True

    def kill_job(self, job: str, reason: str) -> list[str]:
        self.killed.append((job, reason))
        return [f"{job}-run"]


def test_control_requests_are_answered_through_the_controls_protocol(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "home")
    paths.home.mkdir()
    controls = FakeControls()
    forced = control.send_request(paths, "force_run", None, job="nightly")
    killed = control.send_request(paths, "kill", None, job="backup")

    control.serve(paths, controls)

    assert controls.forced == ["nightly"] and controls.killed == [("backup", "operator")]
    answers = {request_id: control.wait_reply(paths, request_id, 5.0, lambda: True) for request_id in (forced, killed)}
    assert answers[forced] == {"ok": False, "skipped": True,
                               "error": "job 'nightly' is running and its overlap is skip"}
    assert answers[killed] == {"ok": True, "run_ids": ["backup-run"]}
    assert not [name for name in os.listdir(paths.control_dir) if name.endswith(control.REQUEST_SUFFIX)]


def held(run_id: str, due: datetime) -> HeldRun:
    return HeldRun("tick", run_id, JobSpec(name="tick", command="true", every=60.0), "slot", due, None, 4242, 1.0)


def test_held_runs_release_near_their_instant_and_start_a_quiet_window() -> None:
    runs = HeldRuns()
    runs.hold(held("soon", T0 + timedelta(seconds=0.01)))
    runs.hold(held("later", T0 + timedelta(seconds=5)))
    runs.lateness.append(0.2)

    due = runs.to_release(T0, force=False)
    assert [run.run_id for run in due] == ["soon"]
    opening = runs.released(due, write_took=0.004)

    assert opening == [(T0 + timedelta(seconds=0.01), ["soon"], 1)]
    assert runs.lateness == [] and runs.release_write == 0.004  # the release write persisted them
    assert runs.quiet(T0) and not runs.quiet(T0 + timedelta(seconds=1))  # the window ends, once
    assert runs.quiet_until is None
    assert [run.run_id for run in runs.to_release(T0, force=True)] == ["later"]


def test_a_released_run_is_reported_once_settled_and_its_lateness_kept() -> None:
    runs = HeldRuns()
    run = held("r1", T0)
    runs.hold(run)
    runs.released([run], write_took=0.001)
    settled = T0 + timedelta(seconds=STARTED_REPORT_DELAY)
    assert runs.to_report(T0, ending=[]) == []  # the burst still starts
    assert runs.to_report(settled, ending=[]) == [run]

    late = runs.started(run, T0 + timedelta(seconds=0.003))

    assert round(late, 6) == 0.003 and runs.lateness == [late]
    assert "r1" not in runs and len(runs) == 0


def test_a_discarded_run_is_told_once() -> None:
    runs = HeldRuns()
    runs.hold(held("gone", T0))
    runs.discard("gone")
    assert "gone" not in runs
    assert runs.was_discarded("gone") and not runs.was_discarded("gone")
