"""The everyday commands answered without typer (cli/fastpath.py) do exactly what the typer
commands do: the table matches typer's command tree, anything unsure goes to typer, and
both ways print, exit and change the store alike."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest

from cronctl.cli import fastpath
from conftest import cronctl_bin, subprocess_env


def _click_params(command: str) -> dict[str, Any]:
    from cronctl.cli.main import _click_command

    return {param.name: param for param in _click_command().commands[command].params}


def _body(command: str) -> Any:
    module, function = fastpath.COMMANDS[command].body.split(".")
    return getattr(import_module(f"cronctl.cli.{module}"), function)


@pytest.mark.parametrize("command", sorted(fastpath.COMMANDS))
def test_the_table_says_what_the_typer_command_says(command: str) -> None:
    """Every option string the table takes is typer's, for the same parameter, of the same
    kind and limits; the positional arguments are typer's, in order."""
    spec, params = fastpath.COMMANDS[command], _click_params(command)
    for flag, opt in spec.options.items():
        param = params[opt.dest]
        assert flag in (*param.opts, *param.secondary_opts), (command, flag)
        if opt.kind in (fastpath.FLAG, fastpath.OFF):
            assert param.is_flag and not param.multiple
            assert (flag in param.secondary_opts) == (opt.kind == fastpath.OFF)
        else:
            assert not param.is_flag and param.multiple == (opt.kind == fastpath.TEXTS), (command, flag)
        annotation = param.type_descriptor.annotation
        assert (annotation is int) == (opt.kind == fastpath.INT), (command, flag)
        if opt.kind == fastpath.INT:
            assert (param.min, param.max) == (opt.low, opt.high)
    required_options = [p.name for p in params.values() if p.opts[0].startswith("-") and p.required]
    assert required_options == list(spec.required_options)
    arguments = [p.name for p in params.values() if not p.opts[0].startswith("-")]
    assert arguments == [*spec.arguments, *([spec.rest] if spec.rest else [])]
    for name in arguments:
        assert params[name].nargs == (-1 if name == spec.rest else 1)
        assert params[name].required == (spec.arguments.index(name) < spec.required if name in spec.arguments
                                         else False)


@pytest.mark.parametrize("command", sorted(fastpath.COMMANDS))
def test_the_body_takes_every_parameter_with_typers_defaults(command: str) -> None:
    signature = inspect.signature(_body(command))
    takes = dict(signature.parameters)
    if fastpath.COMMANDS[command].job_options:  # add's and edit's job options come as one JobOptions
        from cronctl.cli.joboptions import JobOptions

        takes.update(inspect.signature(JobOptions).parameters)
    takes_more = any(p.kind is p.VAR_KEYWORD for p in takes.values())
    for name, param in _click_params(command).items():
        if name not in takes:
            assert takes_more, (command, name)
            continue
        default = takes[name].default
        if default is not inspect.Parameter.empty:
            assert default == (param.default if param.default not in ((), []) else None), (command, name)


@pytest.mark.parametrize("argv, command, home, values", [
    (["status", "--json"], "status", None, {"json_out": True}),
    (["status", "--stale", "--json"], "status", None, {"json_out": True, "stale": True}),
    (["--home", "/x", "list"], "list", "/x", {}),
    (["--home=/x", "--home", "/y", "show", "a", "--json"], "show", "/y", {"name": "a", "json_out": True}),
    (["next", "a", "-n", "3", "--from", "2026-01-01T00:00"], "next", None,
     {"name": "a", "count": 3, "from_": "2026-01-01T00:00"}),
    (["history", "-n", "0"], "history", None, {"count": 0}),
    (["add", "b", "--every", "1h", "-e", "A=1", "--env", "B=2", "--", "echo", "-x"], "add", None,
     {"name": "b", "every": "1h", "env": ["A=1", "B=2"], "command": ["echo", "-x"]}),
    (["add", "b", "true", "--not-paused", "--retries", "2"], "add", None,
     {"name": "b", "command": ["true"], "paused": False, "retries": 2}),
    (["edit", "b", "--unset", "cwd", "--unset", "env"], "edit", None, {"name": "b", "unset": ["cwd", "env"]}),
    (["resume", "--all"], "resume", None, {"all_jobs": True}),
    (["force-run", "b", "--wait"], "force-run", None, {"name": "b", "wait": True}),
    (["run", "-f", "jobs.yaml", "--max-parallel", "5", "-q", "--lease", "2m"], "run", None,
     {"file": "jobs.yaml", "max_parallel": 5, "quiet": True, "lease": "2m"}),
    (["run", "--once"], "run", None, {"once": True}),
    (["apply", "-f", "./jobs.yaml", "--prune", "--json"], "apply", None,
     {"file": "./jobs.yaml", "prune": True, "json_out": True}),
])
def test_the_plain_forms_are_taken(argv: list[str], command: str, home: str | None, values: dict[str, Any]) -> None:
    assert fastpath.parse(argv) == fastpath.Invocation(command, home, values)


