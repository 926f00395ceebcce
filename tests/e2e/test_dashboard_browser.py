"""The dashboard in a real browser (SPEC §14): Debian's headless Chromium against a real
`cronctl run --http --http-token` on a demo set of jobs, one browser for the module.

Skipped when chromium, chromium-driver or selenium is missing, except under CI=true,
where that is a failure (as for tests/pg): CI never passes by skipping them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.browserhelp import console_errors, missing, must_fail_without_browser, start_browser
from tests.helpers.loophelp import cli, start_loop, stop, wait_ticking, wait_until

pytestmark = pytest.mark.slow
TOKEN = "browser-test-token-0123456789abcdef"
STATE_WORDS = {"ok", "running", "paused", "failing", "late", "wedged", "completed", "waiting", "due"}


def demo_jobs(flag: Path) -> str:
    return f"""
jobs:
  - name: steady
    every: 2s
    command: "echo steady"
  - name: echoer
    every: 3s
    command: "printf '<script>alert(1)</script><b>bold</b>\\\\n'"
  - name: turns-bad
    every: 5s
    command: "test ! -e {flag}"
  - name: extract
    every: 4s
    command: "echo extract; exit 1"
  - name: transform
    after: [extract]
    command: "echo transform"
  - name: load
    after: [transform]
    command: "echo load"
  - name: manual
    cron: "0 3 * * *"
    timezone: Europe/Berlin
    command: "echo manual"
  - name: resting
    every: 1h
    paused: true
    command: "true"
