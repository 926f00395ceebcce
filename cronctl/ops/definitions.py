"""Use cases behind the commands: take a Context, return data, never print."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from cronctl.context import Context
from cronctl.errors import ConfigError, ConflictError, ScheduleError, no_job_named
from cronctl.jobs.jobfile import LoadedFile, build_spec, load_jobs_file
from cronctl.jobs.state import JobView, entry_from, get_entry, new_state
from cronctl.models import FAILED_STATUSES, AuditEvent, JobSpec
from cronctl.ops import chain_rules
from cronctl.ops.apply_ahead import Fresh, Runner, prepare_new_jobs
from cronctl.schedule.slots import fire_at, first_slot, grid_step, slots_from
from cronctl.store.definitions import DefinitionsEdit, already_exists
from cronctl.timefmt import from_iso, to_iso

# --- definitions ---------------------------------------------------------------


def spec_from_options(name: str, options: dict[str, Any]) -> JobSpec:
    """Validate `cronctl add` options with the same rules as a YAML entry."""
    problems: list[str] = []
    spec = build_spec({"name": name, **options}, _cli_where(name), problems, source=None, base_dir=_cwd())
    if problems or spec is None:
        raise ConfigError(problems)
    check_spawnable([spec])
    return spec


def check_spawnable(specs: list[JobSpec], where: str | None = None) -> None:
    """A command the kernel would refuse to exec (E2BIG) is refused here, at definition time,
    rather than failing every run later (issue 15, item 3)."""
    from cronctl.proc.spawn import command_problem

    problems: list[str] = []
    for spec in specs:
        for key, command in (("command", spec.command), ("on_failure", spec.on_failure)):
            problem = None if command is None else command_problem(command, spec.env)
            if problem is not None:
                problems.append(f"{where + ': ' if where else ''}job '{spec.name}': field '{key}': {problem}")
    if problems:
        raise ConfigError(problems)


def _cwd() -> Path | None:
    """Where a relative --cwd is anchored; None when this process's directory is gone."""
    try:
        return Path.cwd()
    except OSError:
        return None


def _cli_where(name: str):  # type: ignore[no-untyped-def]
    def where(field_name: str) -> str:
        option = "-- COMMAND" if field_name == "command" else "--limit" if field_name == "limits" \
            else "--" + field_name.replace("_", "-")
        return f"job '{name}': {option}"

    return where


def add_job(ctx: Context, spec: JobSpec, allow_past: bool = False) -> JobView:
    now = ctx.clock.now()
    if not allow_past:
        refuse_past_at([spec], now, lambda name: f"job '{name}': --at")
    with ctx.definitions.editing([spec.name]) as edit:
        if spec.name in edit.entries:
            raise already_exists(spec.name)
        chain_rules.check_cli(edit.linked_specs(spec.after), spec)
        state = new_state(now, first_slot(spec, now))
        edit.add(entry_from(spec, state))
        edit.audit([(AuditEvent.JOB_ADDED, {"job": spec.name, "source": spec.source, "schedule": spec.schedule_text})])
    return JobView(spec, state)


SCHEDULE_KEYS = ("cron", "every", "at")


def refuse_past_at(specs: list[JobSpec], now: datetime, where: Callable[[str], str],
                   how: str = "pass --allow-past to fire it now") -> None:
    """A one-shot `at` already past would fire the moment a loop sees it: refused (exit 1,
    nothing changed) unless the caller was given --allow-past."""
    problems = [f"{where(spec.name)}: {to_iso(spec.at)} is in the past: a running loop would fire it at once; "
                f"give a future instant, or {how}"
                for spec in specs if spec.at is not None and spec.at < now]
    if problems:
        raise ConfigError(problems)


