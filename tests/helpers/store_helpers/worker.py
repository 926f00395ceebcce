"""A store client run as a real, separate process by the store tests.

    worker.py increment HOME N      N read-modify-write increments of counters["n"];
                                    prints the JSON list of revs this process wrote
    worker.py set HOME NAME VALUE   one transaction setting jobs[NAME] = {"value": VALUE}
    worker.py hold HOME             take the store lock, print "locked", keep it until stdin closes

A StoreError exits with STORE_ERROR_EXIT and its message on stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cronctl.errors import StoreError
from cronctl.paths import Paths
from cronctl.store.jsonstore import Store

# The exit code of a StoreError; its message goes to stderr.
STORE_ERROR_EXIT = 3


def increment(store: Store, times: int) -> None:
    revs = []
    for _ in range(times):
        with store.transaction() as doc:
            doc["counters"]["n"] = doc["counters"].get("n", 0) + 1
        revs.append(store.last_written_rev)
    print(json.dumps(revs))


def set_job(store: Store, name: str, value: str) -> None:
    with store.transaction() as doc:
        doc["jobs"][name] = {"value": value}
    print(store.last_written_rev)


def hold(store: Store) -> None:
    with store.transaction():
        print("locked", flush=True)
        sys.stdin.read()


def main(argv: list[str]) -> int:
    command, home, *rest = argv
    store = Store(Paths(Path(home)))
    try:
        if command == "increment":
            increment(store, int(rest[0]))
        elif command == "set":
            set_job(store, rest[0], rest[1])
        elif command == "hold":
            hold(store)
        else:
            raise SystemExit(f"unknown command {command!r}")
    except StoreError as exc:
        print(exc, file=sys.stderr)
        return STORE_ERROR_EXIT
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
