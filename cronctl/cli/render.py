"""Everything users see: rich tables for people, stable JSON for tools. No logic."""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from cronctl.models import command_text

if TYPE_CHECKING:
    from cronctl.cli.termview import Terminal


def _console(stderr: bool = False):  # type: ignore[no-untyped-def]
    from rich.console import Console

    # Piped output and NO_COLOR get plain text with no escape codes. Job names,
    # commands and reasons are operator text: never read them as rich markup
    # ("[/x]" would raise) or emoji codes (":smile:" would be replaced).
    no_color = bool(os.environ.get("NO_COLOR"))
    return Console(stderr=stderr, no_color=no_color, highlight=False, soft_wrap=False,
                   markup=False, emoji=False, width=None if sys.stdout.isatty() else 200)


def print_json(data: Any, *, from_store: bool = False) -> None:
    """Indented for a person at a terminal; one line when piped. Keys are sorted either way.

    Only the compact form goes through the stdlib's C encoder (json.dumps with an indent is
    pure Python: 3x slower at 1,000 jobs), so the indented form is that text re-indented by
    msgspec, which copies every token as it is: the same bytes as json.dumps(indent=2).

    from_store: the caller promises `data` holds only values the JSON store's parser
    returned and cronctl's own str, int, bool and None (cli/jsonout.py): then msgspec
    writes it, the same bytes, when the parser says it can."""
    if from_store:
        from cronctl.cli.jsonout import store_json, write_line

        fast = store_json(data, indent=2 if sys.stdout.isatty() else 0)
        if fast is not None:
            write_line(fast)
            return
    text = json.dumps(data, sort_keys=True, default=str, ensure_ascii=False)
    if sys.stdout.isatty():
        text = _indented(text, data)
    sys.stdout.write(text + "\n")


def _indented(compact: str, data: Any) -> str:
    import msgspec

    try:
        return msgspec.json.format(compact.encode(), indent=2).decode()
    except (msgspec.DecodeError, UnicodeEncodeError):  # Infinity, a lone surrogate: not for msgspec
        return json.dumps(data, indent=2, sort_keys=True, default=str, ensure_ascii=False)


def say(message: str) -> None:
    # Plain print, not rich: a long line (a path, a list of names) must reach a
    # pipe whole, never hard-wrapped at the console width.
    print(message)


def warn(message: str) -> None:
    print(_one_line(f"cronctl: warning: {message}"), file=sys.stderr)


def error(message: str) -> None:
    print(_one_line(f"cronctl: error: {message}"), file=sys.stderr)


def _one_line(text: str) -> str:
    """A message is one line whatever it quotes: a name or value with a newline or an
    escape sequence in it is shown escaped (\n, \x1b), never obeyed by the terminal."""
    return _printable(text).translate(_ESCAPED)


def _printable(text: str) -> str:
    # A message may quote what the user typed, and argv bytes that are not UTF-8 arrive
    # as lone surrogates: write them as \udcff instead of failing on a strict stream.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def relative(when: datetime | None, now: datetime) -> str:
    """'in 4m', '3h ago', 'now' — the way an operator reads a schedule."""
    if when is None:
        return "-"
    seconds = (when - now).total_seconds()
    if abs(seconds) < 1:
        return "now"
    text = _short_span(abs(seconds))
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _short_span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            whole = int(seconds // size)
            rest = int((seconds % size) // (size // (24 if unit == "d" else 60)))
            sub = {"d": "h", "h": "m", "m": "s"}[unit]
            return f"{whole}{unit}{rest}{sub}" if rest and whole < 10 else f"{whole}{unit}"
    return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds * 1000:.0f}ms"


# Control characters in operator text (a multi-line command, a reason quoting output)
# are shown escaped, so that every row of a table stays one line.
_ESCAPED = {code: f"\\x{code:02x}" for code in (*range(32), 127)} | {10: "\\n", 9: "\\t", 13: "\\r"}


def columns(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    """A table as aligned lines, two spaces between columns, the last one unpadded.

    Plain text rather than a rich Table: rich lays out every cell as a renderable and
    took 2.3 s for 1,000 jobs (17 s for 10,000); this is the same layout in
    milliseconds. Widths are terminal cells, so wide characters line up too.
    """
    cells = [header, *([_shown(cell) for cell in row] for row in rows)]
    # One look at the whole table: ASCII cells take one terminal cell a character, so the
    # widths are len() (measuring each cell took a third of `list` at 10,000 jobs).
    measure = len if all("".join(row).isascii() for row in cells) else cell_len
    widths = [max(map(measure, column)) for column in list(zip(*cells, strict=True))[:-1]]
    if measure is len:  # one str.format per row: padding cell by cell was half of this
        template = "  ".join([*(f"{{:<{width}}}" for width in widths), "{}"])
        return [template.format(*row).rstrip() for row in cells]
    lines = []
    for row in cells:
        # widths has no entry for the last column (left unpadded): zip stops before it.
        padded = [cell + " " * (width - measure(cell)) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*padded, row[-1]]).rstrip())
    return lines


