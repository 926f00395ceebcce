"""`cronctl export --format systemd-service`: a unit for the loop itself (not one per job).

The loop speaks the notify protocol (Type=notify, WatchdogSec=), ends its own jobs at
SIGTERM within their kill_grace (KillMode=mixed, TimeoutStopSec= above the largest
grace plus the drain and the shutdown bound), and is restarted whatever way it ends.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cronctl.interop.export.base import ExportFile, ExportResult, comment_block
from cronctl.interop.export.systemd import exec_line, span
from cronctl.models import JobSpec

UNIT_NAME = "cronctl.service"
# How long the loop waits at shutdown beyond the largest kill_grace: the output drain
# (the supervisor's drain_timeout) plus the engine's own 10 s bound.
DRAIN_BOUND = 2.0
SHUTDOWN_BOUND = 10.0
# Slack on top, so systemd's SIGKILL never lands while the loop still records its runs.
STOP_SLACK = 10.0
# A wedged tick thread stops the pings; systemd restarts the loop this long after the last one.
WATCHDOG_SEC = 60.0
# Leading may first mean healing a large home: READY=1 can take a while.
START_TIMEOUT = "5min"

# Options that confine the loop without changing what a job can do, each with its reason.
HARDENING = (
    ("LockPersonality=yes", "no job needs to switch the execution domain (personality(2))"),
    ("RestrictRealtime=yes", "no realtime scheduling: a runaway job cannot starve the machine"),
    ("NotifyAccess=main", "only the loop may speak to systemd: a job that inherits $NOTIFY_SOCKET "
                          "cannot send READY=1 or WATCHDOG=1 for it"),
)
# Stricter options that break some jobs: written commented out, to enable knowingly.
OPTIONAL_HARDENING = (
    ("NoNewPrivileges=yes", "breaks jobs that use sudo or other setuid programs"),
    ("PrivateTmp=yes", "jobs get their own /tmp, not the one other programs see"),
    ("ProtectSystem=full", "/usr, /boot and /etc become read-only for jobs too"),
    ("ProtectHome=read-only", "jobs cannot write under /home"),
    ("ProtectControlGroups=yes", "breaks jobs that manage cgroups themselves, e.g. rootless containers"),
)


@dataclass(frozen=True)
class LoopSetup:
    """What the unit runs: the cronctl command, the home in use, the watched jobs file (if any)."""

    command: tuple[str, ...]
    home: Path
    jobs_file: Path | None = None
    store: str | None = None  # the PostgreSQL store's URL, its password left out; None: the JSON store


def stop_timeout(specs: Sequence[JobSpec]) -> float:
    grace = max((spec.kill_grace for spec in specs), default=0.0)
    return float(math.ceil(grace + DRAIN_BOUND + SHUTDOWN_BOUND + STOP_SLACK))


def export_service(specs: Sequence[JobSpec], setup: LoopSetup) -> ExportResult:
    result = ExportResult("systemd-service")
    result.files.append(ExportFile(UNIT_NAME, unit_text(specs, setup)))
    return result


def unit_text(specs: Sequence[JobSpec], setup: LoopSetup) -> str:
    argv = [*setup.command, "--home", str(setup.home), "run"]
    if setup.jobs_file is not None:
        argv += ["-f", str(setup.jobs_file)]
    grace = max((spec.kill_grace for spec in specs), default=0.0)
    lines = comment_block([
        f"{UNIT_NAME}: the cronctl loop, written by `cronctl export --format systemd-service`.",
        "Install in /etc/systemd/system, then `systemctl enable --now cronctl`.",
        "System units run as root: add User= to run as the owner of the home.",
    ])
    lines += ["[Unit]", "Description=cronctl scheduler loop", "After=network-online.target",
              "Wants=network-online.target"]
    lines += comment_block(["Restart=always must never give up: no start rate limit."])
    lines += ["StartLimitIntervalSec=0", "", "[Service]"]
    if setup.store is not None:
        lines += comment_block(["The PostgreSQL store every host's loop shares (SPEC §9). Its password is not "
                                "written here: put it in ~/.pgpass of the unit's user (or name a file with "
                                "Environment=PGPASSFILE=)."])
        quoted = setup.store.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")  # systemd's quoting
        lines += [f'Environment="CRONCTL_STORE={quoted}"']
    lines += comment_block(["READY=1 once the loop leads; WATCHDOG=1 only while its tick thread completes "
                            "ticks, so a wedged loop is restarted."])
    lines += ["Type=notify", f"ExecStart={exec_line(tuple(argv))}", f"WatchdogSec={span(WATCHDOG_SEC)}",
              f"TimeoutStartSec={START_TIMEOUT}", "Restart=always", "RestartSec=2"]
    lines += comment_block([
        "SIGTERM to the loop alone: it stops claiming, ends its running jobs within their kill_grace, "
        "records them and exits 0; the jobs' leftovers get SIGKILL after that.",
        f"TimeoutStopSec: the largest kill_grace ({span(grace)}) + the drain ({span(DRAIN_BOUND)}) "
        f"+ the shutdown bound ({span(SHUTDOWN_BOUND)}) + slack ({span(STOP_SLACK)}).",
    ])
    lines += ["KillMode=mixed", f"TimeoutStopSec={span(stop_timeout(specs))}", ""]
    lines += comment_block(["Hardening that leaves what a job can do unchanged:"])
    for option, why in HARDENING:
        lines += comment_block([why]) + [option]
    lines += comment_block(["Stricter, but each breaks some jobs; uncomment knowingly:"])
    for option, why in OPTIONAL_HARDENING:
        lines += comment_block([f"{option}  ({why})"])
    lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"
