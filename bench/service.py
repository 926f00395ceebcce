"""Idle cost of running under a service manager: --http and the sd_notify pings.

For each N (default 1,000 and 10,000 `every: 2h` jobs): an idle `cronctl run` measured
as in idle.py (CPU seconds of the whole process over WINDOW after a settle period)
in four set-ups:

- plain: `cronctl run`
- http: `cronctl run --http 127.0.0.1:PORT`, no client
- http+notify: the same with $NOTIFY_SOCKET and WATCHDOG_USEC=2s (a ping every second,
  far more often than the exported unit's WatchdogSec=60s asks)
- http+notify+probes: and a client as Kubernetes and Prometheus would be: /livez and
  /healthz every 10 s, /metrics every 15 s

Usage: python bench/service.py [--sizes 1000,10000] [--window 60]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    bench_env,
    cronctl_cmd,
    fmt,
    machine_note,
    new_workdir,
    populate,
    proc_cpu_seconds,
    save_results,
    stop_loop,
    table,
    wait_ticking,
)

SETTLE = 5.0
SETUPS = ("plain", "http", "http+notify", "http+notify+probes")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class NotifySink:
    """A notify socket that counts the datagrams the loop sends."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.2)
        self.count = 0
        self.stop = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while not self.stop.is_set():
            try:
                self.sock.recv(4096)
                self.count += 1
            except OSError:
                continue


def probe(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """Kubernetes probes every 10 s, a Prometheus scrape every 15 s."""
    started = time.monotonic()
    due = {"/livez": 0.0, "/healthz": 0.0, "/metrics": 0.0}
    period = {"/livez": 10.0, "/healthz": 10.0, "/metrics": 15.0}
    while not stop.is_set():
        now = time.monotonic() - started
        for path, when in due.items():
            if now >= when:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
                        response.read()
                except OSError:
                    pass
                counts[path] = counts.get(path, 0) + 1
                due[path] = when + period[path]
        stop.wait(0.1)


def run_setup(n: int, setup: str, window: float) -> dict[str, Any]:
    import subprocess

    work = new_workdir(f"service-{n}-{setup.replace('+', '-')}")
    home = work / "home"
    populate(home, n, every="2h")
    env = bench_env(home)
    args = ["run"]
    port = free_port()
    if setup != "plain":
        args += ["--http", f"127.0.0.1:{port}"]
    sink = None
    if "notify" in setup:
        sink = NotifySink(work / "notify.sock")
        env.update(NOTIFY_SOCKET=str(work / "notify.sock"), WATCHDOG_USEC="2000000")
    loop = subprocess.Popen([*cronctl_cmd(), *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    stop = threading.Event()
    counts: dict[str, int] = {}
    try:
        wait_ticking(home, loop.pid, timeout=120)
        if setup.endswith("probes"):
            threading.Thread(target=probe, args=(port, stop, counts), daemon=True).start()
        time.sleep(SETTLE)
        before, pings_before = proc_cpu_seconds(loop.pid), sink.count if sink else 0
        began = time.monotonic()
        time.sleep(window)
        cpu = proc_cpu_seconds(loop.pid) - before
        elapsed = time.monotonic() - began
        pings = (sink.count - pings_before) if sink else 0
    finally:
        stop.set()
        stop_loop(loop)
        if sink is not None:
            sink.stop.set()
    return {"cpu_s": round(cpu, 3), "window_s": round(elapsed, 1), "core_pct": round(100 * cpu / elapsed, 3),
            "datagrams": pings, "requests": sum(counts.values())}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    rows, data = [], {}
    for n in [int(x) for x in args.sizes.split(",")]:
        for setup in args.setups.split(","):
            print(f"service: N={n} {setup} ...", file=sys.stderr, flush=True)
            out = run_setup(n, setup, args.window)
            data[f"{setup}-{n}"] = out
            rows.append([f"{n:,}", setup, out["cpu_s"], fmt(out["core_pct"], 3), out["datagrams"], out["requests"]])
    text = table(f"Idle cost under a service manager (CPU over {args.window:g} s after {SETTLE:g} s settle)",
                 ["jobs", "set-up", "CPU s", "% of one core", "notify datagrams", "HTTP requests"], rows,
                 command=f"python bench/service.py --sizes {args.sizes} --window {args.window:g}")
    text += f"\n- {machine_note()}\n"
    print(text)
    save_results(args.results, "service", {"rows": data}, text)
    return data


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    main()
