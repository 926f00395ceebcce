"""`env_file:` (SPEC §13): KEY=VALUE lines read as systemd's EnvironmentFile= reads them.

From systemd.exec(5): empty lines and lines starting with `#` or `;` are ignored, as are
lines without `=`; whitespace around the key and the `=` is dropped. A value may be
unquoted (leading and trailing whitespace dropped, interior whitespace kept, a
backslash keeps the next character, a backslash at the end of the line continues it
on the next), single-quoted (verbatim, may span lines, no escapes) or double-quoted
(may span lines; `\\"`, `\\\\`, `` \\` ``, `\\$` and a backslash-newline are escapes,
any other backslash is kept). Quoted and unquoted pieces next to each other join, as
in a shell word.

Read by the loop at each run and merged into the child's environment only: the values
are never copied into the store, the audit log or `show`.
"""

from __future__ import annotations

import re

_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_DOUBLE_ESCAPES = '"\\`$'
MAX_ENV_FILE_BYTES = 1 << 20


class EnvFileError(Exception):
    """The file cannot be read; the message names it and why."""


def read_env_file(path: str) -> dict[str, str]:
    """The assignments of the file at `path` (later ones win)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_ENV_FILE_BYTES + 1)
    except FileNotFoundError:
        raise EnvFileError(f"env_file {path!r} does not exist") from None
    except IsADirectoryError:
        raise EnvFileError(f"env_file {path!r} is a directory, not a KEY=VALUE file") from None
    except OSError as exc:
        raise EnvFileError(f"env_file {path!r} cannot be read: {exc.strerror}") from None
    if len(data) > MAX_ENV_FILE_BYTES:
        raise EnvFileError(f"env_file {path!r} is larger than {MAX_ENV_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvFileError(f"env_file {path!r} is not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise EnvFileError(f"env_file {path!r} contains a NUL character")
    return parse_env_text(text)


def parse_env_text(text: str) -> dict[str, str]:
    """The assignments of an EnvironmentFile's text; invalid keys are skipped, as systemd does."""
    env: dict[str, str] = {}
    pos, end = 0, len(text)
    while pos < end:
        line_end = text.find("\n", pos)
        line_end = end if line_end < 0 else line_end
        line = text[pos:line_end]
        stripped = line.lstrip(" \t\r")
        if not stripped or stripped[0] in "#;" or "=" not in stripped:
            pos = line_end + 1
            continue
        key, _, _ = stripped.partition("=")
        value_start = pos + (len(line) - len(stripped)) + len(key) + 1
        value, pos = _read_value(text, value_start)
        key = key.strip(" \t\r")
        if _KEY_RE.match(key):
            env[key] = value
    return env


def _read_value(text: str, pos: int) -> tuple[str, int]:
    """The value starting at `pos` and the position after its line."""
    end = len(text)
    while pos < end and text[pos] in " \t\r":
        pos += 1
    out: list[str] = []
    pending_space = ""  # unquoted whitespace: kept only if more of the value follows
    while pos < end and text[pos] != "\n":
        char = text[pos]
        if char in " \t\r":
            pending_space += char
            pos += 1
            continue
        out.append(pending_space)
        pending_space = ""
        if char == "'":
            close = text.find("'", pos + 1)
            close = end if close < 0 else close
            out.append(text[pos + 1:close])
            pos = close + 1
        elif char == '"':
            piece, pos = _double_quoted(text, pos + 1)
            out.append(piece)
        elif char == "\\":
            if pos + 1 < end and text[pos + 1] != "\n":
                out.append(text[pos + 1])
            pos += 2  # a backslash-newline joins the next line
        else:
            out.append(char)
            pos += 1
    return "".join(out), pos + 1


def _double_quoted(text: str, pos: int) -> tuple[str, int]:
    out: list[str] = []
    end = len(text)
    while pos < end and text[pos] != '"':
        char = text[pos]
        if char == "\\" and pos + 1 < end:
            following = text[pos + 1]
            if following == "\n":
                pos += 2
                continue
            if following in _DOUBLE_ESCAPES:
                out.append(following)
                pos += 2
                continue
        out.append(char)
        pos += 1
    return "".join(out), pos + 1
