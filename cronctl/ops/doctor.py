"""cronctl doctor: check everything a wedge could hide in, say which command fixes it."""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cronctl.errors import CronctlError, StoreCorruptError
from cronctl.jobs.state import JobView, stored_entry_problem
from cronctl.loop.heartbeat import loop_status
from cronctl.paths import Paths
from cronctl.store.jsonstore import Store

if TYPE_CHECKING:
    from cronctl.store.cluster import Cluster

RUNS_DIR_WARN_BYTES = 1024 * 1024 * 1024
AUDIT_WARN_BYTES = 200 * 1024 * 1024
# Below this much free space a store write, an audit row or a run log may fail any time.
DISK_WARN_BYTES = 100 * 1024 * 1024
# Below this much the heartbeat (a few hundred bytes, written every tick) is the next to fail.
DISK_ACTION_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Finding:
    check: str
    level: str  # ok | warn | action
    message: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def examine(paths: Paths, store: Store, now: Any, cluster: Cluster | None = None) -> list[Finding]:
    """`cluster`: the store's cluster operations (`ctx.cluster`): a database shared by hosts has
    checks of its own; None: the JSON store of the home."""
    if cluster is not None:
        return _examine_postgres(paths, store, cluster)
    findings = [_check_store(paths, store), _check_writable(paths), *_check_jobs(paths, store), *_check_locks(paths)]
    findings.append(_check_loop(paths, store, now))
    findings.extend(_check_claims(store))
    findings.extend(_check_orphans(paths, store))
    findings.extend(_check_sizes(paths))
    findings.append(_check_disk(paths))
    findings.extend(_check_unit(paths, store))
    findings.extend(_check_notifications(store))
    return findings


def _check_unit(paths: Paths, store: Store) -> list[Finding]:
    """An installed unit of this home's loop whose TimeoutStopSec no longer covers the jobs."""
    from cronctl.ops.unitcheck import unit_problem

    try:
        specs = [JobView.from_entry(entry).spec for entry in store.read()["jobs"].values()]
    except Exception:  # noqa: BLE001 - a store that does not read is the store check's to report
        return []
    found = unit_problem(paths.home, specs)
    return [] if found is None else [Finding("unit", *found)]


def _check_notifications(store: Store) -> list[Finding]:
    """Notifications given up after 24 h of tries (SPEC §12: `notify.abandoned`)."""
    from cronctl.store.notify_owed import ABANDONED

    try:
        jobs = store.read()["jobs"]
    except CronctlError:
        return []  # the store check says why
    found = []
    for name, entry in sorted(jobs.items()):
        given_up = ((entry.get("state") or {}).get(ABANDONED)) if isinstance(entry, dict) else None
        if not isinstance(given_up, dict) or not given_up.get("count"):
            continue
        last = given_up.get("last") or {}
        found.append(Finding("notifications", "warn",
                             f"job '{name}': {given_up['count']} notification(s) abandoned; last: "
                             f"{last.get('event')} to {last.get('target')} at {last.get('at')} "
                             f"({last.get('error') or 'refused'})",
                             f"fix the target, then see 'cronctl audit --job {name} --event notify.abandoned'"))
    return found


def needs_action(findings: list[Finding]) -> bool:
    return any(f.level == "action" for f in findings)


def _check_store(paths: Paths, store: Store) -> Finding:
    try:
        doc = store.read()
    except StoreCorruptError as exc:
        backup = "a backup exists" if paths.store_backup.exists() else "NO backup exists"
        return Finding("store", "action", f"{exc} ({backup})",
                       "cronctl doctor --repair (restores jobs.json.bak; the bad file is kept aside)")
    except CronctlError as exc:
        return Finding("store", "action", str(exc))
    mode = _mode(paths.store)
    if mode is not None and mode & 0o077:
        return Finding("store", "warn", f"{paths.store} has mode {mode:04o}", f"chmod 600 {paths.store}")
    return Finding("store", "ok",
                   f"{paths.store}: version {doc['version']}, rev {doc['rev']}, {len(doc['jobs'])} job(s)")


