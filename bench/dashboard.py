"""The dashboard at scale (SPEC §14): 1,000 jobs, each with 24 h of 1-minute runs.

    python bench/dashboard.py [--jobs 1000] [--hours 24] [--loads 5] [--seconds 60]
                              [--screenshot docs/dashboard.png]

Seeds a home with JOBS jobs (defined hourly, so the loop spawns nothing of theirs during
the bench) whose history files hold HOURS of 1-minute runs (mostly successes, a few
failing streaks, some late starts, as a real day has), plus `pulse`, a 1-second job that
writes its slot and its real start to a ledger. Then, with `cronctl run --http`:

* page weight: the bytes of /, its script and style sheet, and of the first reads
  (/api/status, /api/jobs, the 24-h timeline);
* the API's answer times (median of several);
* render time in headless Chromium: navigation start to the first complete render, laid
  out and painted (the job table and the timeline drawn: the page's `cronctl-rendered`
  mark), median of LOADS fresh loads once the loop has built the timeline's bars (the
  first page after a loop starts waits for the day's records to be read once: reported
  apart, as `render_first_page_s`);
* fire lateness of `pulse` for SECONDS with no page open, SECONDS with a plain client making
  the page's requests (the loop's own cost of serving a page), then SECONDS with the page
  open in Chromium (that cost plus the browser's CPU on the same machine); the ratios of
  the medians and of the 99th percentiles to the closed run;
* the loop's resident memory after all that;
* a screenshot of the page (--screenshot).

Needs Debian's chromium and chromium-driver, and selenium (pip install -e '.[test]').
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import bench_env, cronctl_cmd, new_workdir, pct, populate  # noqa: E402
from tests.helpers.browserhelp import missing, start_browser  # noqa: E402

RECORD = ('{{"attempt": 1, "duration": {dur}, "ended_at": "{end}", "exit_code": {code}, "job": "{job}", '
          '"late": {late}, "output_tail": "{out}", "reason": {reason}, "run_id": "{rid}", "slot": "{slot}", '
          '"started_at": "{start}", "status": "{status}", "trigger": "schedule"}}\n')


def iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds")


def seed_history(home: Path, jobs: int, hours: int, now: datetime, rng: random.Random,
                 last: dict[str, dict[str, Any]] | None = None) -> int:
    """HOURS of 1-minute runs per job, written straight to runs/<job>/history.jsonl; `last`
    receives each job's last record."""
    last = {} if last is None else last
    written = 0
    minutes = hours * 60
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=minutes)
    for index in range(jobs):
        name = f"job-{index:05d}"
        streaks = [(rng.randrange(minutes), rng.randrange(3, 40)) for _ in range(rng.choice((0, 0, 1, 2, 3)))]
        if index % 97 == 5:
            streaks.append((minutes - 30, 40))  # failing now
        lines = []
        for minute in range(minutes):
            slot = first + timedelta(minutes=minute)
            failing = any(start <= minute < start + length for start, length in streaks)
            late = rng.random() < 0.002
            start = slot + timedelta(seconds=rng.uniform(0.0, 0.05) + (40 if late else 0))
            duration = round(rng.uniform(0.5, 8.0), 3)
            lines.append(RECORD.format(
                dur=duration, end=iso(start + timedelta(seconds=duration)), code=1 if failing else 0, job=name,
                late="true" if late else "false", out="disk ok\\n" if not failing else "error: disk full\\n",
                reason='"exit_code_nonzero"' if failing else "null",
                rid=slot.strftime("%Y%m%dT%H%M%S") + f"-{index:08x}", slot=iso(slot), start=iso(start),
                status="error" if failing else "success"))
        directory = home / "runs" / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "history.jsonl").write_text("".join(lines))
        written += len(lines)
        last[name] = json.loads(lines[-1])
    return written


