#!/usr/bin/env python3
"""A throwaway PostgreSQL server for the tests: initdb into a temp dir, start, print a URL; stop.

Developer one-liner (from the repository root; the server lives until `stop`):

    eval "$(python3 tests/helpers/pgserver.py start)" && .venv/bin/python -m pytest -q tests/pg; \
        python3 tests/helpers/pgserver.py stop "$CRONCTL_TEST_PG_DIR"

`start` prints `export CRONCTL_TEST_PG_URL=...` (a libpq URL of an empty database) and
`export CRONCTL_TEST_PG_DIR=...` (what `stop` needs). Without the exports the tests start
a server of their own the same way (tests/pg/conftest.py). Standard library only, so CI
can call it before any venv exists.

As root the server runs as the `postgres` OS user (initdb refuses root); otherwise as the
caller. It listens on a free loopback port and on a socket inside its own directory, with
trust authentication: it is a test server that lives for one session and then is deleted.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

TEST_DATABASE = "cronctl_test"
SUPERUSER = "postgres"
# Small and quick: one test session needs a few dozen connections and a few MB of cache.
# Commits still wait for their WAL write (synchronous_commit=on); only the flush to the
# disk is skipped unless asked for (bench/pg_claim.py --fsync measures with it).
SERVER_SETTINGS = (
    "-c listen_addresses=127.0.0.1",
    "-c shared_buffers=16MB",
    "-c max_connections=60",
    "-c synchronous_commit=on",
)
NO_FLUSH_SETTINGS = ("-c fsync=off", "-c full_page_writes=off")
START_ATTEMPTS = 3  # a free port can be taken between choosing it and binding it


class ServerUnavailable(Exception):
    """No server can be started here; the message says why."""


@dataclass(frozen=True)
class Server:
    data_dir: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{TEST_DATABASE}"


def find_bindir() -> Path:
    """The newest installed PostgreSQL's bin directory (Debian layout), or `initdb` on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major_version)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise ServerUnavailable("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH)")


def _major_version(initdb: str) -> float:
    try:
        return float(Path(initdb).parent.parent.name)
    except ValueError:
        return 0.0


def _run_as() -> str | None:
    """The OS user the server runs as: `postgres` when we are root, else None (ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError as exc:
        raise ServerUnavailable("running as root but there is no `postgres` OS user to run the server") from exc
    return SUPERUSER


def _command(args: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *args] if user else args


def _check(args: list[str], user: str | None, what: str) -> None:
    done = subprocess.run(_command(args, user), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise ServerUnavailable(f"{what} failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(fsync: bool = False) -> Server:
    """initdb into a fresh temp dir, start the server on a free port, create the test database."""
    bindir = find_bindir()
    user = _run_as()
    data_dir = Path(tempfile.mkdtemp(prefix="cronctl-pg-"))
    if user:
        entry = pwd.getpwnam(user)
        os.chown(data_dir, entry.pw_uid, entry.pw_gid)
    try:
        _check([str(bindir / "initdb"), "-D", str(data_dir), "-A", "trust", "-U", SUPERUSER, "--no-sync",
                "-E", "UTF8", "--locale=C"], user, "initdb")
        settings = SERVER_SETTINGS + (() if fsync else NO_FLUSH_SETTINGS)
        server = _start_on_free_port(bindir, data_dir, user, settings)
        _check([str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(server.port), "-U", SUPERUSER,
                TEST_DATABASE], user, "createdb")
        return server
    except BaseException:
        stop(data_dir)
        raise


def _start_on_free_port(bindir: Path, data_dir: Path, user: str | None, settings: tuple[str, ...]) -> Server:
    last = ""
    for _ in range(START_ATTEMPTS):
        port = free_port()
        options = " ".join((f"-p {port}", f"-k {data_dir}", *settings))
        done = subprocess.run(
            _command([str(bindir / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(data_dir),
                      "-l", str(data_dir / "server.log"), "-o", options], user),
            capture_output=True, text=True, timeout=90)
        if done.returncode == 0:
            return Server(data_dir, port)
        last = _tail(data_dir / "server.log") or done.stderr.strip()
        time.sleep(0.2)
    raise ServerUnavailable(f"pg_ctl start failed {START_ATTEMPTS} times; last: {last}")


def _tail(path: Path, lines: int = 5) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def stop(data_dir: Path) -> None:
    """Stop the server (fast shutdown: test connections are cut) and delete its directory."""
    if (data_dir / "postmaster.pid").exists():
        try:
            bindir = find_bindir()
            subprocess.run(_command([str(bindir / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(data_dir)],
                                    _run_as()), capture_output=True, timeout=60)
        except (ServerUnavailable, subprocess.TimeoutExpired):
            pass
    shutil.rmtree(data_dir, ignore_errors=True)


def restart(server: Server, mode: str = "fast", down_s: float = 0.0) -> None:
    """Stop the server (`fast` or `immediate`: a crash), stay down `down_s`, start it again on its port."""
    shut_down(server, mode)
    time.sleep(down_s)
    start_again(server)


def shut_down(server: Server, mode: str = "fast") -> None:
    """Stop the server, keeping its data directory (`start_again` brings it back)."""
    _check([str(find_bindir() / "pg_ctl"), "stop", "-w", "-m", mode, "-D", str(server.data_dir)], _run_as(),
           "pg_ctl stop")


def start_again(server: Server) -> None:
    """Start a server `shut_down` stopped, on the port it had."""
    options = " ".join((f"-p {server.port}", f"-k {server.data_dir}", *SERVER_SETTINGS, *NO_FLUSH_SETTINGS))
    _check([str(find_bindir() / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(server.data_dir),
            "-l", str(server.data_dir / "server.log"), "-o", options], _run_as(), "pg_ctl start")


def must_fail_without_server(env: dict[str, str] | os._Environ[str]) -> bool:
    """Under CI=true a missing server fails the PostgreSQL tests: CI must not pass by skipping them."""
    return env.get("CI", "").lower() == "true"


def main(argv: list[str]) -> int:
    if argv[:1] == ["start"] and len(argv) == 1:
        try:
            server = start()
        except ServerUnavailable as exc:
            print(f"pgserver: {exc}", file=sys.stderr)
            return 1
        print(f"export CRONCTL_TEST_PG_URL='{server.url}'")
        print(f"export CRONCTL_TEST_PG_DIR='{server.data_dir}'")
        return 0
    if argv[:1] == ["stop"] and len(argv) == 2:
        data_dir = Path(argv[1])
        if not data_dir.name.startswith("cronctl-pg-"):
            print(f"pgserver: {data_dir} is not a directory this script made", file=sys.stderr)
            return 1
        stop(data_dir)
        return 0
    print("usage: pgserver.py start | stop DATA_DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