def _check_writable(paths: Paths) -> Finding:
    """Whether this user can write what cronctl writes: a new file in the home (every store
    write is a new file renamed into place) and the files it appends to. Reading them is
    not enough: a home that can only be read fails at the first change."""
    problems = []
    try:
        probe_write(paths.home / f".doctor-probe.{os.getpid()}")
    except OSError as exc:
        problems.append(f"cannot create a file in {paths.home}: {exc.strerror or exc}")
    for path in (paths.store, paths.audit, paths.heartbeat):
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"cannot write {path}: {exc.strerror or exc}")
    if problems:
        return Finding("writable", "action", "; ".join(problems) + ": every change and every run would fail",
                       f"give the user that runs cronctl write access to {paths.home} and its files "
                       "(chown/chmod), or mount it read-write")
    return Finding("writable", "ok", f"{paths.home} and its files are writable")


def probe_write(path: Path) -> None:
    """Create, write and remove one small file (OSError if any step fails)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)


def _check_jobs(paths: Paths, store: Store, in_file: bool = True) -> list[Finding]:
    """One finding per stored job that no command can read (a hand-edited jobs.json); `in_file`
    False: the jobs are rows of a database, fixed by defining the job again."""
    try:
        jobs = store.read()["jobs"]
    except CronctlError:
        return []  # _check_store says why
    out = []
    for name in sorted(jobs):
        problem = _entry_problem(jobs[name])
        if problem is not None:
            fix = (f"cronctl remove {name}, then define it again" if not in_file
                   else f"edit {paths.store} by hand: fix the field, or remove job '{name}' from it")
            out.append(Finding("jobs", "action", problem, fix))
    return out or [Finding("jobs", "ok", f"{len(jobs)} stored job(s) read back cleanly")]


def _entry_problem(entry: Any) -> str | None:
    found = stored_entry_problem(entry)
    if found is None:
        try:
            JobView.from_entry(entry)
        except CronctlError as exc:
            return str(exc).split("; the store was not changed")[0]
        return None
    name = entry.get("name") if isinstance(entry, dict) else None
    label = f"job '{name}'" if isinstance(name, str) else "a job without a name"
    return f"jobs.json: {label}: field '{found[0]}': {found[1]}"


def _claims_of(entry: Any) -> dict[str, Any]:
    """A stored job's claims, tolerating a hand-edited entry (doctor must report it, not crash)."""
    state = entry.get("state") if isinstance(entry, dict) else None
    claims = state.get("claims") if isinstance(state, dict) else None
    return claims if isinstance(claims, dict) else {}


def _check_locks(paths: Paths) -> list[Finding]:
    out = []
    for path in (paths.store_lock, paths.scheduler_lock):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            out.append(Finding("locks", "ok", f"{path.name} not created yet (made on first use)"))
            continue
        if not stat.S_ISREG(info.st_mode):
            out.append(Finding("locks", "action", f"{path} is not a regular file (a link or directory?)",
                               f"stop every cronctl process, then: rm -r {path}"))
        else:
            out.append(Finding("locks", "ok", f"{path.name} is a regular file"))
    return out


def _check_loop(paths: Paths, store: Store, now: Any) -> Finding:
    status = loop_status(paths, now)
    try:
        jobs = len(store.read()["jobs"])
    except CronctlError:
        jobs = 0
    if status.state == "ok":
        return Finding("loop", "ok", f"loop pid {status.pid} ticking (heartbeat {status.heartbeat_age}s ago)")
    if status.state == "cannot_write":
        return Finding("loop", "action", status.reason, f"free space on the filesystem of {paths.home}")
    if status.state == "wedged":
        return Finding("loop", "action", status.reason,
                       f"kill {status.pid} and start 'cronctl run' again (or run a --standby beside it)")
    if jobs:
        level = "action" if status.state == "dead" else "warn"
        return Finding("loop", level, f"{status.reason}; {jobs} job(s) are defined", "cronctl run")
    return Finding("loop", "ok", status.reason)