def edit_job(ctx: Context, name: str, changes: dict[str, Any], unset: list[str],
             allow_past: bool = False) -> tuple[JobView, list[str]]:
    """Apply option changes to a job; returns the view and the names of the changed fields."""
    _check_unset(unset)
    now = ctx.clock.now()
    with ctx.definitions.editing([name]) as edit:
        old = JobView.from_entry(_entry_named(edit.entries, name))
        merged = _merge_options(old.spec, changes, unset)
        problems: list[str] = []
        spec = build_spec(merged, _cli_where(name), problems, source=old.spec.source, base_dir=_cwd())
        if problems or spec is None:
            raise ConfigError(problems)
        check_spawnable([spec])
        changed = _changed_fields(old.spec, spec)
        if not changed:
            return old, []
        if "at" in changed and not allow_past:
            refuse_past_at([spec], now, lambda job: f"job '{job}': --at")
        chain_rules.check_cli(edit.linked_specs(spec.after), spec)
        state = dict(old.state)
        _reschedule_if_needed(old.spec, spec, state, now)
        state["updated_at"] = to_iso(now)
        edit.replace(name, entry_from(spec, state))
        edit.audit([(AuditEvent.JOB_UPDATED, {"job": name, "fields": changed, "by": "edit"})])
    return JobView(spec, state), changed


def _entry_named(entries: Mapping[str, dict[str, Any]], name: str) -> dict[str, Any]:
    return get_entry({"jobs": entries}, name)


# A job always has these; a schedule is replaced with --cron/--every/--at, not unset.
NOT_UNSETTABLE = ("name", "command", "cron", "every", "at", "after")


def _check_unset(unset: list[str]) -> None:
    from cronctl.errors import UsageError
    from cronctl.jobs.jobfile import JOB_FIELDS

    allowed = [f for f in JOB_FIELDS if f not in NOT_UNSETTABLE]
    for key in unset:
        field_name = key.replace("-", "_")
        if field_name in NOT_UNSETTABLE:
            kept = field_name if field_name in ("name", "command") else "schedule"
            raise UsageError(f"--unset {key}: a job always has a {kept}; give a new value instead")
        if field_name not in allowed:
            raise UsageError(f"--unset {key}: not a job field (one of: {', '.join(allowed)})")


def _merge_options(spec: JobSpec, changes: dict[str, Any], unset: list[str]) -> dict[str, Any]:
    merged = {k: v for k, v in spec.to_dict().items() if k != "source" and v is not None}
    if any(key in changes for key in (*SCHEDULE_KEYS, "after")):
        # A new schedule replaces the old one, and `after` is a schedule too.
        for key in (*SCHEDULE_KEYS, "after"):
            merged.pop(key, None)
        if "after" not in changes:
            merged.pop("requires", None)
    for key in unset:
        merged.pop(key.replace("-", "_"), None)
    merged.update(changes)
    return merged


def _changed_fields(old: JobSpec, new: JobSpec) -> list[str]:
    before, after = old.to_dict(), new.to_dict()
    # Both sides' keys: an unset operator field (SPEC §13) leaves the stored entry altogether.
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def _reschedule_if_needed(old: JobSpec, new: JobSpec, state: dict[str, Any], now: datetime) -> None:
    """A schedule change counts from now: it never fires a missed slot because of the edit."""
    if old.schedule_fields() == new.schedule_fields():
        return
    state["next_run_at"] = to_iso(first_slot(new, now))
    state["retry"] = None
    state["completed"] = False


@dataclass(frozen=True)
class Removed:
    killed: int  # runs ended first (--force)
    source: str | None  # the file that defined the job: its next apply re-creates it


