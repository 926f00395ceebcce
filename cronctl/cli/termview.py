"""How `status` meets a terminal: the width it fits, relative times, colour.

A pipe keeps the old text (whole rows, absolute ISO instants) for the scripts that read
it; `--json` is always absolute. On a terminal (or with COLUMNS set) the table fits the
width as `list` does, and times read as `in 8s`/`3m ago`. Colour only on a terminal
whose TERM can show it, and never with NO_COLOR.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone

_GREEN, _YELLOW, _RED, _DIM, _RESET = "\x1b[32m", "\x1b[33m", "\x1b[31m", "\x1b[2m", "\x1b[0m"
_STATE_COLOURS = {
    "ok": _GREEN, "running": _GREEN, "due": _GREEN, "completed": _DIM, "paused": _YELLOW, "late": _RED,
    "failing": _RED, "wedged": _RED, "stopped": _YELLOW, "dead": _RED, "cannot_write": _RED,
}


@dataclass(frozen=True)
class Terminal:
    """What the output can show. The default is a pipe: whole rows, absolute times, no colour."""

    width: int | None = None
    colour: bool = False
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))


def colour_wanted() -> bool:
    if os.environ.get("NO_COLOR") or os.environ.get("TERM", "") in ("", "dumb"):
        return False
    return sys.stdout.isatty()


def paint(word: str, term: Terminal) -> str:
    """A state word in its colour (unchanged without colour or for a word with none)."""
    colour = _STATE_COLOURS.get(word)
    return f"{colour}{word}{_RESET}" if term.colour and colour else word


def paint_states(lines: list[str], states: list[str], term: Terminal) -> list[str]:
    """Colour the STATE cell of each row of a table whose header (the first line) has a
    STATE column after the first: the cell starts where the header's word does."""
    header = lines[0] if lines else ""
    start = header.find("  STATE") + 2
    if not term.colour or start < 2:
        return lines
    painted = [header]
    for line, state in zip(lines[1:], states, strict=False):
        if line.isascii() and line[start:start + len(state)] == state:
            line = line[:start] + paint(state, term) + line[start + len(state):]
        painted.append(line)
    return painted