"""


class Demo:
    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.flag = root / "turn-bad"
        jobs = root / "jobs.yaml"
        jobs.write_text(demo_jobs(self.flag))
        token = root / "token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = start_loop(self.home, "-q", "-f", str(jobs), "--http", f"127.0.0.1:{self.port}",
                               "--http-token", str(token))
        wait_ticking(self.home, self.proc)
        wait_until(lambda: self.get("/api/status")[0] == 200, 20)

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=20) as response:
                return response.status, response.read()
        except (urllib.error.URLError, OSError) as exc:
            if isinstance(exc, urllib.error.HTTPError):
                return exc.code, exc.read()
            return 0, b""

    def history(self, job: str) -> list[dict[str, Any]]:
        done = cli(self.home, "history", job, "--json")
        runs: list[dict[str, Any]] = json.loads(done.stdout)["runs"] if done.returncode == 0 else []
        return runs


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("dashboard"))
    yield running
    assert stop(running.proc, timeout=60) == 0


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = missing()
    if reason is not None:
        if must_fail_without_browser(os.environ):
            pytest.fail(f"the dashboard's browser tests need Chromium: {reason}", pytrace=False)
        pytest.skip(reason)
    driver = start_browser()
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def open_page(browser: Any, demo: Demo, path: str = "/") -> None:
    browser.get(demo.base + path)
    browser.execute_script("window.__sameLoad = true")  # gone if the page ever reloads


def row_states(browser: Any) -> dict[str, str]:
    found: dict[str, str] = browser.execute_script(
        "const out = {}; for (const tr of document.querySelectorAll('#jobs tbody tr[data-job]'))"
        " out[tr.dataset.job] = tr.querySelector('td.state').textContent; return out;")
    return found


def test_every_job_appears_with_its_state_word_and_no_console_error(browser: Any, demo: Demo) -> None:
    open_page(browser, demo)
    names = {"steady", "echoer", "turns-bad", "extract", "transform", "load", "manual", "resting"}
    states = wait_until(lambda: (lambda s: s if set(s) == names and all(s.values()) else None)(row_states(browser)),
                        30, interval=0.2)
    assert set(states.values()) <= STATE_WORDS, states
    assert states["resting"] == "paused"
    wait_until(lambda: browser.execute_script(  # in words once the definitions are read
        "return document.querySelector('tr[data-job=manual] td.schedule').textContent") == "At 03:00", 20, 0.2)
    next_fire = browser.execute_script("return document.querySelector('tr[data-job=manual] td.next').textContent")
    assert "Europe/Berlin" in next_fire and "in " in next_fire
    time.sleep(2)  # a few polls more: none of them may log an error
    assert console_errors(browser) == []


def test_a_job_that_starts_failing_shows_failing_without_a_reload(browser: Any, demo: Demo) -> None:
    open_page(browser, demo)
    wait_until(lambda: row_states(browser).get("turns-bad") in ("ok", "running"), 30, interval=0.2)
    demo.flag.touch()
    wait_until(lambda: row_states(browser).get("turns-bad") == "failing", 30, interval=0.2)
    assert browser.execute_script("return window.__sameLoad === true")
    colour = browser.execute_script(
        "return getComputedStyle(document.querySelector('tr[data-job=turns-bad] td.state .pill')).backgroundColor")
    assert colour == "rgb(198, 40, 40)"  # red, beside the word


def test_the_timeline_zooms_from_a_day_to_an_hour(browser: Any, demo: Demo) -> None:
    open_page(browser, demo)
    wait_until(lambda: browser.execute_script("return view.timeline && view.timeline.res"), 30, interval=0.2)
    day = browser.execute_script("return view.timeline.res")
    browser.execute_script("const z = document.getElementById('zoom'); z.value = '3600';"
                           "z.dispatchEvent(new Event('change'));")
    hour = wait_until(lambda: browser.execute_script(
        "return view.timeline.res < arguments[0] / 10 && view.timeline.res", day), 30, interval=0.2)
    assert abs(day / hour - 24) < 0.5
    # At an hour a pixel is about 3 s: runs 4 s apart are bars of their own (at a day, one bar).
    # Polled until extract has two bars; before its first run it has no row at all (the demo's
    # loop may be only seconds old when this test comes first on a busy xdist worker).
    wait_until(lambda: browser.execute_script(
        "const row = view.timeline.jobs.extract; return row !== undefined && row.bars.length >= 2"), 30, 0.3)
    assert console_errors(browser) == []


def test_a_chains_graph_shows_its_skipped_nodes(browser: Any, demo: Demo) -> None:
    open_page(browser, demo)

    def statuses() -> dict[str, str] | None:
        found: dict[str, str] = browser.execute_script(
            "const out = {}; for (const g of document.querySelectorAll('.chain[data-root=extract] g[data-job]'))"
            " out[g.dataset.job] = g.dataset.status; return out;")
        return found if found.get("transform") == "skipped" else None

    found = wait_until(statuses, 40, interval=0.3)
    assert found == {"extract": "error", "transform": "skipped", "load": "skipped"}
    label = browser.execute_script("return document.querySelector('.chain g[data-job=load] text').textContent")
    assert label == "load · skipped"


def test_script_in_a_jobs_output_shows_as_text(browser: Any, demo: Demo) -> None:
    wait_until(lambda: demo.history("echoer"), 30, interval=0.3)
    open_page(browser, demo, "/jobs/echoer")
    text = wait_until(lambda: browser.execute_script(
        "const pre = document.querySelector('#jp-runs pre'); return pre && pre.textContent"), 30, interval=0.2)
    assert text == "<script>alert(1)</script><b>bold</b>\n"
    assert browser.execute_script("return document.querySelectorAll('#jp-runs script, #jp-runs b').length") == 0
    assert browser.execute_script("return document.querySelector('#jp-runs a').getAttribute('href')").startswith(
        "/api/logs/echoer/")
    assert console_errors(browser) == []


def test_without_the_token_no_button_shows_and_a_post_is_403(browser: Any, demo: Demo) -> None:
    open_page(browser, demo)
    wait_until(lambda: row_states(browser).get("manual"), 30, interval=0.2)
    visible = browser.execute_script(
        "return [...document.querySelectorAll('button[data-verb]')].filter(b => b.offsetParent !== null).length")
    assert visible == 0
    code = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch('/api/jobs/manual/force-run', {method: 'POST'}).then(r => done(r.status));")
    assert code == 403
    console_errors(browser)  # the 403 just logged is this test's own doing
    assert demo.history("manual") == []


def test_with_the_token_force_run_starts_a_run(browser: Any, demo: Demo) -> None:
    open_page(browser, demo)
    wait_until(lambda: row_states(browser).get("manual"), 30, interval=0.2)
    browser.find_element("id", "token").click()
    prompt = browser.switch_to.alert
    prompt.send_keys(TOKEN)
    prompt.accept()
    button = browser.find_element("css selector", "tr[data-job=manual] button[data-verb='force-run']")
    assert button.is_displayed()
    button.click()
    runs = wait_until(lambda: demo.history("manual"), 30, interval=0.3)
    assert runs[-1]["trigger"] != "schedule" and runs[-1]["status"] == "success"
    rows = [json.loads(line) for line in (demo.home / "audit.jsonl").read_text().splitlines()]
    assert any(r.get("event") == "force_run.requested" and r.get("by") == "http" and r.get("job") == "manual"
               and r.get("client") == "127.0.0.1" for r in rows)
    assert console_errors(browser) == []


def test_the_loop_still_serves_its_probes(demo: Demo) -> None:
    assert demo.get("/livez")[0] == 200 and demo.get("/healthz")[0] in (200, 503)
    assert subprocess.run(["true"]).returncode == 0
