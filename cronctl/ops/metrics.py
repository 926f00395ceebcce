"""Prometheus text format from the store, the heartbeat and the loop's state.

Everything is read from persisted state (run totals per job, the lateness
histogram, recovery counters), so `cronctl metrics` in any process and the
loop's `--metrics-file` agree, and counters survive restarts as counters should.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from cronctl.errors import CronctlError
from cronctl.jobs.chain_health import chain_health
from cronctl.jobs.health import JobHealth, job_health
from cronctl.jobs.state import JobView
from cronctl.loop.heartbeat import LoopStatus
from cronctl.ops.chains import chain_metrics
from cronctl.ops.job_metrics import job_families, notification_counters
from cronctl.store.claims import LATENESS_BUCKETS
from cronctl.timefmt import from_iso

LOOP_STATES = ("ok", "stopped", "dead", "wedged", "cannot_write")
JOB_STATES = ("ok", "due", "running", "paused", "failing", "late", "wedged", "completed", "waiting")


def metrics_for(ctx: Any) -> bytes:
    """The metrics of one home, as any process sees them."""
    from cronctl.loop.heartbeat import loop_status, read_heartbeat
    from cronctl.ops.liveness import judges

    now = ctx.clock.now()
    alive, expired = judges(ctx)  # on PostgreSQL a run of another host is judged by its lease
    return render_text(ctx.store.read(), loop_status(ctx.paths, now), read_heartbeat(ctx.paths), now,
                       alive, expired)


def render_text(doc: dict[str, Any], loop: LoopStatus, heartbeat: dict[str, Any] | None, now: datetime,
                owner_alive: Any, lease_expired: Any) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(doc, loop, heartbeat, now, owner_alive, lease_expired))
    return generate_latest(registry)


def write_textfile(path: Path, data: bytes) -> None:
    """node_exporter reads the file at any moment: temp file in the same directory, then rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def write_output(path: Path, data: bytes) -> None:
    """`cronctl metrics -o PATH`: the textfile, durably (fsync'd: a one-off write, not the
    loop's tick); a path that cannot be written is the user's to fix, said in words."""
    from cronctl.store.statefiles import write_file_durably

    try:
        write_file_durably(path, data, 0o644)
    except OSError as exc:
        raise CronctlError(f"metrics -o {path}: cannot write: {exc.strerror or exc}") from None


