"""CLI latency: wall time of one `cronctl` command, p50 over ROUNDS runs, at 1k and 10k jobs.

Commands: `status --json`, `list`, `add` (a new job each run), `force-run` (no loop: the
run happens in this process, which waits for it), next to `python -c pass`,
`python -c "import typer, rich"` and `cronctl --version`. The `-X importtime` breakdown of
`cronctl status --json` is saved beside the results (importtime-status.txt) and its
heaviest imports are printed.

Usage: python bench/cli_latency.py [--sizes 1000,10000] [--rounds 20] [--quick]
"""

from __future__ import annotations

import argparse
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


def timed(argv: list[str], env: dict[str, str], rounds: int, vary: Any = None) -> list[float]:
    out = []
    for index in range(rounds):
        args = vary(index) if vary else argv
        started = time.perf_counter()
        done = subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        out.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.decode()[-500:]}")
    return out


def importtime(env: dict[str, str], argv: list[str]) -> tuple[str, list[tuple[int, str]]]:
    done = subprocess.run([PYTHON, "-X", "importtime", "-m", "cronctl", *argv], env=env, stdout=subprocess.DEVNULL,
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="1000 jobs, 7 rounds")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [1000] if args.quick else [int(x) for x in args.sizes.split(",")]
    rounds = 7 if args.quick else args.rounds
    cronctl = cronctl_cmd()
    compile_bytecode()
    rows: list[list[Any]] = []
    data: dict[str, Any] = {}
    base_env = bench_env(new_workdir("cli-empty") / "home")
    baselines = [("python -c pass", [PYTHON, "-c", "pass"]),
                 ('python -c "import typer, rich"', [PYTHON, "-c", "import typer, rich"]),
                 ("cronctl --version", [*cronctl, "--version"])]
    for label, cmd in baselines:
        values = timed(cmd, base_env, rounds)
        data[label] = values
        rows.append(["-", label, f"{median(values) * 1e3:.0f}", f"{pct(values, 90) * 1e3:.0f}"])
    saved_importtime = ""
    heaviest: list[tuple[int, str]] = []
    for n in sizes:
        print(f"cli: {n} jobs ...", file=sys.stderr, flush=True)
        home = new_workdir(f"cli-{n}") / "home"
        populate(home, n, every="1h")
        env = bench_env(home)
        subprocess.run([*cronctl, "add", "forced", "--every", "1h", "--", "true"], env=env, check=True,
                       capture_output=True)
        cases = [
            ("status --json", [*cronctl, "status", "--json"], None),
            ("list", [*cronctl, "list"], None),
            ("add", None, lambda i, n=n: [*cronctl, "add", f"added-{n}-{i:03d}", "--every", "1h", "--", "true"]),
            ("force-run (no loop)", [*cronctl, "force-run", "forced"], None),
        ]
        # The floor under `status --json`: the interpreter and the modules it imports, no work.
        cases.append(("imports of status --json alone (python -c)",
                      [PYTHON, "-c", "import cronctl.entry, cronctl.cli.fastpath, cronctl.ops.status, cronctl.cli.render"],
                      None))
        for label, cmd, vary in cases:
            values = timed(cmd or [], env, rounds, vary)
            data[f"{label} @ {n}"] = values
            name = label if label.startswith("imports") else f"cronctl {label}"
            rows.append([f"{n:,}", name, f"{median(values) * 1e3:.0f}", f"{pct(values, 90) * 1e3:.0f}"])
        if n == sizes[0]:
            saved_importtime, heaviest = importtime(env, ["status", "--json"])
    cmd = "python bench/cli_latency.py" + (" --quick" if args.quick else f" --sizes {args.sizes} --rounds {rounds}")
    text = table(f"CLI latency (ms, wall, {rounds} runs each)", ["jobs", "command", "p50", "p90"], rows, command=cmd)
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