def _shown(cell: str) -> str:
    """A cell as a table shows it: control characters escaped, one line."""
    if cell.isascii():
        # Printable ASCII has nothing to escape: the common cell skips the translation.
        return cell if cell.isprintable() else cell.translate(_ESCAPED)
    return _printable(cell).translate(_ESCAPED)


def cell_len(text: str) -> int:
    """Terminal cells `text` takes. Table cells reach here with control characters
    escaped, so ASCII text takes one cell a character; only other text needs rich's
    table of wide and zero-width characters (its import is most of a short command)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len as rich_cell_len

    return rich_cell_len(text)


def print_lines(lines: list[str]) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))


JOBS_HEADER = ("NAME", "SCHEDULE", "WHEN", "TZ", "NEXT", "LAST", "STATUS", "COMMAND")
# On a narrow terminal these go first, in this order: the words repeat the schedule, and
# the zone and the last run matter less than the name, what runs next, its health and
# what it runs. Only then is the command cut, with an ellipsis, to no less than MIN_COMMAND.
JOBS_DROP_ORDER = ("WHEN", "TZ", "LAST", "SCHEDULE")
MIN_COMMAND = 12


def jobs_table(rows: Iterable[dict[str, Any]], now: datetime) -> None:
    table = [(row["name"], row["schedule"], row["when"], row["timezone"], relative(row["next_fire"], now),
              relative(row["last_run"], now), row["status_word"], command_text(row["command"]))
             for row in rows]
    if not table:
        say("no jobs defined (add one with 'cronctl add' or 'cronctl apply -f FILE')")
        return
    width = output_width()
    if width is None:  # piped: whole rows, for the scripts that read them
        print_lines(columns(JOBS_HEADER, table))
    else:
        print_lines(fitted_columns(JOBS_HEADER, table, width, JOBS_DROP_ORDER, MIN_COMMAND))


def output_width() -> int | None:
    """The width a table must fit: the terminal's, which COLUMNS overrides as for every
    tool; None on a pipe without COLUMNS, where rows stay whole."""
    import shutil

    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    text = os.environ.get("COLUMNS", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def fitted_columns(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], width: int,
                   drop_order: tuple[str, ...], min_last: int) -> list[str]:
    """`columns` no wider than `width` where it can be: the columns of `drop_order` are
    dropped one by one until the rows fit; if they still do not, the last column's cells
    are cut with an ellipsis (to no fewer than `min_last` cells)."""
    cells = [tuple(_shown(cell) for cell in row) for row in rows]
    keep = list(header)
    for dropped in (None, *drop_order):
        if dropped is not None:
            keep.remove(dropped)
        kept_header, kept_rows = _only_columns(header, cells, keep)
        room = width - _lead_width(kept_header, kept_rows)
        if room >= max(cell_len(row[-1]) for row in (kept_header, *kept_rows)):
            return columns(kept_header, kept_rows)
    cut = [(*row[:-1], _cut(row[-1], max(room, min_last))) for row in kept_rows]
    return columns(kept_header, cut)


def _only_columns(header: tuple[str, ...], rows: list[tuple[str, ...]],
                  keep: list[str]) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    indexes = [header.index(name) for name in keep]
    return tuple(keep), [tuple(row[i] for i in indexes) for row in rows]


def _lead_width(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> int:
    """Cells taken by every column but the last, with their two-space gaps."""
    return sum(max(cell_len(row[i]) for row in (header, *rows)) + 2 for i in range(len(header) - 1))


def _cut(text: str, cells: int) -> str:
    """`text` in at most `cells` terminal cells, an ellipsis marking a cut."""
    if cell_len(text) <= cells:
        return text
    kept: list[str] = []
    used = 0
    for char in text:
        used += cell_len(char)
        if used > cells - 1:
            break
        kept.append(char)
    return "".join(kept) + "…"


def job_detail(fields: list[tuple[str, str]]) -> None:
    width = max((len(k) for k, _ in fields), default=0)
    for key, value in fields:
        say(f"{key.ljust(width)}  {_shown(value)}")  # a command's escape sequences shown, not obeyed


def local_iso(when: datetime) -> str:
    """ISO 8601 with the instant's own offset; milliseconds only when there are any."""
    return when.isoformat(timespec="seconds" if when.microsecond < 1000 else "milliseconds")