def record_last_outcomes(home: Path, last: dict[str, dict[str, Any]]) -> None:
    """The store's state says what the last seeded run did, as a real loop would have written it."""
    from cronctl.context import Context

    with Context.open(home).store.transaction() as doc:
        for name, record in last.items():
            state = doc["jobs"][name]["state"]
            failed = record["status"] != "success"
            state.update(last_status=record["status"], last_run_at=record["ended_at"],
                         last_reason=record["reason"], last_exit_code=record["exit_code"],
                         consecutive_failures=1 if failed else 0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch(base: str, path: str) -> tuple[bytes, float]:
    started = time.perf_counter()
    with urllib.request.urlopen(base + path, timeout=120) as response:
        body = response.read()
    return body, time.perf_counter() - started


def page_weight(base: str) -> dict[str, Any]:
    files = {path: len(fetch(base, path)[0]) for path in ("/", "/assets/app.js", "/assets/app.css")}
    # The 24-h timeline as the page asks for it: its start rounded to 10 pixels (here 696.8 s).
    step = 696.8
    since = datetime.fromtimestamp((time.time() - 86400) // step * step, UTC).isoformat().replace("+00:00", "Z")
    reads = {path: fetch(base, path) for path in ("/api/status", "/api/jobs",
                                                   f"/api/history?view=timeline&since={since}&res=69.68")}
    times = {path: statistics.median(fetch(base, path)[1] for _ in range(5)) for path in reads}
    return {"page_bytes": sum(files.values()), "files": files,
            "first_reads_bytes": {path: len(body) for path, (body, _) in reads.items()},
            "api_median_ms": {path: round(seconds * 1000, 1) for path, seconds in times.items()}}


def render_times(driver: Any, base: str, loads: int, jobs: int) -> list[float]:
    times = []
    for _ in range(loads):
        driver.get("about:blank")
        driver.get(base + "/")
        deadline = time.monotonic() + 60
        mark = None
        while time.monotonic() < deadline and mark is None:
            mark = driver.execute_script(
                "const m = performance.getEntriesByName('cronctl-rendered'); return m.length ? m[0].startTime : null")
            time.sleep(0.05)
        count = driver.execute_script("return document.getElementById('count').textContent")
        if mark is None or count != f"({jobs + 1})":  # the jobs and `pulse`
            raise SystemExit(f"the page did not render within 60 s (jobs: {count})")
        times.append(mark / 1000.0)
    return times


def poll_like_a_page(base: str, seconds: float) -> int:
    """The page's reads without a browser: the status every second, the audit every other
    second, the timeline every 4 s. Isolates what serving a page costs the loop from what
    a browser's own CPU costs a small machine."""
    step = 696.8
    since = datetime.fromtimestamp((time.time() - 86400) // step * step, UTC).isoformat().replace("+00:00", "Z")
    requests, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        tick = int(time.monotonic() - started)
        path = ("/api/history?view=timeline&since=" + since + "&res=69.68" if tick % 4 == 3 else
                "/api/audit?n=50" if tick % 2 else "/api/status")
        fetch(base, path)
        requests += 1
        time.sleep(max(0.0, started + tick + 1 - time.monotonic()))
    return requests


def loop_rss_mb(pid: int) -> float:
    """The loop's resident memory once it has served the page (its children are not counted)."""
    import psutil

    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


def lateness(ledger: Path, since: float, until: float) -> list[float]:
    values = []
    for line in ledger.read_text().splitlines():
        slot_text, _, started = line.partition(" ")
        try:
            slot = datetime.fromisoformat(slot_text).timestamp()
            if since <= slot < until:
                values.append(max(0.0, float(started) - slot))
        except ValueError:
            continue
    return values


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": round(pct(values, 50) * 1000, 2), "p99_ms": round(pct(values, 99) * 1000, 2),
            "max_ms": round(max(values) * 1000, 2) if values else float("nan")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--screenshot", type=Path, default=None)
    args = parser.parse_args(argv)
    if (reason := missing()) is not None:
        raise SystemExit(f"bench/dashboard.py needs Chromium: {reason}")
    work = new_workdir("dashboard")
    home, ledger = work / "home", work / "ledger"
    rng = random.Random(25)
    populate(home, args.jobs, every="1h")
    last: dict[str, dict[str, Any]] = {}
    records = seed_history(home, args.jobs, args.hours, datetime.now(UTC), rng, last)
    record_last_outcomes(home, last)
    env = bench_env(home)
    pulse = f'echo "$CRONCTL_SLOT $(date +%s.%N)" >> {ledger}'
    subprocess.run([*cronctl_cmd(), "add", "pulse", "--every", "1s", "--", pulse], env=env, check=True,
                   capture_output=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    loop = subprocess.Popen([*cronctl_cmd(), "run", "-q", "--http", f"127.0.0.1:{port}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    driver = None
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                fetch(base, "/livez")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        result: dict[str, Any] = {"jobs": args.jobs, "records": records}
        cold = time.perf_counter()
        result.update(page_weight(base))  # also warms the history reader, as a first page would
        result["first_timeline_after_start_s"] = round(time.perf_counter() - cold, 2)
        time.sleep(5)  # the loop settles
        closed_from = time.time()
        time.sleep(args.seconds)
        closed = lateness(ledger, closed_from, time.time())
        polled_from = time.time()
        poll_like_a_page(base, args.seconds)
        polled = lateness(ledger, polled_from, time.time())
        driver = start_browser(1400, 1700)
        # The first page after the loop starts builds its window's bars from the day's records
        # (the API's warm-up above used another window): reported apart from the warm loads.
        cold, *warm = render_times(driver, base, args.loads + 1, args.jobs)
        result["render_first_page_s"] = round(cold, 3)
        result["render_s"] = [round(value, 3) for value in warm]
        result["render_median_s"] = round(statistics.median(warm), 3)
        driver.get(base + "/")  # open and polling for the lateness window
        time.sleep(5)
        open_from = time.time()
        time.sleep(args.seconds)
        opened = lateness(ledger, open_from, time.time())
        result["lateness_page_closed"], result["lateness_page_open"] = summary(closed), summary(opened)
        result["lateness_api_polled"] = summary(polled)
        result["loop_rss_mb"] = loop_rss_mb(loop.pid)
        result["lateness_ratio_p50"] = round(pct(opened, 50) / pct(closed, 50), 2)
        result["lateness_ratio_p99"] = round(pct(opened, 99) / pct(closed, 99), 2)
        result["lateness_ratio_polled_p50"] = round(pct(polled, 50) / pct(closed, 50), 2)
        result["lateness_ratio_polled_p99"] = round(pct(polled, 99) / pct(closed, 99), 2)
        if args.screenshot is not None:
            args.screenshot.parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(args.screenshot))
            result["screenshot"] = str(args.screenshot)
    finally:
        if driver is not None:
            driver.quit()
        loop.terminate()
        loop.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