def remove_job(ctx: Context, name: str, force: bool = False) -> Removed:
    """Delete a job; refuse while it runs unless `force`, which ends its runs first."""
    with ctx.definitions.editing([name]) as edit:
        view = JobView.from_entry(_entry_named(edit.entries, name))
        chain_rules.refuse_orphans(edit.linked_specs(()), {name}, force, f"removing {name}")
        if view.claims and not force:
            raise ConflictError(
                f"job '{name}' is running (run {', '.join(view.claims)}); "
                f"wait for it, 'cronctl kill {name}', or 'cronctl remove {name} --force'"
            )
        killed = _terminate_claims(ctx, name, view.claims) if view.claims else 0
        edit.remove(name)
        edit.audit([(AuditEvent.JOB_REMOVED, {"job": name, "forced": force or None, "killed_runs": killed or None})])
    return Removed(killed, view.spec.source)


def _terminate_claims(ctx: Context, name: str, claims: dict[str, Any]) -> int:
    from cronctl.proc.identity import ProcIdentity
    from cronctl.proc.kill import terminate_run

    for run_id, claim in claims.items():
        child = claim.get("child") or {}
        root = ProcIdentity(child["pid"], child["start_time"]) if child.get("pid") else None
        report = terminate_run(run_id, root, grace=float(claim.get("kill_grace", 10.0)))
        ctx.audit.append(AuditEvent.RUN_KILLED, job=name, run_id=run_id, reason="removed",
                         terminated=report.terminated, killed=report.killed)
    return len(claims)


# --- apply ---------------------------------------------------------------------


@dataclass
class ApplyPlan:
    file: str
    create: list[str] = field(default_factory=list)
    update: dict[str, list[str]] = field(default_factory=dict)  # name -> changed fields
    adopt: list[str] = field(default_factory=list)  # hand-added jobs the file now defines
    unchanged: list[str] = field(default_factory=list)
    prune: list[str] = field(default_factory=list)
    applied: bool = False
    # Printed on stderr, never part of --json (its keys are a contract).
    warnings: list[str] = field(default_factory=list)
    # Also outside --json: jobs to prune that were running, left for a later apply (`run -f`).
    prune_waiting: list[str] = field(default_factory=list)
    pruned_by: str = "apply --prune"

    @property
    def changes(self) -> int:
        return len(self.create) + len(self.update) + len(self.adopt) + len(self.prune)

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file, "create": self.create, "update": self.update, "adopt": self.adopt,
            "unchanged": self.unchanged, "prune": self.prune, "applied": self.applied,
        }


def validate_file(path: str, now: datetime, allow_past: bool = False) -> tuple[list[JobSpec], list[str]]:
    """The file's jobs and its warnings (a past one-shot `at` with allow_past); raises
    ConfigError when invalid. Without the store it cannot tell a one-shot that already
    fired: every past `at` is refused unless allow_past (apply refuses only new ones)."""
    loaded = load_checked(path)
    chain_rules.check_file(str(loaded.path), loaded.specs)
    if not allow_past:
        refuse_past_at(loaded.specs, now,
                       lambda job: f"{loaded.path}:{loaded.at_lines.get(job, 0)}: job '{job}': field 'at'")
    return loaded.specs, loaded.warnings(now)


def load_checked(path: str) -> LoadedFile:
    """The jobs file, its commands checked spawnable: all an apply reads before the store."""
    loaded = load_jobs_file(path)
    check_spawnable(loaded.specs, str(loaded.path))
    return loaded