def utc_z(when: datetime) -> str:
    """The same instant in UTC, written with a Z."""
    # An instant in UTC already (every slot) is written "...+00:00": only the suffix changes.
    utc = when if when.tzinfo is timezone.utc else when.astimezone(timezone.utc)
    return local_iso(utc)[:-6] + "Z"


def fire_text(when: datetime, zone: str) -> str:
    """A fire instant in the job's zone, then in UTC: 2026-03-02T03:00:00+01:00 (2026-03-02T02:00:00Z)."""
    from zoneinfo import ZoneInfo

    return f"{local_iso(when.astimezone(ZoneInfo(zone)))} ({utc_z(when)})"


def next_table(rows: list[tuple[str, str, list[tuple[datetime, datetime]]]], paused: Iterable[str] = (),
               words: dict[str, str] | None = None) -> None:
    """rows: (job, zone, [(local instant, utc instant)]); a paused job's instants are its schedule, not fires."""
    paused = set(paused)
    words = words or {}
    lines = []  # written at once: `next` of 10,000 jobs is 60,000 lines
    for job, zone, instants in rows:
        if not instants:
            lines.append(f"{job}: no further fires")
            continue
        note = f", paused: none of these fire until 'cronctl resume {job}'" if job in paused else ""
        said = f" — {words[job]}" if job in words else ""
        lines.append(f"{job} ({zone}{note}){said}:")
        _add_instant_lines(lines, instants)
    print_lines(lines)


def _add_instant_lines(lines: list[str], instants: list[tuple[datetime, datetime]]) -> None:
    """Each instant as `local   utc` (local_iso, then UTC with a Z), written once when the
    zone's offset is 0 (UTC jobs: the same text up to the suffix). Inlined: `next` of 10,000
    jobs writes 50,000 of these lines."""
    utc_text, utc_zone = _UTC_TEXTS.text, timezone.utc
    for local, utc in instants:
        text = utc_text(utc)
        if (local is utc and utc.tzinfo is utc_zone) or not local.utcoffset():
            lines.append(f"  {text}+00:00   {text}Z")
        else:
            lines.append(f"  {local_iso(local)}   {text}Z")


