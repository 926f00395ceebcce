"""Run every benchmark and print every table; save them (Markdown + JSON) in a results directory.

    python bench/run.py            # the full set (about 25 minutes on 2 cores)
    python bench/run.py --quick    # smaller sizes and fewer rounds (about 6 minutes)
    python bench/run.py --only lateness,idle --install-peers

Peers: APScheduler 3.11 + SQLAlchemy (`pip install -e '.[bench]'`, or --install-peers),
Debian's cron when it can be installed and started (root; minute granularity; the
lateness table says when it was skipped). These machines are shared and noisy: every
figure is a median or a percentile of several rounds, and ratios are within one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import cli_latency  # noqa: E402 - the scripts beside this one, importable once HERE is on the path
import heal_times  # noqa: E402
import idle  # noqa: E402
import lateness  # noqa: E402
import scale  # noqa: E402
import store_speed  # noqa: E402
import targets  # noqa: E402
from _common import machine_note  # noqa: E402

ORDER = ("scale", "store", "idle", "lateness", "cli", "heal", "targets")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(ORDER), help=f"comma list of {', '.join(ORDER)}")
    parser.add_argument("--results", type=Path, default=None,
                        help="where to save (default bench/results/<UTC time>)")
    parser.add_argument("--install-peers", action="store_true", help="pip-install APScheduler, apt-get cron")
    parser.add_argument("--no-cron", action="store_true")
    args = parser.parse_args()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results = args.results or HERE / "results" / stamp
    results.mkdir(parents=True, exist_ok=True)
    quick = ["--quick"] if args.quick else []
    peers = ["--install-peers"] if args.install_peers else []
    wanted = args.only.split(",")
    started = time.monotonic()
    sections = []
    for name in ORDER:
        if name not in wanted:
            continue
        print(f"== {name}", file=sys.stderr, flush=True)
        common = [*quick, "--results", str(results)]
        if name == "scale":
            scale.main(common)
        elif name == "store":
            store_speed.main(common)
        elif name == "idle":
            idle.main([*common, *peers])
        elif name == "lateness":
            lateness.main([*common, *peers, *(["--no-cron"] if args.no_cron else [])])
        elif name == "cli":
            cli_latency.main(common)
        elif name == "heal":
            heal_times.main(common)
        elif name == "targets":  # issue 27's rows, each with its floor and ratio
            targets.main([*(["--rounds", "5", "--window", "20"] if args.quick else []), "--results", str(results)])
        sections.append(name)
    files = {"scale": "scale.md", "store": "store_speed.md", "idle": "idle.md", "lateness": "lateness.md",
             "cli": "cli_latency.md", "heal": "heal_times.md", "targets": "targets.md"}
    body = [f"# cronctl benchmarks, {stamp}", "", f"- {machine_note()}",
            f"- `python bench/run.py{' --quick' if args.quick else ''}` took {time.monotonic() - started:.0f} s", ""]
    for name in sections:
        body.append((results / files[name]).read_text())
    (results / "results.md").write_text("\n".join(body))
    print("\n".join(body))
    print(f"saved in {results}", file=sys.stderr)


if __name__ == "__main__":
    main()