def apply_file(ctx: Context, path: str, prune: bool = False, dry_run: bool = False,
               force: bool = False, watched: bool = False, allow_past: bool = False,
               ahead: Runner | None = None) -> ApplyPlan:
    """Apply a jobs file. `watched` is `run -f`: the file is the source of truth for the jobs
    it created, so they are pruned; one with a running run is not refused (the loop must go
    on) but left in `prune_waiting`, for the loop to apply again once its runs end. `ahead`:
    where the parse and the new jobs' rows are made before the write (the `apply` command: a
    big file on an idle thread, ops/apply_ahead.py); None: the parse here, the rows in the write."""
    loaded = ahead(lambda: load_checked(path)) if ahead else load_checked(path)
    source = str(loaded.path)
    now = ctx.clock.now()
    made = prepare_new_jobs(ctx, loaded.specs, now, source, ahead) if ahead and not dry_run else Fresh(now, source)
    names = [spec.name for spec in loaded.specs]
    with ctx.definitions.editing(names, source=source if prune or watched else None) as edit:
        plan = _plan_apply(edit.entries, loaded.specs, source, prune or watched)
        if watched:
            _defer_running_prunes(edit.entries, plan)
        linked = edit.linked_specs(chain_rules.upstreams(loaded.specs))
        chain_rules.check_apply(linked, source, loaded.specs, plan.prune, force)
        if not allow_past:  # a new one-shot, or one whose `at` changed; one already stored keeps its catch-up
            fresh = {*plan.create, *(name for name, fields in plan.update.items() if "at" in fields)}
            how = (f"to fire it now, apply it once with 'cronctl apply -f {source} --allow-past'" if watched
                   else "pass --allow-past to fire it now")
            refuse_past_at([spec for spec in loaded.specs if spec.name in fresh], now,
                           lambda job: f"{source}:{loaded.at_lines.get(job, 0)}: job '{job}': field 'at'", how)
        # The warnings are about the file's jobs only: those are the entries in hand.
        done = frozenset(name for name, entry in edit.entries.items() if (entry.get("state") or {}).get("completed"))
        plan.warnings = loaded.warnings(now, done)
        if dry_run:
            return plan
        _execute_apply(edit, plan, loaded.specs, made)
        plan.applied = True
        edit.audit(_audit_rows(plan, {spec.name: spec.schedule_text for spec in loaded.specs}, made))
    return plan


def _plan_apply(entries: Mapping[str, dict[str, Any]], specs: list[JobSpec], source: str,
                prune: bool) -> ApplyPlan:
    plan = ApplyPlan(file=source)
    conflicts: list[str] = []
    for spec in specs:
        entry = entries.get(spec.name)
        if entry is None:
            plan.create.append(spec.name)
            continue
        current = JobView.from_entry(entry).spec
        if current.source not in (None, source):
            conflicts.append(f"{source}: job '{spec.name}': field 'name': already defined by {current.source}; "
                             f"rename it here or remove it there")
        elif current.source is None:
            plan.adopt.append(spec.name)
        elif _changed_fields(current, spec):
            plan.update[spec.name] = _changed_fields(current, spec)
        else:
            plan.unchanged.append(spec.name)
    if conflicts:
        raise ConfigError(conflicts)
    if prune:
        wanted = {spec.name for spec in specs}
        plan.prune = sorted(
            name for name, entry in entries.items() if entry.get("source") == source and name not in wanted
        )
    return plan


def _defer_running_prunes(entries: Mapping[str, dict[str, Any]], plan: ApplyPlan) -> None:
    plan.pruned_by = "run -f"
    plan.prune_waiting = [n for n in plan.prune if JobView.from_entry(entries[n]).claims]
    waiting = set(plan.prune_waiting)
    plan.prune = [n for n in plan.prune if n not in waiting]


def _execute_apply(edit: DefinitionsEdit, plan: ApplyPlan, specs: list[JobSpec], fresh: Fresh) -> None:
    running = [n for n in plan.prune if JobView.from_entry(edit.entries[n]).claims]
    if running:
        raise ConflictError(f"cannot prune running job(s) {', '.join(running)}; wait for them or kill them first")
    created, adopted = set(plan.create), set(plan.adopt)  # sets: a file may define 100,000 jobs
    for spec in specs:
        if spec.name in created:
            edit.add(fresh.entry(spec))
        elif spec.name in plan.update or spec.name in adopted:
            old = JobView.from_entry(edit.entries[spec.name])
            state = dict(old.state)
            _reschedule_if_needed(old.spec, spec, state, fresh.now)
            state["updated_at"] = to_iso(fresh.now)
            edit.replace(spec.name, entry_from(spec, state))
    for name in plan.prune:
        edit.remove(name)


