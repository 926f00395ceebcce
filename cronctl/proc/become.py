"""The child's own setup before its gate (SPEC §13): run as a separate program, by the
interpreter with `-I -S`, so it imports nothing but the standard library.

argv: SETUP -- PROGRAM ARGS...   SETUP is `name=value` items joined by ',':
nice=N, a resource name (AS, CPU, NOFILE, NPROC) =soft:hard, uid=, gid=, groups=g1:g2.

In this order: nice (lowering it needs root, so before the user switch), the resource
limits, then setgroups (the user database's groups, as initgroups(3) reads them, looked
up by the loop), setgid, setuid; then exec of PROGRAM (the gate shell: the pid and
start time the loop persisted stay the same). On failure it prints MARKER and why on
stderr (the run's log) and exits SETUP_FAILED without running anything of the job.
"""

from __future__ import annotations

import os
import resource
import signal
import sys

SETUP_FAILED = 122
MARKER = "[cronctl] run setup failed:"


def _limit(name: str, text: str) -> None:
    kind = getattr(resource, "RLIMIT_" + name)
    soft_text, _, hard_text = text.partition(":")
    soft, hard = int(soft_text), int(hard_text or soft_text)
    try:
        resource.setrlimit(kind, (soft, hard))
    except (ValueError, OSError):
        # Not root: the hard limit cannot be raised; keep it and stay at or under it.
        current_hard = resource.getrlimit(kind)[1]
        if current_hard != resource.RLIM_INFINITY:
            soft = min(soft, current_hard)
        resource.setrlimit(kind, (soft, current_hard))


def apply(setup: str) -> None:
    items = dict(item.partition("=")[::2] for item in setup.split(",") if item)
    step = "set its priority"
    try:
        if "nice" in items:
            os.setpriority(os.PRIO_PROCESS, 0, int(items["nice"]))
        for name in ("AS", "CPU", "NOFILE", "NPROC"):
            if name in items:
                step = f"set its {name} limit"
                _limit(name, items[name])
        if "uid" in items:
            step = "switch to uid " + items["uid"]
            groups = [int(g) for g in items.get("groups", "").split(":") if g]
            os.setgroups(groups)
            os.setgid(int(items["gid"]))
            os.setuid(int(items["uid"]))
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"{MARKER} cannot {step}: {exc}\n")
        sys.stderr.flush()
        os._exit(SETUP_FAILED)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write(f"{MARKER} usage: become.py SETUP -- PROGRAM ARGS...\n")
        os._exit(SETUP_FAILED)
    apply(argv[1])
    # Python ignores SIGPIPE and SIGXFSZ at start-up; ignored signals survive exec.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    try:
        os.execv(argv[3], argv[3:])
    except OSError as exc:
        sys.stderr.write(f"{MARKER} cannot start {argv[3]}: {exc}\n")
        sys.stderr.flush()
        os._exit(SETUP_FAILED)


if __name__ == "__main__":
    main(sys.argv)
