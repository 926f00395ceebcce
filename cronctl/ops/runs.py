"""Use cases about runs: history, logs, force-run, kill (status: statusops). Never print."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cronctl.context import Context
from cronctl.errors import ConflictError, CronctlError, no_job_named
from cronctl.jobs.state import get_entry
from cronctl.loop import control
from cronctl.loop.heartbeat import LoopStatus, loop_alive, loop_status
from cronctl.models import AuditEvent, RunStatus
from cronctl.proc import identity as procs
from cronctl.proc.kill import kill_run_processes
from cronctl.store import history
from cronctl.store.claims import Outcome, Owner
from cronctl.store.leases import RunClaim

if TYPE_CHECKING:
    from cronctl.loop.endpoint import Handler
    from cronctl.loop.heal import Liveness
    from cronctl.loop.scheduler import LoopOptions
    from cronctl.proc.echo import EchoSink

    # The dashboard's pages and API, and its POST actions (ops.webpage.dashboard_hooks).
    DashboardHooks = tuple[Callable[[], dict[str, Handler]], Callable[[], Handler]]

# --- history and logs ---------------------------------------------------------------


def run_history(ctx: Context, job: str | None, count: int | None) -> list[dict[str, Any]]:
    if job is not None and not ctx.leases.has_job(job) and not ctx.paths.history(job).exists():
        raise no_job_named(job)
    return ctx.leases.history(job, count)


@dataclass(frozen=True)
class StoredTail:
    """A run's output as the PostgreSQL store keeps it: the tail, and the host whose home has the whole log."""

    text: str
    host: str | None


def log_path(ctx: Context, job: str, run_id: str | None) -> tuple[str, Any]:
    """(run_id, path) of the asked run, else of the newest run (running or finished).

    On PostgreSQL a run of another host has its log there: then its stored tail (`StoredTail`).
    """
    if run_id is None:
        run_id = _newest_run_id(ctx, job)
    path = ctx.paths.run_log(job, run_id)
    if not path.exists():
        shared = ctx.cluster is not None  # a run of another host: its log is in the home there
        tail = _stored_tail(ctx, job, run_id) if shared else None
        if tail is not None:
            return run_id, tail
        live = ctx.leases.find_run(job, run_id) if shared else None
        if live is not None and not _on_this_boot(live):
            raise CronctlError(f"run {run_id} of job '{job}' is running on another host: its log is in the home "
                               "there; the store keeps its tail once it ends ('cronctl logs' shows it then)")
        raise CronctlError(f"no log for run {run_id} of job '{job}' "
                           f"(logs of the last {_kept_runs(ctx, job)} runs are kept)")
    return run_id, path


def _kept_runs(ctx: Context, job: str) -> int:
    """How many run logs the job keeps: its keep_runs (SPEC §13), else the default."""
    try:
        return ctx.leases.job(job).spec.keep_runs or history.LOGS_KEPT
    except Exception:  # the job is gone, or the store cannot say: the default is the honest guess
        return history.LOGS_KEPT


def _stored_tail(ctx: Context, job: str, run_id: str) -> StoredTail | None:
    record = next((r for r in ctx.leases.history(job) if r.get("run_id") == run_id), None)
    if record is None:
        return None
    return StoredTail(str(record.get("output_tail") or ""), record.get("host"))


def _newest_run_id(ctx: Context, job: str) -> str:
    running = ctx.leases.claims_of(job)
    if running:
        return running[-1].run_id
    records = ctx.leases.history(job)
    if records:
        return str(records[-1]["run_id"])
    if not ctx.leases.has_job(job):
        raise no_job_named(job)
    raise CronctlError(f"job '{job}' has not run yet")


def run_is_active(ctx: Context, job: str, run_id: str) -> bool:
    return ctx.leases.find_run(job, run_id) is not None


# --- force-run ------------------------------------------------------------------------


@dataclass(frozen=True)
class ForceResult:
    run_id: str
    via_loop: bool
    record: dict[str, Any] | None  # None when not waited for


