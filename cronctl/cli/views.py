"""What the job commands print: the --json documents of a job and the lines people read.

Commands import this module when they run (it pulls in the job, schedule and liveness
modules), so `cronctl --help` and the commands that print no job do not load it.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from cronctl.cli import render
from cronctl.jobs.health import LeaseExpired, OwnerAlive, job_health
from cronctl.jobs.notifyfields import mask_entry
from cronctl.jobs.state import JobView, entry_from
from cronctl.jobs.words import describe
from cronctl.models import command_text, is_stored_form
from cronctl.proc.liveness import lease_checker, owner_alive
from cronctl.schedule.slots import fire_at
from cronctl.timefmt import from_iso, to_iso

if TYPE_CHECKING:
    from cronctl.context import Context
    from cronctl.ops.definitions import NextFires, ResumeResult

# --- one job as data -----------------------------------------------------------


def job_json(view: JobView, ctx: Context, now: datetime | None = None,
             lease_ok: LeaseExpired | None = None) -> dict[str, Any]:
    """A job's --json document: its stored entry, its next fire instant and its health.
    `now` and `lease_ok`: one of each for every job of a list (10,000 of them)."""
    health = job_health(view, now or ctx.clock.now(), owner_alive, lease_ok or lease_checker())
    data = entry_from(view.spec, view.state)
    next_fire = _next_fire(view)
    data["next_fire_at"] = to_iso(next_fire)
    data["health"] = {"state": health.state, "reason": health.reason, "fault": health.fault}
    return mask_entry(data)  # notification URLs carry tokens (SPEC §12)


def listed_json(view: JobView, ctx: Context, now: datetime, lease_ok: LeaseExpired) -> dict[str, Any]:
    """job_json's document of one job of `list --json`, whose output sorts every key: the
    stored entry as it is when the one the view was read from is already what the spec
    would write back (models.is_stored_form), rather than rebuilt from the spec."""
    entry = view.entry
    if entry is None or not is_stored_form(entry):
        return job_json(view, ctx, now, lease_ok)
    health = job_health(view, now, owner_alive, lease_ok)
    data = dict(entry)
    slot = entry["state"].get("next_run_at")
    if type(slot) is str and view.spec.jitter <= 0 and not view.paused and _TO_ISO_FORM.fullmatch(slot):
        data["next_fire_at"] = slot  # to_iso's very text already: a fire at its slot, parsed and written back
    else:
        data["next_fire_at"] = to_iso(_next_fire(view))
    data["health"] = {"state": health.state, "reason": health.reason, "fault": health.fault}
    return mask_entry(data)


# What to_iso writes; a stored instant in this form (from_entry parsed it) is written back
# as it is: no other text of this shape parses (hour 24, second 60 and 30 February do not).
_TO_ISO_FORM = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}\+00:00")


def _next_fire(view: JobView) -> datetime | None:
    next_slot = view.next_run_at
    return fire_at(view.spec, next_slot) if next_slot and not view.paused else None


def job_row(view: JobView, now: datetime, is_alive: OwnerAlive, lease_ok: LeaseExpired) -> dict[str, Any]:
    """A job as one row of `cronctl list`: what job_json says of it, without the stored
    entry rebuilt from the spec (most of the command's time at 10,000 jobs)."""
    return {
        "name": view.spec.name, "schedule": view.spec.schedule_text, "when": describe(view.spec),
        "timezone": view.spec.timezone,
        "next_fire": _next_fire(view), "last_run": from_iso(view.state.get("last_run_at")),
        "status_word": job_health(view, now, is_alive, lease_ok).state, "command": view.spec.command,
    }


def detail_fields(data: dict[str, Any]) -> list[tuple[str, str]]:
    """`cronctl show`: (field, text) pairs of a job's --json document, state last."""
    fields: list[tuple[str, str]] = []
    for key, value in data.items():
        if key in ("state", "health"):
            continue
        if value in (None, {}, [], False) and key not in ("paused",):
            continue
        text = command_text(value) if key in ("command", "on_failure") else field_text(value)
        if key in ("limits", "keep_log"):  # SPEC §13: stored as whole numbers, said with units
            from cronctl.jobs.operatorfields import format_size, limits_text

            text = limits_text(value) if key == "limits" else format_size(value)
        fields.append((key, text))
        if key in ("cron", "every", "at"):
            fields.append(("in words", _words(data)))
    fields.append(("health", f"{data['health']['state']}: {data['health']['reason']}"))
    for key, value in sorted(data["state"].items()):
        if key == "claims":
            value = ", ".join(value) or "-"
        fields.append((f"state.{key}", "-" if value is None else field_text(value)))
    return fields


def _words(data: dict[str, Any]) -> str:
    return describe(JobView.from_entry(data).spec)


def field_text(value: Any) -> str:
    """Booleans, lists and mappings as they are written in YAML and JSON (true, not True)."""
    if isinstance(value, (bool, dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def next_fire_text(view: JobView) -> str:
    if view.paused:
        return "paused (no fire until 'cronctl resume " + view.spec.name + "')"
    if view.spec.after:  # a chain job has no fire of its own: its upstreams' ends start it (SPEC §10)
        said = describe(view.spec)
        return f"no schedule of its own: runs {said[0].lower()}{said[1:]}"
    if view.next_run_at is None:
        return "no further fires"
    return "next fire " + render.fire_text(fire_at(view.spec, view.next_run_at), view.spec.timezone)


def warn_if_past(view: JobView, ctx: Context) -> None:
    if view.spec.at is not None and not view.state.get("completed") and view.spec.at < ctx.clock.now():
        render.warn(f"{view.spec.name}: 'at' {view.spec.at.isoformat()} is in the past; "
                    "a running loop fires it at once")


# --- what each job command prints ---------------------------------------------------


def added(view: JobView, ctx: Context, json_out: bool) -> None:
    if json_out:
        render.print_json(job_json(view, ctx))
        return
    render.say(f"added {view.spec.name}: {view.spec.schedule_text} ({view.spec.timezone}), {next_fire_text(view)}")
    warn_if_past(view, ctx)


def edited(view: JobView, changed: list[str], ctx: Context, json_out: bool) -> None:
    name = view.spec.name
    if json_out:
        render.print_json({"job": job_json(view, ctx), "changed": changed})
    elif changed:
        render.say(f"updated {name}: {', '.join(changed)}; {next_fire_text(view)}")
        warn_if_past(view, ctx)
        if view.spec.source:
            render.warn(f"{name} is defined by {view.spec.source}; the next apply of that file overrides this edit")
    else:
        render.say(f"{name}: nothing changed")


def job_list(job_views: list[JobView], ctx: Context, json_out: bool) -> None:
    now, lease_ok = ctx.clock.now(), lease_checker()
    if json_out:
        # Every value is the store's or cronctl's own text, numbers and flags (job_json).
        render.print_json({"jobs": [listed_json(view, ctx, now, lease_ok) for view in job_views]},
                          from_store=ctx.backend.url is None)  # the JSON store: its parser vouches
        return
    render.jobs_table((job_row(view, now, owner_alive, lease_ok) for view in job_views), now)


def job_shown(view: JobView, ctx: Context, json_out: bool) -> None:
    data = job_json(view, ctx)
    if json_out:
        render.print_json(data)
        return
    render.job_detail(detail_fields(data))


def next_fires(results: list[NextFires], json_out: bool) -> None:
    """`cronctl next`: each job's instants in its own zone and in UTC."""
    rows = [(result.view.spec.name, result.view.spec.timezone, _local_and_utc(result)) for result in results]
    paused = {result.view.spec.name for result in results if result.view.paused}
    if json_out:
        render.print_json({"jobs": [
            {"name": job, "timezone": zone, "paused": job in paused,
             "fires": [{"local": render.local_iso(local), "utc": to_iso(utc)} for local, utc in instants]}
            for job, zone, instants in rows
        ]})
        return
    render.next_table(rows, paused, words={r.view.spec.name: describe(r.view.spec) for r in results})


def _local_and_utc(result: NextFires) -> list[tuple[datetime, datetime]]:
    spec = result.view.spec
    fires = [fire_at(spec, slot) for slot in result.instants] if spec.jitter > 0 else result.instants
    if spec.timezone == "UTC":  # a slot in UTC already reads the same in the zone UTC: not converted
        utc = timezone.utc
        return [(fire if fire.tzinfo is utc else fire.astimezone(ZoneInfo("UTC")), fire) for fire in fires]
    zone = ZoneInfo(spec.timezone)
    return [(fire.astimezone(zone), fire) for fire in fires]


def resumed(released: list[str], results: list[ResumeResult], json_out: bool) -> None:
    if json_out:
        render.print_json({"jobs": [r.__dict__ for r in results], "released_runs": released})
        return
    for run_id in released:
        render.say(f"released run {run_id}: its owner was dead or hung; its processes were killed")
    for result in results:
        cleared = f" (cleared {', '.join(result.cleared)})" if result.cleared else ""
        when = from_iso(result.next_fire_at) if result.next_fire_at else None
        fire = render.fire_text(when, result.timezone) if when else "-"
        render.say(f"resumed {result.name}{cleared}; next fire {fire}")
        if result.still_paused_by:
            render.warn(f"{result.name} stays paused: its file {result.still_paused_by} says paused: true")
