"""An import result as a cronctl jobs file, with the import report as its header comment.

Written by hand rather than by yaml.dump so that each job carries the crontab
line it came from as a comment. Strings are double-quoted with JSON escapes,
which YAML reads the same way.
"""

from __future__ import annotations

import json
from typing import Any

from cronctl.interop.crontab_import import ImportResult

# Characters YAML refuses or reads as line breaks inside a double-quoted scalar.
_YAML_UNSAFE = {0x7F, 0x85, 0x2028, 0x2029, 0xFEFF, 0xFFFE, 0xFFFF}


def report_lines(result: ImportResult) -> list[str]:
    """What the operator must know: skipped lines, untranslated settings, the user and zone."""
    lines = [f"line {s.line}: skipped: {s.reason}: {s.text.strip()}" for s in result.skipped]
    lines += [f"{'file' if n.line == 0 else f'line {n.line}'}: {n.message}" for n in result.notes]
    if any(job.user and job.user != "root" for job in result.jobs):
        lines.append("jobs keep the user cron ran them as ('user:'): the loop must run as root to switch to it")
    unzoned = sum(1 for job in result.jobs if not job.zone_given)
    if unzoned:  # every job has its CRON_TZ: nothing to say
        lines.append(f"{unzoned} job(s) without CRON_TZ/TZ run in {result.default_zone} (--timezone; by "
                     "default this host's zone, which cron used for them)")
    return sorted(lines, key=_line_order)


def _line_order(text: str) -> tuple[int, int]:
    head = text.split(":", 1)[0]
    if head.startswith("line "):
        return 0, int(head[5:])
    return 1, 0


def render_yaml(result: ImportResult) -> str:
    skipped = len(result.skipped)
    out = [f"# Imported by `cronctl import-crontab` from {_comment(result.source)}:",
           f"# {len(result.jobs)} job(s), {skipped} line(s) skipped.",
           "# Check with `cronctl validate -f FILE`, load with `cronctl apply -f FILE`."]
    out += [f"#   {_comment(line)}" for line in report_lines(result)]
    out += [
        "defaults:",
        f"  timezone: {quote(result.default_zone)}",
        "  # cron has no timeout: cronctl's default of 1h is written out here; use \"0\" for none.",
        f"  timeout: {quote('1h')}",
        "  # cron starts a run even while the last one still runs, as `allow` does; cronctl's default skips it.",
        f"  overlap: {quote('skip')}",
        "  # cron never runs slots missed while it was down, as `skip` does; cronctl's default runs the latest.",
        f"  catchup: {quote('latest')}",
    ]
    if not result.jobs:
        return "\n".join(out + ["jobs: []"]) + "\n"
    out.append("jobs:")
    for job in result.jobs:
        user = f" (user {job.user})" if job.user else ""
        out.append(f"  # line {job.line}{user}: {_comment(job.text.strip())}")
        out += _entry_lines(job.entry)
    return "\n".join(out) + "\n"


def _entry_lines(entry: dict[str, Any]) -> list[str]:
    lines = [f"  - name: {quote(entry['name'])}"]
    for key in ("cron", "timezone", "user"):
        if key in entry:
            lines.append(f"    {key}: {quote(entry[key])}")
    command = entry["command"]
    if isinstance(command, str):
        lines.append(f"    command: {quote(command)}")
    else:
        lines.append("    command: [" + ", ".join(quote(part) for part in command) + "]")
    if entry.get("env"):
        lines.append("    env:")
        lines += [f"      {name}: {quote(value)}" for name, value in entry["env"].items()]
    if entry.get("notify"):
        lines.append("    notify:")  # cron's MAILTO (SPEC §12)
        for target in entry["notify"]:
            lines.append(f"      - email: {quote(target['email'])}")
            lines.append("        on: [" + ", ".join(target["on"]) + "]")
    return lines


def quote(text: str) -> str:
    """A YAML double-quoted scalar that reads back as exactly `text`."""
    encoded = json.dumps(text, ensure_ascii=False)
    return "".join(_escape(char) for char in encoded)


def _escape(char: str) -> str:
    code = ord(char)
    if code in _YAML_UNSAFE or 0x80 <= code <= 0x9F or 0xD800 <= code <= 0xDFFF:
        return f"\\u{code:04x}"
    return char


def _comment(text: str) -> str:
    return "".join(char if char.isprintable() or char == "\t" else "?" for char in text)