@pytest.mark.parametrize("argv", [
    [], ["--version"], ["--help"], ["list", "--help"], ["list", "-h"], ["status", "--watch"], ["status", "-w"],
    ["status", "--json", "extra"], ["--json", "status"], ["status", "--json=1"], ["show"], ["show", "a", "b"],
    ["--home"], ["--home", "status", "--json"], ["--home=", "status", "--json"], ["--home", "--json", "status"],
    ["--homes", "/x", "status"], ["--store", "postgresql://x", "list"], ["next", "-n", "0"], ["next", "-n", "1001"],
    ["next", "-n", "05"], ["next", "-n5"], ["next", "-n"], ["history", "-n", "-1"], ["add", "b", "--every"],
    ["add", "b", "--every", "1h", "--every", "2h"], ["add", "b", "--paused", "--not-paused"],
    ["add", "b", "--retries", "-1"], ["add", "b", "--on-failure", "-x"], ["add", "b", "-"], ["pause"],
    ["pause", "a", "b"], ["remove", "a", "--forc"], ["kill", "a"], ["run", "--max-parallel", "0"],
    ["run", "extra"], ["run", "-f"], ["apply"], ["apply", "--prune"], ["apply", "-f", "x", "y"], ["lst"],
])
def test_everything_else_goes_to_the_typer_app(argv: list[str]) -> None:
    assert fastpath.parse(argv) is None


