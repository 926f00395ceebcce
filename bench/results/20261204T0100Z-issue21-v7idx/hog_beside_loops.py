"""The loops' lateness beside a plain CPU hog instead of the apply (issue 21, v7idx): what one busy
core costs them on this machine, whatever the apply does.

bench/pg_apply_loops.py once, its `cronctl apply -f FILE` replaced by `PREFIX python3 -c LOOP` spinning
for `--hog-s` seconds (PREFIX: `nice -n 10` by default; `--prefix ''` for none, `--prefix 'chrt --idle 0'`).

Usage: python hog_beside_loops.py [--hog-s 9] [--prefix 'nice -n 10'] [--window 30]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import pg_apply_loops  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hog-s", type=float, default=9.0)
    parser.add_argument("--prefix", default="nice -n 10")
    known, rest = parser.parse_known_args()
    spin = f"import time\nend = time.monotonic() + {known.hog_s}\nwhile time.monotonic() < end: pass"
    command = [*shlex.split(known.prefix), sys.executable, "-c", spin]
    pg_apply_loops.cronctl_bin = lambda: command  # the bench appends `apply -f FILE`: argv of the spin
    pg_apply_loops.big_file = lambda path, jobs: path  # nothing to parse
    sys.argv = [sys.argv[0], "--slots", "--jobs", "0", *rest]
    print(f"hog: {shlex.join(command[:-2])} -c <spin {known.hog_s:g} s>")
    return pg_apply_loops.main()


if __name__ == "__main__":
    sys.exit(main())