class _Collector:
    def __init__(self, doc: dict[str, Any], loop: LoopStatus, heartbeat: dict[str, Any] | None, now: datetime,
                 owner_alive: Any, lease_expired: Any) -> None:
        self.doc, self.loop, self.heartbeat, self.now = doc, loop, heartbeat, now
        self.owner_alive, self.lease_expired = owner_alive, lease_expired

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        views = [JobView.from_entry(entry) for _, entry in sorted(self.doc["jobs"].items())]
        health = self._health(views)
        yield from self._run_metrics(views, CounterMetricFamily, GaugeMetricFamily)
        yield _job_states(health, GaugeMetricFamily)
        yield from job_families(views, health, JOB_STATES, GaugeMetricFamily)
        yield notification_counters(self.doc, CounterMetricFamily)
        yield self._lateness()
        yield from self._heal_counters(CounterMetricFamily)
        yield from chain_metrics(self.doc, CounterMetricFamily, GaugeMetricFamily)
        yield from self._loop_metrics(GaugeMetricFamily)

    def _health(self, views: list[JobView]) -> dict[str, JobHealth]:
        """Each job's state as `status` says it: a chain node waiting, or skipped, in chain words."""
        chains = self.doc.get("chains") or {}
        specs = {view.spec.name: view.spec for view in views} if chains else {}
        return {view.spec.name: (chain_health(chains, view, specs, self.now) if chains else None)
                or job_health(view, self.now, self.owner_alive, self.lease_expired) for view in views}

    def _run_metrics(self, views: list[JobView], counter: Any, gauge: Any) -> Iterator[Any]:
        runs = counter("cronctl_runs", "Finished runs by job and status.", labels=["job", "status"])
        last_run = gauge("cronctl_job_last_run_timestamp_seconds", "Start of the job's last run.", labels=["job"])
        last_ok = gauge("cronctl_job_last_success_timestamp_seconds", "End of the job's last successful run.",
                        labels=["job"])
        running = gauge("cronctl_job_running", "Runs of the job in progress.", labels=["job"])
        for view in views:
            name = view.spec.name
            for status, count in sorted((view.state.get("runs_by_status") or {}).items()):
                runs.add_metric([name, status], float(count))
            _add_timestamp(last_run, name, view.state.get("last_run_at"))
            _add_timestamp(last_ok, name, view.state.get("last_success_at"))
            running.add_metric([name], float(len(view.claims)))
        yield from (runs, last_run, last_ok, running)

    def _lateness(self) -> Any:
        from prometheus_client.core import HistogramMetricFamily

        hist = (self.doc.get("metrics") or {}).get("fire_lateness_seconds") or {}
        stored = hist.get("buckets") or {}
        buckets = [(repr(bound), float(stored.get(repr(bound)) or 0)) for bound in LATENESS_BUCKETS]
        buckets.append(("+Inf", float(hist.get("count") or 0)))
        return HistogramMetricFamily("cronctl_fire_lateness_seconds",
                                     "How late runs started after their slot (plus jitter).",
                                     buckets=buckets, sum_value=float(hist.get("sum") or 0.0))

    def _heal_counters(self, counter: Any) -> Iterator[Any]:
        family = counter("cronctl_recoveries", "Self-healing actions by kind.", labels=["kind"])
        known = ("owner_dead", "lease_expired", "deadline_terminated", "persisted_error_rearmed",
                 "generation_restarted", "takeover", "operator_release")
        counters = self.doc.get("counters") or {}
        for kind in sorted(set(known) | set(counters)):
            family.add_metric([kind], float(counters.get(kind) or 0))
        yield family

    def _loop_metrics(self, gauge: Any) -> Iterator[Any]:
        state = gauge("cronctl_loop_state", "1 for the loop's current state.", labels=["state"])
        for name in LOOP_STATES:
            state.add_metric([name], 1.0 if self.loop.state == name else 0.0)
        beat = gauge("cronctl_loop_heartbeat_timestamp_seconds", "Wall time of the loop's last tick.")
        last = from_iso((self.heartbeat or {}).get("last_tick_at"))
        beat.add_metric([], last.timestamp() if last else 0.0)
        yield from (state, beat)


def _job_states(health: dict[str, JobHealth], gauge: Any) -> Any:
    family = gauge("cronctl_jobs", "Jobs by state.", labels=["state"])
    counts = {name: 0 for name in JOB_STATES}
    for item in health.values():
        counts[item.state] = counts.get(item.state, 0) + 1
    for name, count in counts.items():
        family.add_metric([name], float(count))
    return family


def _add_timestamp(family: Any, job: str, iso: str | None) -> None:
    when = from_iso(iso)
    if when is not None:
        family.add_metric([job], when.timestamp())


class MetricsFile:
    """--metrics-file: rewritten on the tick after any store change, and at least every
    REFRESH seconds for the heartbeat gauge; an idle loop with 10,000 jobs must not rebuild
    every job's metrics every second."""

    REFRESH = 10.0

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._signature: tuple[int, int, int] | None = None
        self._written = float("-inf")  # the first tick writes, whatever the clock reads

    def maybe_write(self, ctx: Any) -> None:
        if self.path is None:
            return
        try:
            st = os.stat(ctx.paths.store)
            signature = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            signature = None
        now = ctx.clock.monotonic()
        if signature == self._signature and now - self._written < self.REFRESH:
            return
        write_textfile(self.path, metrics_for(ctx))
        self._signature, self._written = signature, now