def _check_claims(store: Store, judges: tuple[Any, Any] | None = None) -> list[Finding]:
    """Claims whose owner died (pid + start time) or whose lease ran out: nothing heals them
    while no loop runs, and until then the job never fires again. `judges`: (owner_alive,
    lease_expired), by default those of this host's processes and this boot's leases."""
    from cronctl.loop.heal import Liveness, dead_claims
    from cronctl.proc.liveness import lease_checker, owner_alive

    try:
        jobs = store.read()["jobs"]
    except CronctlError:
        return []  # _check_store says why
    # Entries _check_jobs reports as unreadable are left out: doctor reports them, never crashes on them.
    readable = {name: entry for name, entry in jobs.items() if _entry_problem(entry) is None}
    alive, expired = judges or (owner_alive, lease_checker())
    live = Liveness(owner_alive=alive, lease_expired=expired, monotonic=time.monotonic)
    found = dead_claims({"jobs": readable}, live)
    if not found:
        return [Finding("claims", "ok", "every claimed run has a live owner and a current lease")]
    return [Finding("claims", "action",
                    f"job '{job}': run {run_id} is still claimed but {_claim_words(readable[job], run_id, why)}",
                    f"cronctl resume {job} (or a running 'cronctl run' reclaims it)")
            for job, run_id, why in found]


def _claim_words(entry: dict[str, Any], run_id: str, problem: str) -> str:
    claim = entry["state"]["claims"][run_id]
    owner = claim.get("owner") or {}
    if problem == "owner_dead":
        return (f"its owner (pid {owner.get('pid')}, started {owner.get('start_time')}) is no longer alive "
                "(same pid and start time)")
    return f"its lease expired (last renewed until {claim.get('lease_until')})"


def _check_orphans(paths: Paths, store: Store) -> list[Finding]:
    """Processes of runs that no claim accounts for: left behind by a crash, still running."""
    try:
        doc = store.read()
    except CronctlError:
        return []
    active = {run_id for entry in doc["jobs"].values() for run_id in _claims_of(entry)}
    orphans = {pid: run_id for pid, run_id in run_processes(paths).items() if run_id not in active}
    if not orphans:
        return [Finding("orphans", "ok", "no orphaned run processes")]
    listing = ", ".join(f"pid {pid} (run {run_id})" for pid, run_id in sorted(orphans.items()))
    return [Finding("orphans", "action", f"processes of finished runs are still alive: {listing}",
                    "cronctl doctor --repair (kills them, verified by start time)")]


def run_processes(paths: Paths) -> dict[int, str]:
    """pid -> CRONCTL_RUN_ID of every process of a run of THIS home (on_failure hooks included).

    Other homes (another user's, a test's) have runs too: a run is ours only if this
    home holds its log, which the loop creates before the child is spawned.
    """
    import psutil

    found: dict[int, str] = {}
    for proc in psutil.process_iter():
        try:
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
        run_id, job = env.get("CRONCTL_RUN_ID"), env.get("CRONCTL_JOB")
        if not run_id or not job or proc.pid == os.getpid() or "/" in job or "/" in run_id:
            continue
        if paths.run_log(job, run_id).exists():
            found[proc.pid] = run_id
    return found


# --- on PostgreSQL ----------------------------------------------------------------------


def _examine_postgres(paths: Paths, store: Store, cluster: Cluster) -> list[Finding]:
    """The database's own checks; the home's files hold only this host's run logs here."""
    from cronctl.ops.liveness import pg_judges

    try:
        health = cluster.health()
        jobs = len(store.read()["jobs"])
    except CronctlError as exc:
        return [Finding("store", "action", str(exc), "check that the database is up and the URL is right")]
    findings = [Finding("store", "ok", f"{cluster.shown}: schema version {health.schema_version}, "
                                       f"{jobs} job(s)"),
                *_check_jobs(paths, store, in_file=False),
                Finding("files", "ok", "jobs.json, jobs.lock and scheduler.lock are not used on the PostgreSQL "
                                       "store: their checks are skipped"),
                _check_pg_loops(health, jobs),
                *_check_claims(store, pg_judges(health.db_now, cluster.host_id)),
                *_check_orphans(paths, store), *_check_notifications(store)]
    runs, audit = _check_sizes(paths)
    findings += [runs, Finding("audit", "warn" if health.audit_bytes > AUDIT_WARN_BYTES else "ok",
                               f"the audit table holds {health.audit_bytes / 1e6:.1f} MB")]
    findings.append(_check_disk(paths))
    return findings