def _audit_rows(plan: ApplyPlan, schedules: dict[str, str], fresh: Fresh) -> list[tuple[str, dict[str, Any]]]:
    # One write for the whole burst (a file may add 100,000 jobs); the rows are append's.
    return [
        *(fresh.added_row(name, schedules.get(name)) for name in plan.create),
        *((AuditEvent.JOB_UPDATED, {"job": name, "source": plan.file, "fields": changed, "by": "apply"})
          for name, changed in plan.update.items()),
        *((AuditEvent.JOB_UPDATED, {"job": name, "source": plan.file, "by": "apply", "adopted": True})
          for name in plan.adopt),
        *((AuditEvent.JOB_REMOVED, {"job": name, "source": plan.file, "by": plan.pruned_by})
          for name in plan.prune),
    ]


# --- reading -------------------------------------------------------------------


def list_jobs(ctx: Context, prefix: str | None = None) -> list[JobView]:
    """Every job by name, or those whose name starts with `prefix` (`list NAME-PREFIX`)."""
    from cronctl.ops.jobreads import job_views  # a read: the lease machinery stays unloaded

    return job_views(ctx, prefix)


def show_job(ctx: Context, name: str) -> JobView:
    from cronctl.ops.jobreads import job_view

    return job_view(ctx, name)


class NextFires(NamedTuple):
    """A job and its next instants (a tuple: `next` makes 10,000 of them at once)."""

    view: JobView
    instants: list[datetime]


def next_fires(ctx: Context, name: str | None, count: int, start: datetime | None) -> list[NextFires]:
    """The next `count` slots of one job (or all), from `start` (default: now).

    A naive `start` is a wall time in each job's own zone, as `at:` is read in the job's
    `timezone`: `--from 2026-10-25T01:00` means 01:00 in Berlin for a Berlin job."""
    views = [show_job(ctx, name)] if name else list_jobs(ctx)
    now = ctx.clock.now()
    return [NextFires(view, upcoming_slots(view, _in_zone(start, view.spec.timezone) if start else now, count,
                                           use_state=start is None)) for view in views]


def _in_zone(start: datetime, zone: str) -> datetime:
    """`start` as an instant: an aware one as it is, a naive one read in `zone`."""
    if start.tzinfo is not None:
        return start
    from datetime import timezone
    from zoneinfo import ZoneInfo

    try:
        return start.replace(tzinfo=ZoneInfo(zone)).astimezone(timezone.utc)
    except OverflowError:
        raise ConfigError([f"'{start.isoformat()}' in {zone} is outside the dates cronctl can handle "
                           "(years 1 to 9999 in UTC)"]) from None


def upcoming_slots(view: JobView, origin: datetime, count: int, use_state: bool) -> list[datetime]:
    spec = view.spec
    if view.state.get("completed"):
        return []
    out: list[datetime] = []
    try:
        first = view.next_run_at if use_state else None
        if first is None:
            first = _first_after(spec, origin)
        if first is not None and count > 0:
            # Appended one by one as they come: the slots before one past year 9999 stay.
            delta = grid_step(spec, first)
            if delta is None:
                out.extend(islice(slots_from(spec, first), count))
            else:  # slots_from's grid, without a generator per job (`next` of 10,000 jobs)
                out.append(first)
                for _ in range(count - 1):
                    first += delta
                    out.append(first)
    except (OverflowError, ScheduleError):
        pass  # past the last instant a datetime can hold (year 9999): no further slots
    return out


def _first_after(spec: JobSpec, origin: datetime) -> datetime | None:
    """The first fire strictly after `origin`: cron started at an instant never fires at
    that instant itself, so neither does `next --from` count it."""
    if spec.every is not None or spec.cron is not None:
        return first_slot(spec, origin)
    return spec.at if spec.at is not None and spec.at > origin else None


