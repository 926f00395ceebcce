"""`doctor` compares an installed unit of the loop with what the jobs now need.

`cronctl export --format systemd-service` computes TimeoutStopSec= from the largest
kill_grace of the jobs present when it ran. A job with a larger kill_grace added later
would be SIGKILLed by systemd at stop before its grace is over: doctor finds the unit of
this home and says so, with the command that writes a fresh one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from cronctl.interop.export.service import UNIT_NAME, stop_timeout
from cronctl.interop.export.systemd import span
from cronctl.models import JobSpec

# Where a unit of the loop is installed: the system's and the user's unit directories.
UNIT_DIRS: tuple[Path, ...] = (Path("/etc/systemd/system"), Path("~/.config/systemd/user"))
_SPAN_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|hr)?")
_UNIT_SECONDS = {None: 1.0, "s": 1.0, "sec": 1.0, "ms": 0.001, "m": 60.0, "min": 60.0, "h": 3600.0, "hr": 3600.0}


def unit_problem(home: Path, specs: Sequence[JobSpec]) -> tuple[str, str, str | None] | None:
    """(level, message, fix) for the installed unit that runs this home's loop; None if none is."""
    for folder in UNIT_DIRS:
        unit = folder.expanduser() / UNIT_NAME
        try:
            text = unit.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if f"--home {home} " not in text and f"--home {home}\n" not in text:
            continue  # a unit of another home
        found = re.search(r"^\s*TimeoutStopSec=(.+)$", text, re.M)
        written = found.group(1).strip() if found else ""
        installed = _seconds(written)
        if installed is None:
            return None
        needed = stop_timeout(specs)
        if installed < needed:
            return ("action", f"{unit}: TimeoutStopSec={written} is below the {span(needed)} the jobs now need "
                    "(their largest kill_grace, the drain and the shutdown bound): at stop, systemd would "
                    "SIGKILL running jobs before their kill_grace is over",
                    f"cronctl export --format systemd-service > {unit}; systemctl daemon-reload")
        return ("ok", f"{unit}: TimeoutStopSec={written} covers the jobs' largest kill_grace "
                f"({span(needed)} needed)", None)
    return None


def _seconds(text: str) -> float | None:
    """A systemd time span (`72s`, `1min 12s`, `500ms`) in seconds; None for `infinity` or junk."""
    text = text.strip()
    if not text or text == "infinity":
        return None
    total, position = 0.0, 0
    for match in _SPAN_PART.finditer(text):
        if text[position:match.start()].strip():
            return None
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        position = match.end()
    return total if not text[position:].strip() else None
