"""CLI latency: wall time of one `cronctl` command, p50 over ROUNDS runs, at 1k and 10k jobs.

Read commands (`list`, `show`, `status`, `status --json`, `history`, `next`) with stdout
a pipe and a terminal (a pty); write commands (`add` of a new job, `edit`, `pause`,
`resume`, `remove`, `force-run` with no loop: the run happens in this process, which
waits for it) with stdout a pipe; next to `python -c pass`, `python -c "import typer,
rich"` and `cronctl --version`. The `-X importtime` breakdown of `cronctl status --json`
is saved beside the results (importtime-status.txt) and its heaviest imports are printed.

--cronctl PATH measures another installation's console script instead (e.g. a
`pip install` of a `git archive` into its own venv: an editable install's import hook
would win over PYTHONPATH). --before PATH measures that installation too, alternated
with the measured one round by round on homes built alike, so that both see the same
machine load; the table then has both medians. --only picks commands.

Usage: python bench/cli_latency.py [--sizes 1000,10000] [--rounds 20] [--quick] [--cronctl PATH]
                                   [--before PATH] [--only list,add]
"""

from __future__ import annotations

import argparse
import os
import pty
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    PYTHON,
    bench_env,
    cronctl_cmd,
    machine_note,
    median,
    new_workdir,
    pct,
    populate,
    save_results,
    table,
)


def timed(argv: list[str], env: dict[str, str], rounds: int, vary: Any = None, tty: bool = False) -> list[float]:
    out = []
    for index in range(rounds):
        args = vary(index) if vary else argv
        started = time.perf_counter()
        code, err = _run_tty(args, env) if tty else _run_pipe(args, env)
        out.append(time.perf_counter() - started)
        if code not in (0, 3):  # 3: `status --stale` found something stale
            raise RuntimeError(f"{' '.join(args)} failed: {err.decode()[-500:]}")
    return out


