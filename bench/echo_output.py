"""`cronctl run --echo-output` beside a flood: how late a quiet job's line reaches the
loop's stdout while another job prints 100 MiB (issue 24: within 1 s).

The quiet job prints its own wall-clock time each second; this script reads the loop's
stdout as fast as it can and prints the delay of each line (median, max), and how many
of the flood's lines were echoed or counted as dropped.

    python bench/echo_output.py [--mib 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cronctl_cmd  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="cronctl-echo-bench-"))
    env = {**os.environ, "CRONCTL_HOME": str(home)}
    jobs = home / "jobs.yaml"
    jobs.write_text("jobs:\n"
                    f"  - name: flood\n    every: 1h\n    command: 'head -c {args.mib << 20} /dev/zero | "
                    "tr \"\\\\0\" y | fold -w 99'\n"
                    "  - name: ticker\n    every: 1s\n    command: 'date +%s.%N'\n")
    subprocess.run([*cronctl_cmd(), "apply", "-f", str(jobs)], env=env, check=True, capture_output=True)
    loop = subprocess.Popen([*cronctl_cmd(), "run", "--echo-output"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    delays: list[float] = []
    counts = {"flood": 0, "dropped": 0}

    def read() -> None:
        assert loop.stdout is not None
        for line in loop.stdout:
            if line.startswith(b"ticker "):
                delays.append(time.time() - float(line.rsplit(b"| ", 1)[1]))
            elif b"not echoed in all" in line:
                counts["dropped"] = int(re.search(rb"\] (\d+) line", line).group(1))  # type: ignore[union-attr]
            elif line.startswith(b"flood "):
                counts["flood"] += 1

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    time.sleep(2)
    subprocess.run([*cronctl_cmd(), "force-run", "flood"], env=env, check=True, capture_output=True)
    time.sleep(args.seconds)
    os.killpg(loop.pid, signal.SIGTERM)
    loop.wait(timeout=60)
    reader.join(10)
    print(f"ticker lines: {len(delays)}; delay median {statistics.median(delays) * 1000:.1f} ms, "
          f"max {max(delays) * 1000:.1f} ms")
    print(f"flood lines echoed {counts['flood']}, dropped and counted {counts['dropped']}, "
          f"total {counts['flood'] + counts['dropped']} (expected {((args.mib << 20) + 98) // 99})")


if __name__ == "__main__":
    main()