# --- pause / resume ------------------------------------------------------------


def pause_job(ctx: Context, name: str) -> bool:
    """Pause by the operator; returns False when it was already paused."""
    now = ctx.clock.now()
    with ctx.definitions.editing([name]) as edit:
        entry = _entry_named(edit.entries, name)
        state = entry["state"]
        if state.get("paused"):
            return False
        state["paused"] = True
        state["updated_at"] = to_iso(now)
        edit.replace(name, entry)
        edit.audit([(AuditEvent.JOB_PAUSED, {"job": name})])
    return True


@dataclass(frozen=True)
class ResumeResult:
    name: str
    next_run_at: str | None
    cleared: list[str]  # what resume cleared: paused, error, retry, completed...
    still_paused_by: str | None  # the file whose `paused: true` keeps it paused
    next_fire_at: str | None = None  # next_run_at plus the job's jitter; None while paused
    timezone: str = "UTC"


def resume_jobs(ctx: Context, names: list[str] | None) -> list[ResumeResult]:
    """Clear pause and error wedges and re-arm from now (names None: every job)."""
    now = ctx.clock.now()
    results: list[ResumeResult] = []
    with ctx.definitions.editing(names) as edit:
        targets = sorted(edit.entries) if names is None else names
        for name in targets:
            entry = _entry_named(edit.entries, name)
            results.append(_resume_entry(entry, name, now))
            edit.replace(name, entry)
        edit.audit([(AuditEvent.JOB_RESUMED, {"job": result.name, "cleared": result.cleared,
                                               "next_run_at": result.next_run_at}) for result in results])
    return results


def _resume_entry(entry: dict[str, Any], name: str, now: datetime) -> ResumeResult:
    view = JobView.from_entry(entry)
    state = entry["state"]
    cleared: list[str] = []
    if state.get("paused"):
        state["paused"] = False
        cleared.append("paused")
    if view.spec.paused and view.spec.source is None:
        entry["paused"] = False
        cleared.append("paused")
    if state.get("last_status") in FAILED_STATUSES:
        cleared.append(f"last_status {state['last_status']}")
    if state.get("retry"):
        state["retry"] = None
        cleared.append("pending retry")
    state["consecutive_failures"] = 0
    spec = JobView.from_entry(entry).spec
    # Re-arm from now only what resume released (a pause, a failure, a pending retry) or what
    # has no next slot; a job running on schedule keeps its slot (an `every` job's anchor).
    rearm = bool(cleared) or state.get("next_run_at") is None
    if rearm and not (spec.at is not None and state.get("completed")):
        state["next_run_at"] = to_iso(first_slot(spec, now))
    state["updated_at"] = to_iso(now)
    still = view.spec.source if view.spec.paused and view.spec.source else None
    next_slot = from_iso(state["next_run_at"])
    fire = to_iso(fire_at(spec, next_slot)) if next_slot is not None and not still else None
    return ResumeResult(name, state["next_run_at"], sorted(set(cleared)), still, fire, spec.timezone)


def require_jobs(ctx: Context, names: list[str] | None) -> None:
    for name in names or []:
        if ctx.definitions.get(name) is None:
            raise no_job_named(name)


def parse_instant(text: str, keep_naive: bool = False) -> datetime:
    """--from / --since values: ISO 8601; a naive value is taken as UTC, or with keep_naive
    returned naive, for the caller to read in a job's zone (`next --from`)."""
    from datetime import timezone

    try:
        value = datetime.fromisoformat(text)
        if value.tzinfo is None:
            if keep_naive:
                return value
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)
    except ValueError:
        raise ConfigError([f"'{text}' is not an ISO 8601 instant like 2026-12-24T09:00:00+01:00"]) from None
    except OverflowError:
        raise ConfigError([f"'{text}' is outside the dates cronctl can handle (years 1 to 9999 in UTC)"]) from None