def _run_pipe(args: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    done = subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return done.returncode, done.stderr


def _run_tty(args: list[str], env: dict[str, str]) -> tuple[int, bytes]:
    """stdout a terminal (a pty read until the command closes it), as a person runs it."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, env=env, stdout=follower, stderr=subprocess.PIPE)
    os.close(follower)
    while True:
        try:
            if not os.read(leader, 65536):
                break
        except OSError:  # EIO: the command closed its end
            break
    os.close(leader)
    assert proc.stderr is not None
    err = proc.stderr.read()
    return proc.wait(), err


def importtime(env: dict[str, str], argv: list[str], cronctl: list[str]) -> tuple[str, list[tuple[int, str]]]:
    python = str(Path(cronctl[0]).with_name("python")) if Path(cronctl[0]).name == "cronctl" else PYTHON
    done = subprocess.run([python, "-X", "importtime", "-m", "cronctl", *argv], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        parts = [part.strip() for part in line.replace("import time:", "").split("|")]
        if len(parts) != 3:
            continue
        _self_us, cumulative, name = parts
        rows.append((int(cumulative), name))
    return done.stderr, rows


def compile_bytecode() -> None:
    """Write cronctl's bytecode first, as installing a package does. With
    PYTHONDONTWRITEBYTECODE set (as on the machines these figures come from) an editable
    install would otherwise compile every module it imports on every run."""
    import cronctl

    subprocess.run([PYTHON, "-m", "compileall", "-q", str(Path(cronctl.__file__).parent)], check=True,
                   stdout=subprocess.DEVNULL)


def command_cases(cronctl: list[str], n: int) -> list[tuple[str, Any, bool]]:
    """(label, argv or a function of the round, with a terminal too)."""
    return [
        ("status --json", [*cronctl, "status", "--json"], True),
        ("status", [*cronctl, "status"], True),
        ("list", [*cronctl, "list"], True),
        ("show", [*cronctl, "show", "job-00007"], True),
        ("history", [*cronctl, "history"], True),
        ("next", [*cronctl, "next"], True),
        ("next JOB", [*cronctl, "next", "job-00007"], True),
        ("add", lambda i: [*cronctl, "add", f"added-{n}-{i:03d}", "--every", "1h", "--", "true"], False),
        ("edit", lambda i: [*cronctl, "edit", "job-00003", "--timeout", f"{i + 2}h"], False),
        ("pause", lambda i: [*cronctl, "pause", f"job-{i + 10:05d}"], False),
        ("resume", lambda i: [*cronctl, "resume", f"job-{i + 10:05d}"], False),
        ("remove", lambda i: [*cronctl, "remove", f"added-{n}-{i:03d}"], False),
        ("force-run (no loop)", [*cronctl, "force-run", "forced"], False),
    ]


def _home(n: int, prefix: str, cronctl: list[str], env_of: Any) -> dict[str, str]:
    """A home with n jobs (every 1h) and the job `forced`, for one installation."""
    home = new_workdir(f"cli-{prefix}{n}") / "home"
    populate(home, n, every="1h")
    env: dict[str, str] = env_of(home)
    subprocess.run([*cronctl, "add", "forced", "--every", "1h", "--", "true"], env=env, check=True,
                   capture_output=True)
    return env


def _alternated(cmd: Any, before: list[str] | None, cronctl: list[str], env: dict[str, str],
                env_before: dict[str, str] | None, rounds: int, tty: bool) -> tuple[list[float], list[float] | None]:
    """The rounds of one command; with `before`, that installation's round first, each time."""
    vary = cmd if callable(cmd) else None
    if before is None or env_before is None:
        return timed([] if vary else cmd, env, rounds, vary, tty=tty), None
    now: list[float] = []
    old: list[float] = []
    for index in range(rounds):
        args = vary(index) if vary else cmd
        old_args = [*before, *args[len(cronctl):]]
        old += timed(old_args, env_before, 1, tty=tty)
        now += timed(args, env, 1, tty=tty)
    return now, old


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="1000 jobs, 7 rounds")
    parser.add_argument("--cronctl", type=Path, default=None, help="the console script to measure")
    parser.add_argument("--before", type=Path, default=None, help="a console script to alternate with")
    parser.add_argument("--only", default=None, help="comma-separated command labels (e.g. list,add)")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [1000] if args.quick else [int(x) for x in args.sizes.split(",")]
    rounds = 7 if args.quick else args.rounds
    only = set(args.only.split(",")) if args.only else None
    # A non-editable install was compiled when it was installed.
    cronctl = [str(args.cronctl)] if args.cronctl else cronctl_cmd()
    if args.cronctl is None:
        compile_bytecode()
    env_of = bench_env

    rows: list[list[Any]] = []
    data: dict[str, Any] = {}
    base_env = env_of(new_workdir("cli-empty") / "home")
    baselines = [("python -c pass", [PYTHON, "-c", "pass"]),
                 ('python -c "import typer, rich"', [PYTHON, "-c", "import typer, rich"]),
                 ("cronctl --version", [*cronctl, "--version"])]
    for label, cmd in [] if args.no_baselines else baselines:
        values = timed(cmd, base_env, rounds)
        data[label] = values
        rows.append(["-", label, "pipe", *([""] if args.before else []), f"{median(values) * 1e3:.0f}",
                     f"{pct(values, 90) * 1e3:.0f}"])
    saved_importtime = ""
    heaviest: list[tuple[int, str]] = []
    before = [str(args.before)] if args.before else None
    for n in sizes:
        print(f"cli: {n} jobs ...", file=sys.stderr, flush=True)
        env = _home(n, "", cronctl, env_of)
        env_before = _home(n, "before-", before, env_of) if before else None
        for label, cmd, with_tty in command_cases(cronctl, n):
            if only is not None and label not in only:
                continue
            for tty in (False, True) if with_tty else (False,):
                kind = "tty" if tty else "pipe"
                values, old = _alternated(cmd, before, cronctl, env, env_before, rounds, tty)
                data[f"{label} @ {n} ({kind})"] = values
                row = [f"{n:,}", f"cronctl {label}", kind]
                if old is not None:
                    data[f"{label} @ {n} ({kind}) before"] = old
                    row.append(f"{median(old) * 1e3:.0f}")
                rows.append([*row, f"{median(values) * 1e3:.0f}", f"{pct(values, 90) * 1e3:.0f}"])
        if n == sizes[0]:
            saved_importtime, heaviest = importtime(env, ["status", "--json"], cronctl)
    cmd = "python bench/cli_latency.py" + (" --quick" if args.quick else f" --sizes {args.sizes} --rounds {rounds}")
    cmd += " --cronctl AFTER/bin/cronctl" if args.cronctl else ""
    cmd += f" --only {args.only}" if args.only else ""
    cmd += " --before BEFORE/bin/cronctl" if args.before else ""
    headers = ["jobs", "command", "stdout", *(["p50 before"] if args.before else []), "p50", "p90"]
    text = table(f"CLI latency (ms, wall, {rounds} runs each)", headers, rows, command=cmd)
    top = sorted(heaviest, reverse=True)[:15]
    text += "\n" + table(f"`-X importtime` of `cronctl status --json` at {sizes[0]:,} jobs: heaviest imports "
                         "(cumulative ms)", ["module", "cumulative ms"],
                         [[name, f"{us / 1000:.1f}"] for us, name in top])
    text += f"\n- {machine_note()}\n- full breakdown saved as importtime-status.txt beside these results\n"
    print(text)
    save_results(args.results, "cli_latency", {"runs": data}, text)
    if args.results is not None:
        (args.results / "importtime-status.txt").write_text(saved_importtime)
    return data


if __name__ == "__main__":
    main()
