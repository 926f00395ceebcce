"""The per-job series a Prometheus alert is written against (SPEC §12), and the counters of
notification delivery. Read from persisted state, like the rest of ops/metrics.py.

    cronctl_job_last_exit_code{job}                 absent until a run ended with a code
    cronctl_job_consecutive_failures{job}
    cronctl_job_last_duration_seconds{job}
    cronctl_job_next_fire_timestamp_seconds{job}    absent when nothing is scheduled
    cronctl_job_state{job,state}                    1 for the job's state, 0 for the others
    cronctl_notifications_total{outcome}            sent, failed (each failed try), abandoned
    cronctl_notifications_owed{job}                 owed and not yet delivered
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from cronctl.jobs.health import JobHealth, failure_streak
from cronctl.jobs.state import JobView
from cronctl.store.notify_owed import OWED
from cronctl.timefmt import from_iso

# The exposition's content type: the 0.0.4 text format, which Prometheus 2 and 3 both parse
# (prometheus_client's CONTENT_TYPE_LATEST now says version=1.0.0, which Prometheus 2 predates).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NOTIFY_OUTCOMES = ("sent", "failed", "abandoned")


def job_families(views: list[JobView], health: Mapping[str, JobHealth], states: tuple[str, ...],
                 gauge: Any) -> Iterator[Any]:
    exit_code = gauge("cronctl_job_last_exit_code", "Exit code of the job's last run.", labels=["job"])
    streak = gauge("cronctl_job_consecutive_failures", "Failed runs in a row since the last success.",
                   labels=["job"])
    duration = gauge("cronctl_job_last_duration_seconds", "How long the job's last run took.", labels=["job"])
    next_fire = gauge("cronctl_job_next_fire_timestamp_seconds", "When the job next fires.", labels=["job"])
    state = gauge("cronctl_job_state", "1 for the job's current state.", labels=["job", "state"])
    owed = gauge("cronctl_notifications_owed", "Notifications owed and not yet delivered.", labels=["job"])
    for view in views:
        name, saved = view.spec.name, view.state
        code = saved.get("last_exit_code")
        if isinstance(code, int) and not isinstance(code, bool):
            exit_code.add_metric([name], float(code))
        streak.add_metric([name], float(failure_streak(saved)))
        if isinstance(saved.get("last_duration"), (int, float)):
            duration.add_metric([name], float(saved["last_duration"]))
        when = from_iso(saved.get("retry", {}).get("due_at") if saved.get("retry") else saved.get("next_run_at"))
        if when is not None:
            next_fire.add_metric([name], when.timestamp())
        current = health[name].state if name in health else None
        for word in states:
            state.add_metric([name, word], 1.0 if word == current else 0.0)
        owed.add_metric([name], float(len(saved.get(OWED) or {})))
    yield from (exit_code, streak, duration, next_fire, state, owed)


def notification_counters(doc: dict[str, Any], counter: Any) -> Any:
    family = counter("cronctl_notifications", "Notification delivery tries by outcome.", labels=["outcome"])
    stored = (doc.get("metrics") or {}).get("notifications") or {}
    for outcome in NOTIFY_OUTCOMES:
        family.add_metric([outcome], float(stored.get(outcome) or 0))
    return family