def force_run(ctx: Context, name: str, wait: bool, timeout: float | None = None) -> ForceResult:
    if ctx.cluster is not None:
        return _force_on_cluster(ctx, name, wait, timeout)
    doc, signature = ctx.store.read_if_changed(None)
    assert doc is not None  # nothing to compare with: always read
    get_entry(doc, name)
    ctx.audit.append(AuditEvent.FORCE_RUN_REQUESTED, job=name, pid=os.getpid())
    live = loop_alive(ctx.paths, ctx.clock.now())
    if live is not None:
        run_id = _force_through_loop(ctx, name, live)
        record = wait_for_record(ctx, name, run_id, timeout) if wait else None
        return ForceResult(run_id, True, record)
    return _force_here(ctx, name, (doc, signature))


def _force_on_cluster(ctx: Context, name: str, wait: bool, timeout: float | None) -> ForceResult:
    """PostgreSQL: a request row any live loop serves within a tick (its `force_run.requested`
    row is written with it); with no live loop, here, as on the JSON store."""
    from cronctl.ops import cluster

    if not ctx.leases.has_job(name):
        raise no_job_named(name)
    if not cluster.live_loops(ctx):
        ctx.audit.append(AuditEvent.FORCE_RUN_REQUESTED, job=name, pid=os.getpid())
        return _force_here(ctx, name)
    run_id = cluster.force_through_cluster(ctx, name)
    return ForceResult(run_id, True, wait_for_record(ctx, name, run_id, timeout) if wait else None)


def _force_through_loop(ctx: Context, name: str, live: LoopStatus) -> str:
    answer = _ask_loop(ctx, live, "force_run", job=name)
    if answer is None:
        raise CronctlError(f"the running loop (pid {live.pid}) did not answer; check 'cronctl status'")
    if not answer.get("ok"):
        raise ConflictError(str(answer.get("error")))
    return str(answer["run_id"])


# A live loop answers within a tick; on a loaded machine (a full suite on three workers beside
# two PostgreSQL benches) one did not within 15 s, cause not found: a live loop gets longer.
LOOP_ANSWER_WAIT = 60.0


def _ask_loop(ctx: Context, live: LoopStatus, action: str, **fields: Any) -> dict[str, Any] | None:
    """The running loop's answer to a control request, waited for while that very process runs:
    a status that reads other than ok for a moment (a heartbeat late on a busy machine) does
    not mean the loop will not answer (it cut a force-run's wait short under load)."""
    loop = procs.identify(live.pid) if live.pid else None
    request_id = control.send_request(ctx.paths, action, live.pid, **fields)
    return control.wait_reply(ctx.paths, request_id, LOOP_ANSWER_WAIT,
                              alive=lambda: loop is not None and procs.is_alive(loop))


# How long a run may be without a claim and without a record before --wait gives up:
# its end is written to the store first, its record just after (or by the next loop).
UNRECORDED_GRACE = 10.0


def wait_for_record(ctx: Context, job: str, run_id: str, timeout: float | None) -> dict[str, Any]:
    clock = ctx.clock
    deadline = None if timeout is None else clock.monotonic() + timeout
    unclaimed_since: float | None = None
    alive = _liveness(ctx).owner_alive
    while deadline is None or clock.monotonic() < deadline:
        claim = ctx.leases.find_run(job, run_id)
        if claim is None:
            record = _find_record(ctx, job, run_id)
            if record is not None:
                return record
            if unclaimed_since is None:
                unclaimed_since = clock.monotonic()
            elif clock.monotonic() - unclaimed_since > UNRECORDED_GRACE:
                raise CronctlError(f"run {run_id} of '{job}' ended without a record (it may never have started); "
                                   f"see 'cronctl audit --job {job}'")
        elif not alive(claim.owner_dict):
            raise CronctlError(f"the loop running {job} run {run_id} died; the next 'cronctl run' records it "
                               f"as lost (see 'cronctl status')")
        clock.sleep(0.1)
    raise CronctlError(f"run {run_id} of '{job}' has not finished yet; follow it with 'cronctl logs {job} -f'")