class _UtcTexts:
    """`isoformat` of an instant in UTC without its offset, seconds or milliseconds as
    local_iso writes them, made from the text of its hour and the text of the rest.

    `next` of 10,000 jobs writes 50,000 instants, and isoformat (about 1 µs each, half of
    it the offset) was a fifth of the command. The jobs of a store share hours, and a job's
    slots share their minutes and seconds when its interval is whole minutes: each of the
    two is made once (tests/unit/test_next_lines.py compares with isoformat)."""

    _EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
    _MICROSECOND = timedelta(microseconds=1)
    _KEPT = 1 << 16  # texts remembered of each kind, at most

    def __init__(self) -> None:
        self.hours: dict[int, str] = {}
        self.rests: dict[int, str] = {}

    def text(self, when: datetime) -> str:
        hour, rest = divmod((when - self._EPOCH) // self._MICROSECOND, 3_600_000_000)
        head = self.hours.get(hour)
        if head is None:
            head = (self._EPOCH + timedelta(hours=hour)).isoformat()[:13]  # YYYY-MM-DDTHH
            if len(self.hours) < self._KEPT:
                self.hours[hour] = head
        tail = self.rests.get(rest)
        if tail is None:
            minute, rest_us = divmod(rest, 60_000_000)
            second, micro = divmod(rest_us, 1_000_000)
            tail = f":{minute:02d}:{second:02d}" + (f".{micro // 1000:03d}" if micro >= 1000 else "")
            if len(self.rests) < self._KEPT:
                self.rests[rest] = tail
        return head + tail


_UTC_TEXTS = _UtcTexts()


def apply_plan(plan: dict[str, Any], dry_run: bool) -> None:
    verb = "would" if dry_run else "did"
    lines = [f"+ create {n}" for n in plan["create"]]
    lines += [f"~ update {n} ({', '.join(f)})" for n, f in plan["update"].items()]
    lines += [f"~ adopt {n} (added by hand, now defined by this file)" for n in plan["adopt"]]
    lines += [f"- prune {n}" for n in plan["prune"]]
    updated = len(plan["update"]) + len(plan["adopt"])
    summary = (f"{plan['file']}: {verb} create {len(plan['create'])}, update {updated}, "
               f"prune {len(plan['prune'])}, unchanged {len(plan['unchanged'])}")
    # One write: a terminal flushes print() line by line (10,000 writes for 10,000 jobs).
    print_lines([*lines, summary])


def audit_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        extras = {k: v for k, v in row.items() if k not in ("ts", "event", "job", "run_id")}
        detail = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in sorted(extras.items()))
        parts = [row.get("ts", "?"), row.get("event", "?")]
        if row.get("job"):
            parts.append(f"job={row['job']}")
        if row.get("run_id"):
            parts.append(f"run={row['run_id']}")
        say(" ".join(str(p) for p in parts) + (f" {detail}" if detail else ""))


def status_view(data: dict[str, Any], only_stale: bool, now: datetime | None = None) -> None:
    from cronctl.cli.termview import Terminal, colour_wanted

    term = Terminal(width=output_width(), colour=colour_wanted(), now=now or datetime.now(timezone.utc))
    print_lines(status_lines(data, only_stale, term))


def status_lines(data: dict[str, Any], only_stale: bool, term: Terminal | None = None) -> list[str]:
    from cronctl.cli.termview import Terminal, paint

    term = term or Terminal()
    parts: list[str] = []
    loop = data["loop"]
    age = loop.get("heartbeat_age")
    beat = f", heartbeat {age:.1f}s ago" if age is not None else ""
    pid = f" pid {loop['pid']}" if loop.get("pid") else ""
    standby = f", standby pid {loop['standby_pid']}" if loop.get("standby_pid") else ""
    jump = loop.get("clock_jump")
    stepped = f"; the wall clock stepped {jump['step_s']:+.1f}s at {jump['at']}" if jump else ""
    if data.get("loops") is not None:  # PostgreSQL: the headline is every loop's; the lines below, each one's
        pid = beat = ""
    if not only_stale or data["loop_stale"]:
        parts.append(f"loop: {paint(loop['state'], term)}{pid}{beat}{standby} — {loop['reason']}{stepped}")
        parts.extend(_cluster_lines(data.get("loops"), only_stale))
    if not data["jobs"]:
        if only_stale and not data["stale"]:
            parts.append("nothing is stale")
        return parts
    rows: list[tuple[str, ...]] = [
        (job["name"], job["state"], job["next_run_at"] or "-", job["last_status"] or "-", job["fault"] or "-",
         job["reason"]) for job in data["jobs"]]
    return parts + status_table(STATUS_HEADER, rows, term) + abandoned_lines(data["jobs"])


# On a narrow terminal these go first, in this order; REASON (the last column) is then cut.
STATUS_HEADER = ("JOB", "STATE", "NEXT", "LAST", "FAULT", "REASON")
STATUS_DROP_ORDER = ("FAULT", "LAST")
MIN_REASON = 16


