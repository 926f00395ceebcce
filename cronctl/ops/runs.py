"""Use cases about runs: history, logs, force-run, kill (status: statusops). Never print."""

from __future__ import annotations

import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cronctl.context import Context
from cronctl.errors import ConflictError, CronctlError, JobNotFoundError
from cronctl.jobs.state import JobView, get_entry
from cronctl.loop import control
from cronctl.loop.heartbeat import LoopStatus, loop_alive, loop_status
from cronctl.models import AuditEvent, RunStatus
from cronctl.proc import identity as procs
from cronctl.proc.kill import kill_run_processes
from cronctl.proc.liveness import owner_alive
from cronctl.store import claims as claims_mod
from cronctl.store import history
from cronctl.store.claims import Outcome, Owner

if TYPE_CHECKING:
    from cronctl.loop.scheduler import LoopOptions

# --- history and logs ---------------------------------------------------------------


def run_history(ctx: Context, job: str | None, count: int) -> list[dict[str, Any]]:
    if job is not None and job not in ctx.store.read()["jobs"] and not ctx.paths.history(job).exists():
        raise JobNotFoundError(f"no job named '{job}' (see 'cronctl list')")
    records = history.read_records(ctx.paths, job)
    return records[-count:] if count > 0 else []


def log_path(ctx: Context, job: str, run_id: str | None) -> tuple[str, Any]:
    """(run_id, path) of the asked run, else of the newest run (running or finished)."""
    if run_id is None:
        run_id = _newest_run_id(ctx, job)
    path = ctx.paths.run_log(job, run_id)
    if not path.exists():
        raise CronctlError(f"no log for run {run_id} of job '{job}' (logs of the last {history.LOGS_KEPT} runs are kept)")
    return run_id, path


def _newest_run_id(ctx: Context, job: str) -> str:
    doc = ctx.store.read()
    entry = doc["jobs"].get(job)
    running = sorted((entry or {}).get("state", {}).get("claims") or {})
    if running:
        return running[-1]
    records = history.read_records(ctx.paths, job)
    if records:
        return str(records[-1]["run_id"])
    if entry is None:
        raise JobNotFoundError(f"no job named '{job}' (see 'cronctl list')")
    raise CronctlError(f"job '{job}' has not run yet")


def run_is_active(ctx: Context, job: str, run_id: str) -> bool:
    return _active_claim(ctx, job, run_id) is not None


# --- force-run ------------------------------------------------------------------------


@dataclass(frozen=True)
class ForceResult:
    run_id: str
    via_loop: bool
    record: dict[str, Any] | None  # None when not waited for


def force_run(ctx: Context, name: str, wait: bool, timeout: float | None = None) -> ForceResult:
    get_entry(ctx.store.read(), name)
    ctx.audit.append(AuditEvent.FORCE_RUN_REQUESTED, job=name, pid=os.getpid())
    live = loop_alive(ctx.paths, ctx.clock.now())
    if live is not None:
        run_id = _force_through_loop(ctx, name, live)
        record = wait_for_record(ctx, name, run_id, timeout) if wait else None
        return ForceResult(run_id, True, record)
    return _force_here(ctx, name)


def _force_through_loop(ctx: Context, name: str, live: LoopStatus) -> str:
    request_id = control.send_request(ctx.paths, "force_run", live.pid, job=name)
    answer = control.wait_reply(ctx.paths, request_id, 15.0,
                                alive=lambda: loop_alive(ctx.paths, ctx.clock.now()) is not None)
    if answer is None:
        raise CronctlError(f"the running loop (pid {live.pid}) did not answer; check 'cronctl status'")
    if not answer.get("ok"):
        raise ConflictError(str(answer.get("error")))
    return str(answer["run_id"])


def wait_for_record(ctx: Context, job: str, run_id: str, timeout: float | None) -> dict[str, Any]:
    deadline = None if timeout is None else time.monotonic() + timeout
    while deadline is None or time.monotonic() < deadline:
        claim = _active_claim(ctx, job, run_id)
        if claim is None:
            record = history.find_record(ctx.paths, job, run_id)
            if record is not None:
                return record
        elif not owner_alive(claim.get("owner") or {}):
            raise CronctlError(f"the loop running {job} run {run_id} died; the next 'cronctl run' records it "
                               f"as lost (see 'cronctl status')")
        time.sleep(0.1)
    raise CronctlError(f"run {run_id} of '{job}' has not finished yet; follow it with 'cronctl logs {job} -f'")


def _active_claim(ctx: Context, job: str, run_id: str) -> dict[str, Any] | None:
    entry = ctx.store.read()["jobs"].get(job)
    return ((entry or {}).get("state", {}).get("claims") or {}).get(run_id)


