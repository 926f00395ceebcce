"""How K gated children are best released at one instant: one gate each, or one gate for all?

K shells, each in a session of its own as cronctl's children are, wait at a gate; at the
instant they are released and run the command of bench/lateness.py (`date ... >> LEDGER`);
lateness = the child's first `date` - the instant, p50 / p99 over ROUNDS instants. The
gate script is cronctl's (proc/gate.py); the ways of releasing them:

- per-child: a pipe each on fd 3, "go" written to each at the instant (what cronctl does);
- shared-close: the same, plus one pipe every child reads first on fd 4; "go" is written to
  each gate just before the instant (no child reads it yet, so no write wakes one), and
  closing the shared pipe at the instant wakes them all (one syscall);
- shared-bytes: the same, but the shared pipe gets one newline per child in one write
  (dash reads a pipe a byte at a time, so each child takes exactly one).

"release" is how long the releasing thread took (its writes, or its close: the kernel wakes
the waiters in chunks, and the woken children preempt it in between).

Usage: python bench/gate_release.py [--k 500] [--rounds 3] [--repeat 2]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fmt, machine_note, pct, table  # noqa: E402

from cronctl.proc.gate import GATE_NAME, GATE_SCRIPT, GATE_SHELL  # noqa: E402

MODES = ("per-child", "shared-close", "shared-bytes")
SHARED_FD = 4
SHARED_SCRIPT = GATE_SCRIPT.replace("IFS= read -r line <&3\nexec 3<&-",
                                    f"read -r line <&{SHARED_FD}\nIFS= read -r line <&3\nexec 3<&- {SHARED_FD}<&-")
assert SHARED_SCRIPT != GATE_SCRIPT, "proc/gate.py's gate lines changed: update SHARED_SCRIPT"


def high_pipe() -> tuple[int, int]:
    """A close-on-exec pipe above the fds the children get (0-4)."""
    ends = []
    for fd in os.pipe():
        ends.append(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, SHARED_FD + 1))
        os.close(fd)
    return ends[0], ends[1]


def spawn(mode: str, line: str, shared_r: int) -> tuple[int, int]:
    """One gated child in a session of its own: (pid, its gate's write end)."""
    gate_r, gate_w = high_pipe()
    actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0), (os.POSIX_SPAWN_DUP2, gate_r, 3)]
    script = GATE_SCRIPT
    if mode != "per-child":
        actions.append((os.POSIX_SPAWN_DUP2, shared_r, SHARED_FD))
        script = SHARED_SCRIPT
    argv = [GATE_SHELL, "-c", script, GATE_NAME, "", "-c", line]
    pid = os.posix_spawn(GATE_SHELL, argv, dict(os.environ), file_actions=actions, setsid=True)
    os.close(gate_r)
    return pid, gate_w


def one_instant(mode: str, k: int, ledger: Path) -> tuple[list[float], float]:
    """Release K children at an instant; their lateness (seconds) and how long the release took."""
    shared_r, shared_w = high_pipe()
    children = [spawn(mode, f'date "+%s.%N" >> {ledger}', shared_r) for _ in range(k)]
    instant = time.time() + 1.0
    if mode != "per-child":
        for _pid, gate in children:
            os.write(gate, b"go\n")  # no child reads its gate yet: no write wakes one
    time.sleep(max(0.0, instant - time.time()))
    began = time.perf_counter()
    if mode == "per-child":
        for _pid, gate in children:
            os.write(gate, b"go\n")
    elif mode == "shared-bytes":
        os.write(shared_w, b"\n" * k)
    os.close(shared_w)
    took = time.perf_counter() - began
    os.close(shared_r)
    for pid, gate in children:
        os.close(gate)
        os.waitpid(pid, 0)
    late = [float(text) - instant for text in ledger.read_text().split()]
    ledger.unlink()
    return late, took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="instants per mode and repeat")
    parser.add_argument("--repeat", type=int, default=2, help="times each mode is measured, in turn")
    args = parser.parse_args(argv)
    ledger = Path(tempfile.mkdtemp(prefix="cronctl-bench-gate-")) / "ledger"
    rows = []
    for repeat in range(args.repeat):
        for mode in MODES:
            late, took = [], []
            for _ in range(args.rounds):
                values, seconds = one_instant(mode, args.k, ledger)
                late += values
                took.append(seconds)
            rows.append([args.k, mode, repeat + 1, f"{len(late)}/{args.k * args.rounds}",
                         fmt(1000 * pct(late, 50)), fmt(1000 * pct(late, 99)), fmt(1000 * max(took))])
    ledger.parent.rmdir()
    print(table(f"Releasing K gated children at one instant (ms; {args.rounds} instants each)",
                ["K", "release", "repeat", "starts seen", "p50", "p99", "release took (max)"], rows,
                command=f"python bench/gate_release.py --k {args.k} --rounds {args.rounds} --repeat {args.repeat}"))
    print(f"- {machine_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