def status_table(header: tuple[str, ...], rows: list[tuple[str, ...]], term: Terminal) -> list[str]:
    """The job table of `status`: whole rows with ISO instants on a pipe; on a terminal
    (or with COLUMNS) fitted to the width as `list` is, NEXT relative, STATE in colour."""
    from cronctl.cli.termview import paint_states
    from cronctl.timefmt import from_iso

    if term.width is None:
        return columns(header, rows)
    at = header.index("NEXT")

    def when(cell: str) -> str:
        instant = from_iso(cell) if cell != "-" else None
        return relative(instant, term.now) if instant is not None else cell

    rows = [(*row[:at], when(row[at]), *row[at + 1:]) for row in rows]
    lines = fitted_columns(header, rows, term.width, STATUS_DROP_ORDER, MIN_REASON)
    return paint_states(lines, [row[1] for row in rows], term)


def abandoned_lines(jobs: list[dict[str, Any]]) -> list[str]:
    """Notifications given up after 24 h of tries (SPEC §12), one line per job that has any."""
    return [f"notifications: {job['name']}: {job['notify_abandoned']} abandoned "
            f"(cronctl audit --job {job['name']} --event notify.abandoned)"
            for job in jobs if job.get("notify_abandoned")]


def _cluster_lines(loops: list[dict[str, Any]] | None, only_stale: bool) -> list[str]:
    """On PostgreSQL, one line per loop: which host, its state, heartbeat and clock skew."""
    lines = []
    for row in loops or []:
        if only_stale and row["state"] == "ok":
            continue
        skew = f", skew {row['skew_s']:+.3f}s" if row.get("skew_s") is not None else ""
        lines.append(f"  host {row['host']} pid {row['pid']}: {row['state']}, heartbeat "
                     f"{row['heartbeat_age_s']:.1f}s ago{skew}, home {row.get('home') or '-'}")
    return lines