def _both(home: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The same command through the console script (fast path) and through cli.main (typer)."""
    env = subprocess_env(home)
    fast = subprocess.run([*cronctl_bin(), *argv], env=env, capture_output=True, text=True, timeout=60)
    typer_way = subprocess.run([sys.executable, "-c", "import sys; from cronctl.cli.main import main; main(sys.argv[1:])",
                                *argv], env=env, capture_output=True, text=True, timeout=60)
    return fast, typer_way


def _same(fast: subprocess.CompletedProcess[str], typer_way: subprocess.CompletedProcess[str]) -> None:
    assert (fast.returncode, fast.stderr) == (typer_way.returncode, typer_way.stderr)
    # No loop runs in these homes, so nothing in the answer depends on the moment it was read.
    assert fast.stdout == typer_way.stdout


READS = [["status", "--json"], ["status", "--json", "--stale"], ["status"], ["status", "--stale"], ["list"],
         ["list", "--json"], ["show", "ok-job"], ["show", "never-ran", "--json"], ["show", "missing"],
         ["next", "-n", "3", "--from", "2026-10-24T00:00:00+02:00"], ["next", "never-ran", "--json", "--from",
                                                                     "2026-10-24T00:00"],
         ["next", "nope"], ["next", "ok-job", "--from", "yesterday"], ["history"], ["history", "ok-job", "--json"],
         ["history", "-n", "0"], ["history", "--chain", "nope"]]


@pytest.mark.slow
def test_the_read_commands_print_what_the_typer_commands_print(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    cli("add", "ok-job", "--every", "1h", "--", "true")
    cli("add", "never-ran", "--cron", "*/5 * * * *", "--", "echo", "hi")
    cli("pause", "never-ran")
    for argv in [*READS, ["--home", str(home), "list"]]:
        assert fastpath.parse(argv) is not None, argv
        _same(*_both(home, *argv))


def _store_without_times(home: Path) -> dict[str, Any] | None:
    """The store with the fields that hold the moment of the command taken out (None: no store yet)."""
    if not (home / "jobs.json").exists():
        return None
    doc = json.loads((home / "jobs.json").read_text())
    for entry in doc["jobs"].values():
        for key in ("next_run_at", "created_at", "updated_at", "armed_at"):
            entry["state"].pop(key, None)
    doc.pop("updated_at", None)
    return doc


WRITES = [["add", "held", "--every", "1h", "--paused", "--", "true"], ["add", "held", "--every", "1h", "--", "true"],
          ["add", "Bad_Name", "--every", "5", "--tz", "Mars/Base", "--overlap", "sometimes", "--", "true"],
          ["add", "x", "--", "true"], ["add", "envs", "--every", "1h", "--paused", "-e", "A=1", "-e", "B", "true"],
          ["add", "argv", "--cron", "0 3 * * *", "--paused", "--retries", "2", "--", "echo", "-n", "hi"],
          ["edit", "held", "--timeout", "2h", "--unset", "cwd"], ["edit", "held"], ["edit", "nope", "--every", "2h"],
          ["pause", "held"], ["pause", "held"], ["pause", "nope"], ["resume"], ["resume", "nope"],
          ["force-run", "nope"], ["remove", "argv"], ["remove", "argv"]]


def _same_in_both_homes(argv: list[str], fast_home: Path, typer_home: Path) -> None:
    """`argv` through the fast path in one home and through typer in the other: same output,
    exit code and store."""
    assert fastpath.parse(argv) is not None, argv
    fast = subprocess.run([*cronctl_bin(), *argv], env=subprocess_env(fast_home), capture_output=True,
                          text=True, timeout=60)
    typer_way = subprocess.run([sys.executable, "-c", "import sys; from cronctl.cli.main import main; "
                                "main(sys.argv[1:])", *argv], env=subprocess_env(typer_home),
                               capture_output=True, text=True, timeout=60)
    _same(fast, typer_way)
    assert _store_without_times(fast_home) == _store_without_times(typer_home), argv


@pytest.mark.slow
def test_the_write_commands_do_what_the_typer_commands_do(tmp_path: Path) -> None:
    """Two homes, each command through both ways in turn: same output, exit code and store."""
    fast_home, typer_home = tmp_path / "fast", tmp_path / "typer"
    for argv in WRITES:
        _same_in_both_homes(argv, fast_home, typer_home)


@pytest.mark.slow
def test_apply_does_what_the_typer_command_does(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - name: a\n    every: 1h\n    command: 'true'\n"
                    "  - name: b\n    cron: '0 3 * * *'\n    command: [echo, hi]\n    paused: true\n")
    fast_home, typer_home = tmp_path / "fast", tmp_path / "typer"
    for argv in (["apply", "-f", str(jobs), "--dry-run"], ["apply", "-f", str(jobs)], ["apply", "-f", str(jobs)],
                 ["apply", "--file", str(tmp_path / "missing.yaml")], ["apply", "-f", str(jobs), "--prune", "--json"]):
        _same_in_both_homes(argv, fast_home, typer_home)


@pytest.mark.slow
def test_force_run_without_a_loop_runs_and_exits_alike(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    cli("add", "fails", "--every", "1h", "--", "exit 7")
    fast, typer_way = _both(home, "force-run", "fails", "--wait")
    assert (fast.returncode, typer_way.returncode) == (7, 7)
    assert fast.stdout.split(" run ")[0] == typer_way.stdout.split(" run ")[0] == "fails"
    assert fast.stdout.rsplit(": ", 1)[1] == typer_way.stdout.rsplit(": ", 1)[1]


def test_stale_exits_3_on_both_paths(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    from cronctl.context import Context
    from cronctl.paths import resolve_home

    cli("add", "late", "--every", "1m", "--", "true")
    with Context.open(resolve_home(None)).store.transaction() as doc:
        doc["jobs"]["late"]["state"]["next_run_at"] = "2020-01-01T00:00:00.000+00:00"
    fast, typer_way = _both(home, "status", "--json", "--stale")
    _same(fast, typer_way)
    assert fast.returncode == 3 and '"late"' in fast.stdout


def test_a_corrupt_store_fails_alike_and_is_left_alone(home: Path, cli) -> None:  # type: ignore[no-untyped-def]
    cli("add", "a", "--every", "1h", "--", "true")
    store = home / "jobs.json"
    store.write_bytes(b'{"jobs": {')
    for argv in (["status", "--json"], ["list"], ["pause", "a"]):
        fast, typer_way = _both(home, *argv)
        _same(fast, typer_way)
        assert fast.returncode == 1 and str(store) in fast.stderr and "Traceback" not in fast.stderr
        assert store.read_bytes() == b'{"jobs": {'


@pytest.mark.parametrize("argv", [["status", "--json"], ["list"], ["show", "a"], ["history"], ["next"],
                                  ["pause", "a"], ["add", "b", "--every", "1h", "--", "true"]])
def test_the_fast_path_imports_neither_the_cli_framework_nor_rich_nor_yaml(home: Path, cli, argv: list[str]) -> None:  # type: ignore[no-untyped-def]
    cli("add", "a", "--every", "1h", "--", "true")
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "cronctl", *argv],
                          env=subprocess_env(home), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "cronctl.cli.fastpath" in imported
    assert not {name for name in imported if name.split(".")[0] in ("typer", "click", "rich", "pydantic", "yaml")}


def test_an_end_of_input_or_an_interrupt_exits_as_through_typer(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from cronctl.cli import job_actions
    from cronctl.cli.main import main

    for raised, expected in ((EOFError, (130, "\ncronctl: aborted\n")), (KeyboardInterrupt, (130, ""))):
        def body(prefix: str | None = None, json_out: bool = False,
                 raised: type[BaseException] = raised) -> None:
            raise raised

        monkeypatch.setattr(job_actions, "list_jobs", body)
        seen = []
        for way in (lambda: main(["list"]), lambda: exits_run(fastpath.parse(["list"]))):
            with pytest.raises(SystemExit) as exited:
                way()
            seen.append((exited.value.code, capsys.readouterr().err))
        assert seen == [expected, expected], raised


def exits_run(invocation: fastpath.Invocation | None) -> None:
    from cronctl.cli import exits

    assert invocation is not None
    exits.run(lambda: fastpath.run(invocation))