def _force_here(ctx: Context, name: str, read: tuple[dict[str, Any], Any] | None = None) -> ForceResult:
    """No loop runs: this process claims, supervises and records the run with the loop's own engine.

    `read`: the caller's read of the JSON store and its signature, used again rather than
    parsed again (a large store costs tens of milliseconds a parse)."""
    from cronctl.loop.due import DueIndex
    from cronctl.loop.engine import build_engine, run_one
    from cronctl.loop.heal import release_dead_claims
    from cronctl.loop.on_failure import ON_FAILURE_TIMEOUT

    release_dead_claims(ctx, name, _liveness(ctx), kill_run_processes, read[0] if read else None)
    engine = build_engine(ctx, cli_owner())
    if read is not None and isinstance(engine.due, DueIndex):
        engine.due.seed(*read)  # out of date if a claim was released meanwhile: then read again
    engine.supervisor.start()
    try:
        engine.recover_pending()  # what a loop or force-run that died after a run's end still owed
        ran = run_one(engine, name)
        # The run has ended; its on_failure hook (and one owed by a dead writer) may still
        # run: shutting down now would kill them. They are bounded by their own timeout.
        engine.supervisor.wait_idle(ON_FAILURE_TIMEOUT + 10.0)
    finally:
        engine.supervisor.shutdown("shutdown", wait=30)
        engine.record_results()
        engine.drop_delivered()
    if ran is None:
        raise ConflictError(f"job '{name}' is running and its overlap is skip; not started")
    record = ran.record or _find_record(ctx, name, ran.run_id)
    if record is None:
        raise CronctlError(f"run {ran.run_id} of '{name}' ended without a record; "
                           f"see 'cronctl audit --job {name}'")
    if ctx.cluster is not None:  # SPEC §9: a run shown in JSON says which host ran it
        record = {**record, "host": record.get("host") or ctx.cluster.host_id}
    return ForceResult(ran.run_id, False, record)


def _find_record(ctx: Context, job: str, run_id: str) -> dict[str, Any] | None:
    """A run's history record: in the home's history files, or on PostgreSQL in its runs rows."""
    return ctx.backend.find_record(job, run_id)


def _liveness(ctx: Context) -> Liveness:
    """On PostgreSQL a run of another host is judged by its lease, never by a pid of this host."""
    from cronctl.loop.heal import Liveness
    from cronctl.ops.liveness import judges

    alive, expired = judges(ctx)
    return Liveness(owner_alive=alive, lease_expired=expired, monotonic=ctx.clock.monotonic)


def cli_owner() -> Owner:
    """This CLI process as the owner of the one run it supervises."""
    me = procs.identify(os.getpid())
    return Owner(f"cli-{uuid.uuid4().hex[:8]}", os.getpid(), me.start_time if me else 0.0, procs.boot_id())


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
    if not ctx.backend.has_job(name):
        raise no_job_named(name)
    running = ctx.leases.claims_of(name)
    if not running:
        raise ConflictError(f"job '{name}' is not running")
    if ctx.cluster is not None:
        return _kill_on_cluster(ctx, name, running)
    live = loop_alive(ctx.paths, ctx.clock.now())
    loop_runs = {c.run_id for c in running if live and c.owner is not None and c.owner.pid == live.pid}
    killed: list[str] = []
    if loop_runs and live is not None:
        answer = _ask_loop(ctx, live, "kill", job=name)
        if answer and answer.get("ok"):
            killed.extend(answer.get("run_ids") or [])
            for run_id in killed:
                wait_for_record(ctx, name, run_id, timeout=60.0)
    for claim in running:
        if claim.run_id not in killed:
            if _kill_here(ctx, claim):
                killed.append(claim.run_id)
    return killed