def watch(frame_lines: Callable[[], list[str]], interval: float) -> None:
    """Redraw until Ctrl-C; on a pipe or a dumb terminal, print one frame per interval."""
    import time

    from rich.live import Live
    from rich.text import Text

    def frame() -> Text:  # cropped at the terminal's width: a wrapped line would scroll the screen
        return Text("\n".join(frame_lines()), no_wrap=True, overflow="crop")

    console = _console()
    try:
        if not console.is_terminal:
            while True:
                print_lines(frame_lines())
                sys.stdout.flush()
                time.sleep(interval)
        with Live(frame(), console=console, auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(interval)
                live.update(frame(), refresh=True)
    except KeyboardInterrupt:
        return


def history_table(records: list[dict[str, Any]]) -> None:
    if not records:
        say("no runs recorded yet")
        return
    rows: list[tuple[str, ...]] = []
    for r in records:
        duration = f"{r['duration']:.2f}s" if r.get("duration") is not None else "-"
        reason = run_reason(r) or ""
        if r.get("late"):
            reason = (reason + ", " if reason else "") + "late (scheduler_missed)"
        rows.append((r["job"], r["run_id"], r.get("slot") or "-", r.get("trigger") or "-",
                     r.get("started_at") or "-", duration,
                     r["status"] + (f" {r['exit_code']}" if r.get("exit_code") else ""), reason))
    header: tuple[str, ...] = ("JOB", "RUN", "SLOT", "TRIGGER", "STARTED", "DURATION", "STATUS", "REASON")
    if any(r.get("host") for r in records):  # PostgreSQL: which host ran each run (SPEC §9)
        header = (*header[:2], "HOST", *header[2:])
        rows = [(*row[:2], str(r.get("host") or "-"), *row[2:]) for row, r in zip(rows, records, strict=True)]
    print_lines(columns(header, rows))


def run_reason(record: dict[str, Any]) -> str | None:
    """Why a run ended, in words where the record says more than its reason code: a run
    that a signal ended has no exit code, so it reads "killed by signal 9 (SIGKILL)"."""
    from cronctl.jobs.words import signal_text
    from cronctl.proc.limits import LIMIT_WORDS

    if record.get("reason") in LIMIT_WORDS:
        return LIMIT_WORDS[str(record["reason"])]
    if record.get("status") == "skipped" and record.get("upstream"):  # a chain node (SPEC §10)
        return f"{record.get('reason')}: {record['upstream']} {record.get('upstream_status') or 'did not succeed'}"
    if record.get("reason") == "blocked_config" and record.get("output_tail"):
        return f"blocked_config: {record['output_tail']}"  # what is missing, as the run found it
    signal = record.get("signal")
    if isinstance(signal, int) and not isinstance(signal, bool) and record.get("reason") == "killed_by_signal":
        return signal_text(signal)
    reason = record.get("reason")
    return None if reason is None else str(reason)


def loop_line(row: dict[str, Any]) -> str | None:
    """One terminal line for a decision of the foreground loop (None: not worth a line)."""
    event, job = row.get("event"), row.get("job", "")
    clock = str(row.get("ts", ""))[11:19]
    short = _LOOP_LINES.get(str(event))
    if short is None:
        return None
    text = short(row)
    if text is None:
        return None
    if row.get("host") and event in _RUN_LINES:  # PostgreSQL: which host ran it
        text += f" on {row['host']}"
    return f"{clock} {job:<16} {text}" if job else f"{clock} {text}"


def _finished(row: dict[str, Any]) -> str:
    status = row.get("status", "?")
    took = f" in {row['duration_s']:.2f}s" if isinstance(row.get("duration_s"), (int, float)) else ""
    code = f" (exit {row['exit_code']})" if row.get("exit_code") not in (None, 0) else ""
    # An error's reason is its exit code, already said; a signal's is worth the words.
    said = run_reason(row)
    reason = f" — {said}" if said and (status != "error" or row.get("signal")) else ""
    return f"{status}{code}{took}{reason}"


def _skipped(row: dict[str, Any]) -> str | None:
    slot = str(row.get("slot") or "")[11:23]
    if row.get("chain"):  # a chain node the chain did not run: which chain, and which upstream
        upstream = f": {row['upstream']} ended {row.get('upstream_status')}" if row.get("upstream") else ""
        return f"skipped   in chain {row['chain']} ({row.get('reason')}{upstream})"
    if row.get("reason") != "cancelled_before_slot":
        return f"skipped   slot {slot} ({row.get('reason')})"
    if row.get("why") == "shutdown":
        return None  # the loop's last line counts these once
    return f"not run   slot {slot}: the job changed before it began ({row.get('why')})"


_RUN_LINES = ("run.started", "run.finished", "run.spawn_failed", "claim.reclaimed")
_LOOP_LINES: dict[str, Any] = {
    "run.started": lambda r: (f"started   run {r.get('run_id')} (slot {str(r.get('slot', ''))[11:23]}, "
                              f"pid {r.get('pid')})"),
    "run.finished": lambda r: f"finished  {_finished(r)}",
    "run.skipped": lambda r: _skipped(r),
    "run.missed": lambda r: f"missed    {r.get('count')} slot(s) ({r.get('reason')}, catchup {r.get('catchup')})",
    "run.retry_scheduled": lambda r: f"retry     attempt {r.get('attempt')} at {str(r.get('due_at', ''))[11:19]}",
    "run.spawn_failed": lambda r: f"NOT STARTED: could not spawn ({r.get('error')}); next slot fires normally",
    "run.fenced": lambda r: f"fenced    a stale write for run {r.get('run_id')} was refused",
    "claim.reclaimed": lambda r: f"reclaimed run {r.get('run_id')} ({r.get('reason')}, recorded {r.get('status')})",
    "recovery.persisted_error_rearmed": lambda r: f"re-armed  after a persisted {r.get('last_status')}",
    "recovery.deadline_terminated": lambda r: f"deadline  run {r.get('run_id')} ended by the janitor",
    "scheduler.takeover": lambda r: f"took over from pid {r.get('previous_pid')} ({r.get('reason')})",
    "scheduler.generation_restarted": lambda r: f"tick thread restarted as generation {r.get('generation')}",
}
