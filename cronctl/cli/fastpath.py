"""The plain forms of the everyday commands, parsed without building the typer app.

The CLI framework costs more than most answers: typer 0.29 imports pydantic to coerce
every parameter and builds the whole command tree on each start (about 150 ms of a
`cronctl list` at 1,000 jobs that takes 40 ms of work). The commands people and
monitoring run most (`list`, `show`, `status`, `history`, `next`, `add`, `edit`,
`pause`, `resume`, `remove`, `force-run`, `apply`) and the loop (`run`, whose start a
service manager waits for) have simple command lines, so this module
recognises them from a table and calls the very body the typer command calls
(cli/job_actions.py, cli/run_actions.py) with the same values: one body per command, whoever
parsed its arguments.

Only what the table says for certain is taken here: an unknown option, `--help`, a
missing value, a repeated option, a number that is not plain digits or is out of range,
an option value that starts with `-`, the global `--store` option, anything unusual goes
to the typer app, which owns every usage error. A PostgreSQL store named by
$CRONCTL_STORE is the body's to open (cli/session.py), as under typer: the framework's
import would be most of a one-job `add` there (issue 21). tests/cli/test_fastpath.py checks the table
against typer's own command tree (names, kinds, limits, defaults) and compares both
ways byte for byte.
"""

from __future__ import annotations

import re
import sys
from typing import Any, NamedTuple

FLAG, OFF, TEXT, TEXTS, INT = "flag", "off", "text", "texts", "int"


class Opt(NamedTuple):
    dest: str  # the body's parameter (and the typer command's)
    kind: str  # FLAG sets True, OFF sets False, TEXT one value, TEXTS repeatable, INT a whole number
    low: int | None = None
    high: int | None = None


class Command(NamedTuple):
    body: str  # "module.function" under cronctl.cli
    options: dict[str, Opt]
    arguments: tuple[str, ...] = ()  # positional parameters, in order
    rest: str | None = None  # the parameter that takes every further argument (add's command)
    required: int = 0  # how many of `arguments` must be given
    required_options: tuple[str, ...] = ()  # parameters given as options that typer requires
    reads_only: bool = False  # holds no lock, child or open write once answered: may skip teardown
    job_options: bool = False  # the body takes add's and edit's job options as one `options` (cli/joboptions.py)


class Invocation(NamedTuple):
    command: str
    home: str | None
    values: dict[str, Any]


_JSON = {"--json": Opt("json_out", FLAG)}
_JOB_OPTIONS = {
    "--cron": Opt("cron", TEXT), "--every": Opt("every", TEXT), "--at": Opt("at", TEXT),
    "--timezone": Opt("timezone", TEXT), "--tz": Opt("timezone", TEXT), "--cwd": Opt("cwd", TEXT),
    "--env": Opt("env", TEXTS), "-e": Opt("env", TEXTS), "--timeout": Opt("timeout", TEXT),
    "--kill-grace": Opt("kill_grace", TEXT), "--overlap": Opt("overlap", TEXT), "--catchup": Opt("catchup", TEXT),
    "--starting-deadline": Opt("starting_deadline", TEXT), "--retries": Opt("retries", INT),
    "--retry-delay": Opt("retry_delay", TEXT), "--repeat": Opt("repeat", INT), "--jitter": Opt("jitter", TEXT),
    "--grace": Opt("grace", TEXT), "--on-failure": Opt("on_failure", TEXT), "--paused": Opt("paused", FLAG),
    "--not-paused": Opt("paused", OFF), "--after": Opt("after", TEXTS), "--requires": Opt("requires", TEXT),
    "--user": Opt("user", TEXT), "--env-file": Opt("env_file", TEXT), "--limit": Opt("limits", TEXTS),
    "--keep-runs": Opt("keep_runs", INT), "--keep-log": Opt("keep_log", TEXT),
    "--alert-after": Opt("alert_after", INT), "--notify": Opt("notify", TEXTS), "--notify-on": Opt("notify_on", TEXT),
    **_JSON,
}

_ALLOW_PAST = {"--allow-past": Opt("allow_past", FLAG)}

