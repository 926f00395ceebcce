"""Shared helpers of the benchmark scripts: homes with N jobs, stats, tables, peers.

Plain Python, no third-party imports at module level: every script runs from a fresh
clone after `pip install -e .` (peers: `pip install -e '.[bench]'`, or let the script
install them with --install-peers).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PYTHON = sys.executable


def cronctl_cmd() -> list[str]:
    beside = Path(sys.executable).with_name("cronctl")
    return [str(beside)] if beside.exists() else [sys.executable, "-m", "cronctl"]


def bench_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["CRONCTL_HOME"] = str(home)
    env["NO_COLOR"] = "1"
    return env


def new_workdir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"cronctl-bench-{prefix}-"))


# --- homes ---------------------------------------------------------------------------


def populate(home: Path, count: int, *, command: str = "true", every: str | None = "1h",
             cron: str | None = None, prefix: str = "job", clock: Any = None,
             next_run_at: datetime | None = None) -> Any:
    """Put `count` jobs in the store of `home` in one write; returns the Context.

    Built from JobSpecs the way `apply` builds them (entry_from + new_state), so the
    document has exactly the shape a real store has, without validating 50,000 YAML
    entries first.
    """
    from cronctl.context import Context
    from cronctl.jobs.state import entry_from, new_state
    from cronctl.models import JobSpec
    from cronctl.schedule.slots import first_slot

    ctx = Context.open(home, clock=clock)
    now = ctx.clock.now()
    every_s = None
    if every is not None:
        from cronctl.durations import parse_duration
        every_s = parse_duration(every, field="every")
    with ctx.store.transaction() as doc:
        for index in range(count):
            spec = JobSpec(name=f"{prefix}-{index:05d}", command=command, cron=cron,
                           every=None if cron else every_s)
            slot = next_run_at or first_slot(spec, now)
            doc["jobs"][spec.name] = entry_from(spec, new_state(now, slot))
    return ctx


# --- numbers ---------------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(round(q / 100.0 * len(ordered) + 0.5))))
    return ordered[rank - 1]


def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def ms(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    return f"{seconds * 1000:.1f}"


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:.{digits}f}"
    return str(value)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], command: str | None = None) -> str:
    """A Markdown table (what docs/benchmarks.md holds), with the command that made it."""
    out = [f"### {title}", ""]
    if command:
        out += [f"`{command}`", ""]
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + "|".join("---" for _ in headers) + "|")
    for row in rows:
        out.append("| " + " | ".join(str(cell) for cell in row) + " |")
    out.append("")
    return "\n".join(out)


def machine_note() -> str:
    load = os.getloadavg()
    return (f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at "
            f"{datetime.now(UTC).isoformat(timespec='seconds')}, Python {sys.version.split()[0]}")


def save_results(results_dir: Path | None, name: str, data: dict[str, Any], text: str) -> None:
    if results_dir is None:
        return
    results_dir.mkdir(parents=True, exist_ok=True)
    (results_dir / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    (results_dir / f"{name}.md").write_text(text)


# --- processes ---------------------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        data = handle.read()
    fields = data[data.rindex(b")") + 2:].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def threads_cpu_seconds(pid: int) -> float:
    """CPU time of every live thread of a process, in nanoseconds from /proc/PID/task/*/schedstat:
    an idle loop uses a few milliseconds a minute, below utime's 10 ms clock ticks."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def proc_status(pid: int) -> dict[str, str]:
    out: dict[str, str] = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            out[key] = value.strip()
    return out


def vm_hwm_mib(pid: int) -> float:
    return int(proc_status(pid)["VmHWM"].split()[0]) / 1024.0


def vm_rss_mib(pid: int) -> float:
    return int(proc_status(pid)["VmRSS"].split()[0]) / 1024.0


def threads_of(pid: int) -> int:
    return int(proc_status(pid)["Threads"])


def wait_for(predicate: Any, timeout: float, interval: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"condition not met within {timeout}s")


def wait_ticking(home: Path, pid: int, timeout: float = 60.0, ticks: int = 1) -> dict[str, Any]:
    def ticking() -> dict[str, Any] | None:
        try:
            hb = json.loads((home / "scheduler.json").read_text())
        except (OSError, ValueError):
            return None
        return hb if hb.get("pid") == pid and hb.get("ticks", 0) >= ticks else None

    return wait_for(ticking, timeout)


def start_loop(home: Path, *args: str, stderr: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*cronctl_cmd(), "run", *args], env=bench_env(home), stdout=subprocess.DEVNULL,
                            stderr=stderr, start_new_session=True)


def stop_loop(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    import signal

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def ensure_peers(install: bool) -> bool:
    """APScheduler 3.11 + SQLAlchemy importable? With `install`, pip-install the bench extra's pins."""
    try:
        import apscheduler
        import sqlalchemy

        return apscheduler.__version__.startswith("3.")
    except ImportError:
        if not install:
            return False
    subprocess.run([PYTHON, "-m", "pip", "install", "-q", "APScheduler>=3.11,<4", "SQLAlchemy>=2"], check=False)
    try:
        import apscheduler
        import sqlalchemy  # noqa: F401
    except ImportError:
        return False
    return True


def utc_now() -> datetime:
    return datetime.now(UTC)


def next_instant(lead: float) -> datetime:
    """A whole second at least `lead` seconds from now (UTC)."""
    now = utc_now()
    target = now + timedelta(seconds=lead)
    return target.replace(microsecond=0) + timedelta(seconds=1)