def _check_pg_loops(health: Any, jobs: int) -> Finding:
    """The loops as `status` judges them (ops/cluster.py's summary), so the two agree about a dead
    loop: one that stopped answering is `action` while jobs exist (status --stale exits 3)."""
    from cronctl.ops.cluster import cluster_summary

    summary = cluster_summary(health.loops)
    if summary.state == "ok":
        live = [loop for loop in health.loops if loop.state == "ok"]
        listed = ", ".join(f"host {loop.host} pid {loop.pid} (heartbeat {loop.heartbeat_age_s:.0f}s ago)"
                           for loop in live)
        return Finding("loop", "ok", f"{len(live)} loop(s) live on the PostgreSQL store: {listed}")
    if not jobs:
        return Finding("loop", "ok", f"{summary.reason}; no job is defined")
    if summary.state == "unreachable":
        return Finding("loop", "action", f"{summary.reason}; {jobs} job(s) are defined",
                       "start 'cronctl run' on that host again; a host gone for good: cronctl store forget-host "
                       "HOST (a silent loop is forgotten by itself after 'cronctl run --forget-after', 15 min, "
                       "once its runs are all reclaimed)")
    fix = "cronctl run, with the same --store or $CRONCTL_STORE, on one host or more"
    # Every loop stopped cleanly: said as the JSON store says a stopped loop (a warning).
    return Finding("loop", "warn", f"no loop is running on the PostgreSQL store; {jobs} job(s) are defined", fix)


def _check_sizes(paths: Paths) -> list[Finding]:
    runs = _tree_size(paths.runs_dir)
    audit = sum(_size(p) for p in paths.home.glob("audit.jsonl*"))
    too_big = runs > RUNS_DIR_WARN_BYTES
    out = [Finding("runs", "warn" if too_big else "ok", f"runs/ holds {runs / 1e6:.1f} MB",
                   "remove jobs you no longer need; logs of the last 20 runs per job are kept" if too_big else None),
           Finding("audit", "warn" if audit > AUDIT_WARN_BYTES else "ok", f"audit log holds {audit / 1e6:.1f} MB")]
    return out


def _check_disk(paths: Paths) -> Finding:
    """Free space of the home's filesystem, as an unprivileged writer (the loop) sees it."""
    try:
        fs = os.statvfs(paths.home)
    except OSError as exc:
        return Finding("disk", "action", f"cannot read the free space of {paths.home}: {exc.strerror or exc}")
    free = fs.f_bavail * fs.f_frsize
    words = f"{free / 1e6:.1f} MB free on the filesystem of {paths.home}"
    if free < DISK_ACTION_BYTES:
        return Finding("disk", "action", f"{words}: writes of the store, the audit log and the heartbeat fail",
                       f"free space on the filesystem of {paths.home}")
    if free < DISK_WARN_BYTES:
        return Finding("disk", "warn", f"{words} (less than {DISK_WARN_BYTES // (1024 * 1024)} MB)",
                       f"free space on the filesystem of {paths.home}")
    return Finding("disk", "ok", words)


def repair(paths: Paths, store: Store) -> list[str]:
    """Restore the last good store if the current one does not parse; kill orphaned run processes."""
    done: list[str] = []
    try:
        store.read()
    except StoreCorruptError:
        kept = store.restore_backup()
        kept_words = f"; the bad file is kept as {kept}" if kept else ""
        done.append(f"restored {paths.store} from {paths.store_backup}{kept_words}")
    done.extend(_kill_orphans(paths, store))
    return done


def _kill_orphans(paths: Paths, store: Store) -> list[str]:
    from cronctl.proc.kill import kill_run_processes

    doc = store.read()
    active = {run_id for entry in doc["jobs"].values() for run_id in _claims_of(entry)}
    done = []
    for run_id in sorted(set(run_processes(paths).values()) - active):
        ended = kill_run_processes(run_id, None, 5.0)
        done.append(f"killed {ended} orphaned process(es) of run {run_id}")
    return done


def _mode(path: Any) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def _size(path: Any) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _tree_size(root: Any) -> int:
    total = 0
    for base, _dirs, files in os.walk(root):
        total += sum(_size(os.path.join(base, f)) for f in files)
    return total
