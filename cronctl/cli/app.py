"""The typer app, its root options, the context the commands share, and their shared option types.

The command modules (cli/job_commands.py, run_commands.py, health.py, migrate.py, metrics.py) register their
commands on `app`; only cli/main.py imports them, so nothing here imports back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from cronctl import __version__
from cronctl.cli import session
from cronctl.cli.session import cli_clock, open_context, open_store_context

__all__ = ["app", "cli_clock", "open_context", "open_store_context", "finish"]

app = typer.Typer(
    name="cronctl",
    help="A cron for one host that never fails silently.",
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Help texts are plain words: "[a-z0-9][a-z0-9._-]*" must not be read as rich markup.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# The invocation's state lives in cli/session.py (the framework-free entry sets it too);
# `_state` is the same dict, where tests put a FakeClock under "clock".
_state = session.state

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output with stable keys.")]


def _version(value: bool) -> None:
    if value:
        print(f"cronctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    home: Annotated[Optional[Path], typer.Option("--home", help="State directory (default $CRONCTL_HOME, "
                                                 "$XDG_STATE_HOME/cronctl, ~/.local/state/cronctl).")] = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    store: Annotated[Optional[str], typer.Option("--store", metavar="URL", show_default=False,
                                                 help="A PostgreSQL store, postgresql://... (default "
                                                 "$CRONCTL_STORE; none: the JSON store of the home).")] = None,
) -> None:
    session.set_root_options(home, store)


def finish(code: int | None) -> None:
    """A command body's exit code, as typer's way out (0 and None: a normal return)."""
    if code:
        raise typer.Exit(code)


# --- job options shared by add and edit -----------------------------------------

CronOpt = Annotated[Optional[str], typer.Option("--cron", help="5-field cron expression or @daily etc.")]
EveryOpt = Annotated[Optional[str], typer.Option("--every", help="Interval, e.g. 30s, 5m.")]
AtOpt = Annotated[Optional[str], typer.Option("--at", help="One-shot ISO 8601 instant.")]
AllowPastOpt = Annotated[bool, typer.Option("--allow-past", help="Accept an 'at' already past (a loop fires it "
                                            "at once); refused without it.")]
TzOpt = Annotated[Optional[str], typer.Option("--timezone", "--tz", help="IANA zone (default UTC).")]
CwdOpt = Annotated[Optional[str], typer.Option("--cwd", help="Working directory.")]
EnvOpt = Annotated[Optional[List[str]], typer.Option("--env", "-e", help="NAME=VALUE, repeatable.")]
TimeoutOpt = Annotated[Optional[str], typer.Option("--timeout", help="Default 1h; 0 = none.")]
GraceKillOpt = Annotated[Optional[str], typer.Option("--kill-grace", help="SIGTERM to SIGKILL wait (10s).")]
OverlapOpt = Annotated[Optional[str], typer.Option("--overlap", help="skip | allow | replace.")]
CatchupOpt = Annotated[Optional[str], typer.Option("--catchup", help="latest | skip.")]
DeadlineOpt = Annotated[Optional[str], typer.Option("--starting-deadline", help="Later than this = missed.")]
RetriesOpt = Annotated[Optional[int], typer.Option("--retries", help="Extra attempts after a failure.")]
RetryDelayOpt = Annotated[Optional[str], typer.Option("--retry-delay", help="First retry delay (doubles).")]
RepeatOpt = Annotated[Optional[int], typer.Option("--repeat", help="Stop after N runs.")]
JitterOpt = Annotated[Optional[str], typer.Option("--jitter", help="Stable per-job delay in [0, jitter).")]
GraceOpt = Annotated[Optional[str], typer.Option("--grace", help="How late before 'late' (default: half cadence).")]
OnFailureOpt = Annotated[Optional[str], typer.Option("--on-failure", help="Shell command run after a failure.")]
# --- alerting (SPEC §12)
AlertAfterOpt = Annotated[Optional[int], typer.Option("--alert-after", help="Failed runs in a row that make the "
                                                      "job stale (default 1).")]
NotifyOpt = Annotated[Optional[list[str]], typer.Option("--notify", help="Notify this target, repeatable: a webhook "
                                                        "URL, ping+URL (healthchecks.io), mailto:ADDRESS, or none.")]
NotifyOnOpt = Annotated[Optional[str], typer.Option("--notify-on", help="Events for --notify, comma-separated: "
                                                    "start,success,failure,recovery,output,stale,chain_failed.")]
PausedOpt = Annotated[Optional[bool], typer.Option("--paused/--not-paused", help="Define it paused.")]
# Running as operators do (SPEC §13).
UserOpt = Annotated[Optional[str], typer.Option("--user", help="Run as this user (the loop must run as root).")]
EnvFileOpt = Annotated[Optional[str], typer.Option("--env-file", help="KEY=VALUE file read at each run.")]
LimitOpt = Annotated[Optional[List[str]], typer.Option("--limit", help="NAME=VALUE: nice, memory (2G), cpu (10m), "
                                                       "nofile, nproc; repeatable.")]
KeepRunsOpt = Annotated[Optional[int], typer.Option("--keep-runs", help="Run logs kept (default 20).")]
KeepLogOpt = Annotated[Optional[str], typer.Option("--keep-log", help="Bytes kept per run log (default 1MiB).")]
CommandArg = Annotated[Optional[List[str]], typer.Argument(help="The command after --: one argument is a "
                                                          "shell string, several are an argv list.")]