COMMANDS: dict[str, Command] = {
    "list": Command("job_actions.list_jobs", _JSON, ("prefix",), reads_only=True),
    "show": Command("job_actions.show", _JSON, ("name",), required=1, reads_only=True),
    "next": Command("job_actions.next_fires", {"-n": Opt("count", INT, 1, 1000), "--count": Opt("count", INT, 1, 1000),
                                               "--from": Opt("from_", TEXT), **_JSON}, ("name",), reads_only=True),
    "status": Command("run_actions.status", {"--stale": Opt("stale", FLAG), **_JSON}, reads_only=True),
    "history": Command("run_actions.history", {"-n": Opt("count", INT, 0), "--chain": Opt("chain", TEXT),
                                               "--since": Opt("since", TEXT), "--status": Opt("status", TEXT), **_JSON},
                       ("name",), reads_only=True),
    "add": Command("job_actions.add", {**_JOB_OPTIONS, **_ALLOW_PAST}, ("name",), rest="command", required=1,
                   job_options=True),
    "edit": Command("job_actions.edit", {**_JOB_OPTIONS, **_ALLOW_PAST, "--unset": Opt("unset", TEXTS)}, ("name",),
                    rest="command", required=1, job_options=True),
    "remove": Command("job_actions.remove", {"--force": Opt("force", FLAG)}, ("name",), required=1),
    "pause": Command("job_actions.pause", {}, ("name",), required=1),
    "resume": Command("job_actions.resume", {"--all": Opt("all_jobs", FLAG), **_JSON}, ("name",)),
    "apply": Command("job_actions.apply", {"-f": Opt("file", TEXT), "--file": Opt("file", TEXT),
                                           "--prune": Opt("prune", FLAG), "--dry-run": Opt("dry_run", FLAG),
                                           "--force": Opt("force", FLAG), **_ALLOW_PAST, **_JSON},
                     required_options=("file",)),
    "run": Command("run_actions.run", {"-f": Opt("file", TEXT), "--file": Opt("file", TEXT),
                                       "--once": Opt("once", FLAG),
                                       "--standby": Opt("standby", FLAG), "--max-parallel": Opt("max_parallel", INT, 1),
                                       "--takeover-after": Opt("takeover_after", TEXT), "--lease": Opt("lease", TEXT),
                                       "--metrics-file": Opt("metrics_file", TEXT), "--quiet": Opt("quiet", FLAG),
                                       "-q": Opt("quiet", FLAG), "--http": Opt("http", TEXT),
                                       "--http-allow-remote": Opt("http_allow_remote", FLAG),
                                       "--echo-output": Opt("echo_output", FLAG),
                                       "--forget-after": Opt("forget_after", TEXT),
                                       "--http-token": Opt("http_token", TEXT)}),
    "force-run": Command("run_actions.force_run", {"--wait": Opt("wait", FLAG), "--chain": Opt("chain", FLAG),
                                                   "--alone": Opt("alone", FLAG), **_JSON},
                         ("name",), required=1),
}

_WHOLE_NUMBER = re.compile(r"0|[1-9][0-9]{0,8}")


class _Unsure(Exception):
    """This command line is for the typer app to judge."""


def parse(argv: list[str]) -> Invocation | None:
    """The command and its values, or None for anything the table does not say for certain."""
    try:
        home, rest = _global_options(argv)
        if not rest or rest[0] not in COMMANDS:
            return None
        return Invocation(rest[0], home, _values(COMMANDS[rest[0]], rest[1:]))
    except _Unsure:
        return None


def _global_options(argv: list[str]) -> tuple[str | None, list[str]]:
    """(--home value, the arguments after the global options)."""
    home = None
    index = 0
    while index < len(argv) and argv[index].startswith("--home"):
        arg = argv[index]
        if arg.startswith("--home="):
            value, index = arg[len("--home="):], index + 1
        elif arg == "--home" and index + 1 < len(argv):
            value, index = argv[index + 1], index + 2
        else:
            raise _Unsure
        if not value or value.startswith("-"):
            raise _Unsure  # odd enough that the framework should judge it
        home = value
    return home, argv[index:]


def _values(command: Command, args: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    positional: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            positional.extend(args[index:])
            break
        if not arg.startswith("-"):
            positional.append(arg)
            continue
        opt = command.options.get(arg)
        if opt is None:
            raise _Unsure  # --help, --opt=value, -n5, an unknown or misspelt option
        if opt.kind in (TEXT, TEXTS, INT):
            if index >= len(args) or args[index].startswith("-"):
                raise _Unsure
            value: Any = _number(opt, args[index]) if opt.kind == INT else args[index]
            index += 1
        else:
            value = opt.kind == FLAG
        _store(values, opt, value)
    values.update(_arguments(command, positional))
    if any(name not in values for name in command.required_options):
        raise _Unsure
    return values


def _number(opt: Opt, text: str) -> int:
    if not _WHOLE_NUMBER.fullmatch(text):
        raise _Unsure
    number = int(text)
    if (opt.low is not None and number < opt.low) or (opt.high is not None and number > opt.high):
        raise _Unsure
    return number


def _store(values: dict[str, Any], opt: Opt, value: Any) -> None:
    if opt.kind == TEXTS:
        values.setdefault(opt.dest, []).append(value)
    elif opt.dest in values:
        raise _Unsure  # given twice (or --paused with --not-paused): typer decides which wins
    else:
        values[opt.dest] = value


def _arguments(command: Command, positional: list[str]) -> dict[str, Any]:
    if len(positional) < command.required:
        raise _Unsure
    named: dict[str, Any] = dict(zip(command.arguments, positional, strict=False))
    extra = positional[len(command.arguments):]
    if extra:
        if command.rest is None:
            raise _Unsure
        named[command.rest] = extra
    return named


def run(invocation: Invocation) -> int | None:
    """Call the command's body, as the typer command would, and return its exit code."""
    from importlib import import_module

    from cronctl.cli import session

    session.set_root_options(invocation.home, None)
    command = COMMANDS[invocation.command]
    module, function = command.body.split(".")
    body = getattr(import_module(f"cronctl.cli.{module}"), function)
    values = invocation.values
    if command.job_options:
        from cronctl.cli.joboptions import JobOptions

        values = JobOptions.gather(values)
    try:
        code: int | None = body(**values)
    except EOFError:
        # As typer's layer answers it (a blank line, then cli/main's word); KeyboardInterrupt
        # is exit 130 both ways, through exits.run.
        print(file=sys.stderr)
        print("cronctl: aborted", file=sys.stderr)
        return 130
    return code