def _kill_on_cluster(ctx: Context, name: str, running: list[RunClaim]) -> list[str]:
    """PostgreSQL: each run is ended by a live loop on its host (a request row), else here when
    it runs on this host; a run of another host without a live loop there cannot be reached."""
    from cronctl.ops import cluster

    killed: list[str] = []
    unreachable: list[str] = []
    for claim in running:
        how = cluster.how_to_kill(ctx, claim.run_id)
        if how == "request" and cluster.kill_through_cluster(ctx, name, claim.run_id):
            wait_for_record(ctx, name, claim.run_id, timeout=60.0)
            killed.append(claim.run_id)
        elif how == "here" and _kill_here(ctx, claim):
            killed.append(claim.run_id)
        elif how == "unreachable":
            unreachable.append(claim.run_id)
    if unreachable and not killed:
        raise ConflictError(f"job '{name}': run(s) {', '.join(unreachable)} run on another host with no live loop, "
                            "whose processes this host cannot end; run 'cronctl kill' there, or they are reclaimed "
                            "once their leases run out (see 'cronctl status')")
    return killed


def _on_this_boot(claim: RunClaim) -> bool:
    return claim.owner is not None and claim.owner.boot_id == procs.boot_id()


def _kill_here(ctx: Context, claim: RunClaim) -> bool:
    """A run no loop supervises: end its processes, then record it killed (unless it ended meanwhile)."""
    ended = kill_run_processes(claim.run_id, claim.child, float(claim.kill_grace or 10.0))
    outcome = Outcome(RunStatus.KILLED, "operator", fault=None)
    return ctx.leases.end_unsupervised(claim.job, claim.run_id, outcome, ctx.clock.now(), ended)


def run_loop(ctx: Context, options: LoopOptions, echo: EchoSink | None = None,
             dashboard: DashboardHooks | None = None) -> int:
    """`cronctl run`: the loop, with the watched file and the metrics textfile as its hooks, and
    `dashboard` (ops.webpage.dashboard_hooks: its pages, its actions) on the --http endpoint;
    `echo` (`run --echo-output`) gets a copy of every run's output (proc/echo.py)."""
    # Imported here: the loop's modules are needed by `run` alone, not by history or logs.
    from cronctl.loop.scheduler import FileApplied, LoopHooks, Scheduler
    from cronctl.ops.definitions import apply_file
    from cronctl.ops.metrics import MetricsFile

    def apply_watched(ctx: Context, path: str) -> FileApplied:
        plan = apply_file(ctx, path, watched=True)
        return FileApplied(changed=bool(plan.changes), summary=(
            f"{len(plan.create)} created, {len(plan.update) + len(plan.adopt)} updated, "
            f"{len(plan.prune)} removed, {len(plan.unchanged)} unchanged"), prune_waiting=plan.prune_waiting)

    metrics = MetricsFile(options.metrics_file)

    def http_routes() -> Any:
        # Asked only with --http: the probes import the endpoint (sockets) and the status
        # report, a few ms of every loop's start.
        from cronctl.ops.probes import probe_routes

        return probe_routes(ctx)

    hooks = LoopHooks(apply_file=apply_watched, after_tick=metrics.maybe_write,
                      http_routes=http_routes,
                      http_handlers=dashboard[0] if dashboard else None,
                      http_actions=dashboard[1] if dashboard else None)
    if echo is None:
        return Scheduler(ctx, options, hooks=hooks).run()
    import functools

    from cronctl.proc.supervisor import Supervisor

    return Scheduler(ctx, options, hooks=hooks, supervisor_factory=functools.partial(Supervisor, echo=echo)).run()


def release_stuck_runs(ctx: Context, names: list[str] | None) -> list[str]:
    """resume's first step: runs held by a dead or hung owner are killed and their claims released."""
    from cronctl.loop.heal import release_stuck_claims

    loop = loop_status(ctx.paths, ctx.clock.now())
    wedged_pid = loop.pid if loop.state == "wedged" else None
    live = _liveness(ctx)
    stored = ctx.store.read()["jobs"]
    jobs = names if names is not None else sorted(stored)
    released: list[str] = []
    # Only a job with a claim has anything to release: one read for all, not one per job
    # (each is the whole store: `resume` of 10,000 jobs must not read it 10,000 times).
    for job in (job for job in jobs if (stored.get(job) or {}).get("state", {}).get("claims")):
        released.extend(release_stuck_claims(ctx, job, live, kill_run_processes, wedged_pid))
    return released
