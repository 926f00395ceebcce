"""Export to Kubernetes: one batch/v1 CronJob manifest per job.

The schedule is written as five numeric fields for the controller's cron
library (robfig/cron), which treats only a bare `*` as an unrestricted day
field; the zone goes into spec.timeZone. The container image is a placeholder.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import yaml

from cronctl.durations import format_duration
from cronctl.interop.export.base import ExportFile, ExportResult, comment_block, shared_notes
from cronctl.interop.export.chains import chain_note
from cronctl.interop.translate import cron_text, dst_notes, every_cron
from cronctl.models import Catchup, JobSpec, Overlap
from cronctl.schedule.cron import cron_cadence
from cronctl.schedule.cronexpr import parse_cron
from cronctl.schedule.intervals import default_grace

PLACEHOLDER_IMAGE = "registry.invalid/replace-me:latest"
# A CronJob's name is at most 52 characters: its Jobs append 11.
NAME_MAX = 52
CONCURRENCY = {Overlap.SKIP: "Forbid", Overlap.ALLOW: "Allow", Overlap.REPLACE: "Replace"}


def dns_name(name: str) -> str:
    """A DNS-1123 label from a cronctl name: `.` and `_` become `-`; a hash keeps it unique."""
    label = re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-") or "job"
    if label == name and len(label) <= NAME_MAX:
        return label
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:6]
    return f"{label[:NAME_MAX - 7].rstrip('-')}-{digest}"


def export_kube(specs: Sequence[JobSpec], now: datetime) -> ExportResult:
    result = ExportResult("kubernetes")
    for spec in specs:
        schedule, notes = _schedule(spec, now)
        notes += _field_notes(spec) + shared_notes(spec, "Kubernetes")
        result.notes[spec.name] = notes
        if schedule is None:
            result.omitted.append(spec.name)
            continue
        header = comment_block([f"CronJob for cronctl job {spec.name}, written by "
                                "`cronctl export --format kubernetes`.",
                                (f"image: {PLACEHOLDER_IMAGE} is a placeholder: replace it with an image that "
                                 "has the job's programs (cwd, env and command are read inside it).")])
        if notes:
            header += comment_block(["Not translated:"] + [f"  - {note}" for note in notes])
        body = yaml.safe_dump(manifest(spec, schedule, now), sort_keys=False, default_flow_style=False,
                              allow_unicode=True)
        result.files.append(ExportFile(f"{dns_name(spec.name)}.yaml", "\n".join(header) + "\n" + body))
    return result


def manifest(spec: JobSpec, schedule: str, now: datetime) -> dict[str, Any]:
    job_spec: dict[str, Any] = {"backoffLimit": spec.retries}
    if spec.timeout > 0:
        job_spec["activeDeadlineSeconds"] = max(1, math.ceil(spec.timeout))
    job_spec["template"] = {"spec": {"restartPolicy": "Never",
                                     "terminationGracePeriodSeconds": math.ceil(spec.kill_grace),
                                     "containers": [_container(spec)]}}
    cron_spec: dict[str, Any] = {
        "schedule": schedule,
        "timeZone": spec.timezone if spec.cron is not None else "Etc/UTC",
        "concurrencyPolicy": CONCURRENCY[spec.overlap],
        "suspend": spec.paused,
    }
    deadline = _starting_deadline(spec, now)
    if deadline is not None:
        cron_spec["startingDeadlineSeconds"] = deadline
    cron_spec["jobTemplate"] = {"spec": job_spec}
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": dns_name(spec.name), "labels": {"app.kubernetes.io/managed-by": "cronctl-export"},
                     "annotations": {"cronctl/job": spec.name}},
        "spec": cron_spec,
    }


def _container(spec: JobSpec) -> dict[str, Any]:
    if isinstance(spec.command, str):
        command, args = ["/bin/sh", "-c"], [spec.command]
    else:
        command, args = [spec.command[0]], list(spec.command[1:])
    container: dict[str, Any] = {"name": "job", "image": PLACEHOLDER_IMAGE, "command": _literal(command)}
    if args:
        container["args"] = _literal(args)
    if spec.cwd:
        container["workingDir"] = spec.cwd
    if spec.env:
        container["env"] = [{"name": k, "value": _literal([v])[0]} for k, v in sorted(spec.env.items())]
    return container


def _literal(words: list[str]) -> list[str]:
    # Kubernetes expands $(NAME) in command, args and env values, and reads $$ as $:
    # doubling every $ hands the text to the container as written.
    return [word.replace("$", "$$") for word in words]


def _starting_deadline(spec: JobSpec, now: datetime) -> int | None:
    """Kubernetes drops a slot later than startingDeadlineSeconds; cronctl does that only with
    `catchup: skip` (with `latest` it fires late), so only then is the deadline written."""
    if spec.catchup is not Catchup.SKIP:
        return None
    if spec.starting_deadline is not None:
        return max(1, math.ceil(spec.starting_deadline))
    if spec.grace is not None:
        return max(1, math.ceil(spec.grace))
    return math.ceil(default_grace(_cadence(spec, now)))


def _cadence(spec: JobSpec, now: datetime) -> float:
    if spec.every is not None:
        return spec.every
    # The default grace follows the cadence; the gap after `now` stands for it.
    expr = parse_cron(spec.cron or "0 0 * * *")
    return cron_cadence(expr, spec.timezone, now)


def _schedule(spec: JobSpec, now: datetime) -> tuple[str | None, list[str]]:
    if spec.after:
        return None, [chain_note(spec, "Kubernetes")]
    if spec.cron is not None:
        expr = parse_cron(spec.cron)
        text = cron_text(expr, star_prefix_is_star=False)
        if text is None:
            return None, [(f"cron {spec.cron!r}: both day fields restricted but combined with AND (a field "
                           "starting with '*'); Kubernetes would combine them with OR; no manifest written")]
        notes = dst_notes(expr, spec.timezone, now, "Kubernetes", "does not fire them at all",
                          "Kubernetes may fire this fixed-time schedule in both passes, cronctl in the first only",
                          fold_matters=expr.fixed_time)
        return text, notes
    if spec.every is not None:
        every = format_duration(spec.every)
        grid = every_cron(spec.every)
        if grid is None:
            return None, [(f"every {every}: a CronJob fires on a grid that divides an hour or a day, in "
                           "whole minutes; no manifest written")]
        return grid, [(f"every {every}: written as the clock grid {grid!r} (UTC); cronctl counts the interval "
                       "from the job's creation, so the phase differs")]
    return None, ["at: a CronJob has no one-shot schedule (use a plain Job); no manifest written"]


def _field_notes(spec: JobSpec) -> list[str]:
    notes = []
    if spec.catchup is Catchup.SKIP and (spec.starting_deadline or spec.grace or 10) < 10:
        notes.append("startingDeadlineSeconds below 10: the CronJob controller checks every 10s and may "
                     "miss such slots")
    if spec.catchup is Catchup.LATEST and spec.starting_deadline is not None:
        notes.append(f"starting_deadline {format_duration(spec.starting_deadline)}: not written: with catchup "
                     "latest cronctl still fires a late slot, Kubernetes would drop it")
    if spec.retries:
        notes.append(f"retry_delay {format_duration(spec.retry_delay)}: Kubernetes retries after 10s, 20s, 40s... "
                     "(at most 6m); activeDeadlineSeconds bounds all attempts together, not each one")
    if spec.timeout != math.ceil(spec.timeout) or spec.kill_grace != math.ceil(spec.kill_grace):
        notes.append("timeout/kill_grace: rounded up to whole seconds")
    if spec.jitter > 0:
        notes.append(f"jitter {format_duration(spec.jitter)}: a CronJob has no start delay")
    if spec.on_failure is not None:
        notes.append("on_failure: a CronJob runs nothing on failure (watch the Job's Failed condition)")
    return notes
