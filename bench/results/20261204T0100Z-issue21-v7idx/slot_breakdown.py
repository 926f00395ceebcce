"""bench/pg_apply_loops.py once, each slot of `tick` broken down from its run row (issue 21, v7idx).

For each slot: when its run was claimed (`claimed_at`, database clock), dispatched (`dispatched_at`) and
when the child wrote its line (the ledger), each relative to the slot, ms; and which loop (host) ran it.
Same flags as bench/pg_apply_loops.py; its table is printed first.

Usage: python slot_breakdown.py [--jobs 100000] [--window 30]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import pg_apply_loops  # noqa: E402
import pg_cluster  # noqa: E402

ROWS = """SELECT extract(epoch FROM slot), extract(epoch FROM claimed_at - slot) * 1000,
                 extract(epoch FROM dispatched_at - slot) * 1000, host_id,
                 extract(epoch FROM ended_at - slot) * 1000
            FROM cronctl_runs WHERE job = 'tick' AND slot IS NOT NULL ORDER BY slot"""
found: list[tuple[Any, ...]] = []
_kill_runs = pg_cluster.kill_runs


def kill_runs_and_keep(db_url: str) -> None:
    found.extend(pg_cluster.query(db_url, ROWS))
    _kill_runs(db_url)


def main() -> int:
    pg_cluster.kill_runs = kill_runs_and_keep
    original = pg_apply_loops.window
    windows: dict[str, tuple[float, float]] = {}

    def window(ledger: Path, first: float, start: float, end: float) -> dict[str, Any]:
        windows["quiet" if not windows else "apply"] = (start, end)
        windows.setdefault("ledger", (0.0, 0.0))
        kept["ledger"] = ledger
        return original(ledger, first, start, end)

    kept: dict[str, Path] = {}
    pg_apply_loops.window = window
    sys.argv = [sys.argv[0], "--slots", *sys.argv[1:]]
    pg_apply_loops.main()
    starts = {}
    for started, _name in pg_apply_loops.lateness.read_ledger(kept["ledger"]):
        starts.setdefault(round(started), started)
    print("slot (s from the apply's start) | window | claimed | dispatched | child's line | host (ms from the slot)")
    apply_start = windows["apply"][0]
    for slot, claimed, dispatched, host, _ended in found:
        slot = float(slot)
        where = next((name for name, (a, b) in windows.items() if a <= slot < b), "-")
        line = starts.get(round(slot))
        late = f"{(line - slot) * 1000:.0f}" if line is not None and line >= slot else "?"
        print(f"{slot - apply_start:6.0f} | {where:5} | {float(claimed):6.0f} | "
              f"{float(dispatched) if dispatched is not None else float('nan'):6.0f} | {late:>5} | {host}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