def _force_here(ctx: Context, name: str) -> ForceResult:
    """No loop runs: this process claims, supervises and records the run itself."""
    from cronctl.loop.engine import Engine
    from cronctl.proc.supervisor import Supervisor

    done = threading.Event()
    records: list[dict[str, Any]] = []
    engine_box: list[Engine] = []
    supervisor = Supervisor(on_result=lambda r: engine_box[0].on_result(r))
    me = procs.identify(os.getpid())
    owner = Owner(f"cli-{uuid.uuid4().hex[:8]}", os.getpid(), me.start_time if me else 0.0, procs.boot_id())
    engine = Engine(ctx, supervisor, owner)
    engine_box.append(engine)
    engine.finished_listeners.append(lambda record: (records.append(record), done.set()))
    supervisor.start()
    try:
        batch = engine.force(name)
        if not batch.claims:
            raise ConflictError(f"job '{name}' is running and its overlap is skip; not started")
        run_id = batch.claims[0].run_id
        while not done.is_set() and (engine.active or not records):
            engine.wake.wait(1.0)
            engine.wake.clear()
            engine.record_results()
            engine.renew_if_due()
            if not engine.active and not records:
                break
        engine.record_results()
    finally:
        supervisor.shutdown("shutdown", wait=30)
        engine.record_results()
    record = records[0] if records else history.find_record(ctx.paths, name, run_id)
    return ForceResult(run_id, False, record)


def exit_code_of(record: dict[str, Any] | None) -> int:
    """--wait: 0 on success, the job's own exit code on error, 124 on timeout."""
    if record is None:
        return 1
    status = record.get("status")
    if status == RunStatus.SUCCESS.value:
        return 0
    if status == RunStatus.TIMEOUT.value:
        return 124
    if status == RunStatus.ERROR.value and record.get("exit_code") is not None:
        return int(record["exit_code"]) or 1
    if record.get("signal"):
        return 128 + int(record["signal"])
    return 1


# --- kill -------------------------------------------------------------------------------


def kill_job(ctx: Context, name: str) -> list[str]:
    """End every run of a job; recorded `killed` by its loop, or here when no loop supervises it."""
    doc = ctx.store.read()
    view = JobView.from_entry(get_entry(doc, name))
    if not view.claims:
        raise ConflictError(f"job '{name}' is not running")
    live = loop_alive(ctx.paths, ctx.clock.now())
    loop_runs = {r for r, c in view.claims.items() if live and (c.get("owner") or {}).get("pid") == live.pid}
    killed: list[str] = []
    if loop_runs and live is not None:
        request_id = control.send_request(ctx.paths, "kill", live.pid, job=name)
        answer = control.wait_reply(ctx.paths, request_id, 15.0,
                                    alive=lambda: loop_alive(ctx.paths, ctx.clock.now()) is not None)
        if answer and answer.get("ok"):
            killed.extend(answer.get("run_ids") or [])
            for run_id in killed:
                wait_for_record(ctx, name, run_id, timeout=60.0)
    for run_id, claim in view.claims.items():
        if run_id not in killed:
            if _kill_here(ctx, name, run_id, claim):
                killed.append(run_id)
    return killed


def _kill_here(ctx: Context, job: str, run_id: str, claim: dict[str, Any]) -> bool:
    ended = kill_run_processes(run_id, claim.get("child"), float(claim.get("kill_grace") or 10.0))
    outcome = Outcome(RunStatus.KILLED, "operator", fault=None)
    with ctx.store.transaction() as doc:
        current = (doc["jobs"].get(job, {}).get("state", {}).get("claims") or {}).get(run_id)
        if current is None:
            return False
        done = claims_mod.finish(doc, job, run_id, None, outcome, ctx.clock.now())
    done.events[0].details["processes_killed"] = ended
    for event in done.events:
        ctx.audit.append(event.name, **event.details)
    if done.record:
        history.append_record(ctx.paths, done.record)
    return True


def run_loop(ctx: Context, options: LoopOptions) -> int:
    """`cronctl run`: the loop, with the watched file and the metrics textfile as its hooks."""
    # Imported here: the loop's modules are needed by `run` alone, not by history or logs.
    from cronctl.loop.scheduler import FileApplied, LoopHooks, Scheduler
    from cronctl.ops.definitions import apply_file
    from cronctl.ops.metrics import MetricsFile

    def apply_watched(ctx: Context, path: str) -> FileApplied:
        plan = apply_file(ctx, path)
        return FileApplied(changed=bool(plan.changes), summary=(
            f"{len(plan.create)} created, {len(plan.update) + len(plan.adopt)} updated, "
            f"{len(plan.unchanged)} unchanged"))

    metrics = MetricsFile(options.metrics_file)
    from cronctl.ops.probes import probe_routes

    hooks = LoopHooks(apply_file=apply_watched, after_tick=metrics.maybe_write,
                      http_routes=lambda: probe_routes(ctx.paths, ctx.clock))
    return Scheduler(ctx, options, hooks=hooks).run()


def release_stuck_runs(ctx: Context, names: list[str] | None) -> list[str]:
    """resume's first step: runs held by a dead or hung owner are killed and their claims released."""
    from cronctl.loop.heal import Liveness, release_stuck_claims
    from cronctl.proc.liveness import lease_checker

    loop = loop_status(ctx.paths, ctx.clock.now())
    wedged_pid = loop.pid if loop.state == "wedged" else None
    live = Liveness(owner_alive=owner_alive, lease_expired=lease_checker(), monotonic=time.monotonic)
    jobs = names if names is not None else sorted(ctx.store.read()["jobs"])
    released: list[str] = []
    for job in jobs:
        released.extend(release_stuck_claims(ctx, job, live, kill_run_processes, wedged_pid))
    return released
