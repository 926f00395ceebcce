#!/usr/bin/env bash
# Two loops playing two hosts on one PostgreSQL store, on one machine (README: "Many hosts").
# Needs PostgreSQL's server binaries (Debian: postgresql) and a checkout with .venv; run from
# the checkout: bash docs/try-many-hosts.sh
# The throwaway server and both loops are stopped however this ends: done, Ctrl-C or an error.
set -euo pipefail
cronctl=.venv/bin/cronctl
.venv/bin/pip install -q -e '.[postgres]'  # the PostgreSQL driver (psycopg)

eval "$(python3 tests/helpers/pgserver.py start)"
cleanup() {
  local loops
  loops=$(jobs -p)
  [ -z "$loops" ] || { kill $loops 2>/dev/null || true; wait $loops 2>/dev/null || true; }
  python3 tests/helpers/pgserver.py stop "$CRONCTL_TEST_PG_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export CRONCTL_STORE="$CRONCTL_TEST_PG_URL"
home_a=$(mktemp -d) home_b=$(mktemp -d)
"$cronctl" --home "$home_a" add hello --every 2s -- sh -c 'echo "hello from $CRONCTL_HOST_ID"'
CRONCTL_HOST_ID=host-a "$cronctl" --home "$home_a" run &
CRONCTL_HOST_ID=host-b "$cronctl" --home "$home_b" run &
sleep 15 & wait $!  # in the background: a signal is handled at once, not after the sleep
"$cronctl" --home "$home_a" status
"$cronctl" --home "$home_a" history -n 6
