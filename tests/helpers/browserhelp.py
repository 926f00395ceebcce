"""A headless Chromium for the dashboard's tests and bench: Debian's `chromium` driven by
Debian's `chromium-driver` through Selenium, both named by path so nothing is downloaded
(Selenium Manager never runs when the driver's executable is given)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def missing() -> str | None:
    """Why no browser test can run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (Path(path).exists() or shutil.which(Path(path).name)):
            return f"{path} is missing (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


def must_fail_without_browser(env: dict[str, str] | os._Environ[str]) -> bool:
    """Under CI=true a missing browser fails the tests, as tests/pg do: CI never passes by skipping."""
    return env.get("CI", "").lower() == "true"


def start_browser(width: int = 1400, height: int = 1000) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The console's SEVERE entries since the last call (the log is drained by reading it)."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
