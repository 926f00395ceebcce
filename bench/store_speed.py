"""The store-write rows of issue 14: one store write, finishing one run, `apply -f` of 10,000 jobs.

- store write of one job at N jobs: one transaction that changes one job's state and looks
  its job up by name (`Store.transaction(lazy_jobs=True)`, what finishing, renewing and
  claiming one job do): the job's line is parsed and written again, the rest of the
  document copied as bytes. In-process, median of rounds after the first (which parses
  whole: a Store opens lazily only a document it wrote itself).
- store write of the whole document at N jobs: one transaction that changes one counter
  with every job parsed (a whole read, parse, serialize, compare and atomic write of the
  document; what claiming a tick's due jobs and every definitions command do),
  in-process, median of rounds.
  Peers on the same document in the same run: "stdlib codec" (json.loads and the
  json.dumps encoder per job, the codec the store used before, and the same atomic
  write) and "write floor" (the atomic write of the same bytes alone: temp file, fsync,
  rename, directory fsync; no parse, no serialize).
- finishing one run at 10,000 jobs: the engine records one run's result (one
  transaction), with an injected clock and a fake supervisor as in bench/scale.py; the
  median over `rounds` runs finished one at a time.
- `cronctl apply -f` of 10,000 new jobs into an empty home: the whole command, wall time,
  with stdout a pipe and with stdout a TTY (a pseudo-terminal). Peers: `python -c pass`
  and the YAML parse of the same file alone (PyYAML's SafeLoader, which cronctl's job
  file loader extends, and its C twin CSafeLoader when PyYAML has it).

`--profile` adds a cProfile of store writes at each size (where a write's time goes).
`--before DIR` also times, round by round alternating with this checkout's store, the store
module of another checkout (e.g. the code before a change, from `git archive`) on its own
copy of the same home: both under the same load, which on a shared machine matters more
than anything else.
`--tree DIR` measures another checkout of cronctl (e.g. the code before a change, from
`git archive`) with the same script.

`--apply-only` measures the `apply -f` row alone (a minute instead of several).

Usage: python bench/store_speed.py [--sizes 10000,50000] [--rounds 5] [--apply-rounds 3] [--quick]
                                   [--profile] [--tree DIR] [--apply-only]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pty
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PYTHON, bench_env, cronctl_cmd, machine_note, median, new_workdir, populate, save_results, table

FINISH_SIZE = 10_000
APPLY_JOBS = 10_000


def _timed(fn: Any) -> float:
    gc.collect()
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


# --- store write ---------------------------------------------------------------------------


def stdlib_serialize(doc: dict[str, Any]) -> bytes:
    """The store's byte form with the standard library's encoder (what jsonstore used before msgspec)."""
    dumps = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(", ", ": ")).encode
    lines = []
    for key in sorted(doc):
        value = doc[key]
        if key == "jobs" and value:
            body = ",\n".join(f"  {dumps(name)}: {dumps(value[name])}" for name in sorted(value))
            lines.append(f' "jobs": {{\n{body}\n }}')
        else:
            lines.append(f" {dumps(key)}: {dumps(value)}")
    return ("{\n" + ",\n".join(lines) + "\n}\n").encode("utf-8")


def atomic_write(path: Path, data: bytes) -> None:
    """The store's write without the store: temp file, fsync, rename, directory fsync."""
    temp = path.with_name(path.name + ".bench-tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_store_module(tree: Path) -> Any:
    """The jsonstore module of another checkout, beside this one's (its imports resolve here)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("jsonstore_before", tree / "cronctl" / "store" / "jsonstore.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def toucher(store: Any) -> Any:
    def touch() -> None:
        with store.transaction() as doc:
            doc["counters"]["bench"] = int(doc["counters"].get("bench") or 0) + 1

    return touch


def one_job_toucher(store: Any, name: str) -> Any:
    """A write of one job's state, as finishing, renewing or claiming one job writes it:
    a transaction that looks its jobs up by name (`lazy_jobs`)."""
    def touch() -> None:
        with store.transaction(lazy_jobs=True) as doc:
            state = doc["jobs"][name]["state"]
            state["bench"] = int(state.get("bench") or 0) + 1

    return touch


def measure_write(size: int, rounds: int, before: Any = None) -> dict[str, Any]:
    ctx = populate(new_workdir(f"store-{size}") / "home", size)
    store_bytes = ctx.paths.store.stat().st_size
    touch = toucher(ctx.store)
    touch()  # warm: the first transaction of a process imports and allocates once
    one_job = one_job_toucher(ctx.store, f"job-{size // 2:05d}")
    one_job_times = [_timed(one_job) for _ in range(rounds + 1)][1:]  # the first parses whole
    touch()
    before_touch = None
    if before is not None:
        from cronctl.paths import open_home

        before_home = new_workdir(f"store-before-{size}") / "home"
        before_home.mkdir(parents=True)
        (before_home / "jobs.json").write_bytes(ctx.paths.store.read_bytes())
        before_touch = toucher(before.Store(open_home(before_home)))
        before_touch()
    cronctl, earlier = [], []
    for _ in range(rounds):
        cronctl.append(_timed(touch))
        if before_touch is not None:
            earlier.append(_timed(before_touch))
    peer_path = ctx.paths.home / "peer.json"

    def stdlib_touch() -> None:
        doc = json.loads(ctx.paths.store.read_bytes())
        doc["counters"]["bench"] = int(doc["counters"].get("bench") or 0) + 1
        atomic_write(peer_path, stdlib_serialize(doc))

    stdlib = [_timed(stdlib_touch) for _ in range(rounds)]
    data = ctx.paths.store.read_bytes()
    floor = [_timed(lambda: atomic_write(peer_path, data)) for _ in range(rounds)]
    return {"jobs": size, "store_mib": round(store_bytes / 2**20, 2), "rounds": rounds,
            "store_write_ms": round(median(cronctl) * 1e3, 1),
            "one_job_write_ms": round(median(one_job_times) * 1e3, 1),
            "stdlib_codec_ms": round(median(stdlib) * 1e3, 1),
            "write_floor_ms": round(median(floor) * 1e3, 1),
            "before_ms": round(median(earlier) * 1e3, 1) if earlier else None}


def profile_write(size: int, rounds: int) -> str:
    """cProfile of `rounds` store writes at `size` jobs: the functions with the most own time."""
    import cProfile
    import io
    import pstats

    ctx = populate(new_workdir(f"profile-{size}") / "home", size)

    def touch() -> None:
        with ctx.store.transaction() as doc:
            doc["counters"]["bench"] = int(doc["counters"].get("bench") or 0) + 1

    touch()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(rounds):
        touch()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(12)
    text = out.getvalue().replace(str(Path(__file__).resolve().parent.parent) + "/", "")  # no machine paths
    lines = [line for line in text.splitlines() if line.strip()]
    return f"cProfile of {rounds} store writes at {size:,} jobs (seconds for all {rounds}):\n\n```\n" + "\n".join(
        lines[2:]) + "\n```\n"


# --- finishing one run -------------------------------------------------------------------


def measure_finish(size: int, rounds: int) -> dict[str, Any]:
    """Claim `rounds` due jobs in one tick, then record their results one by one."""
    from scale import FakeSupervisor, result_for

    from cronctl.clock import FakeClock
    from cronctl.loop.engine import Engine, EngineOptions
    from cronctl.loop.scheduler import LoopOptions, Scheduler
    from cronctl.timefmt import to_iso

    clock = FakeClock()
    ctx = populate(new_workdir(f"finish-{size}") / "home", size, clock=clock, command="true")
    ctx.audit.clock = clock
    with ctx.store.transaction() as doc:
        for name in sorted(doc["jobs"])[:rounds]:
            doc["jobs"][name]["state"]["next_run_at"] = to_iso(clock.now() + timedelta(minutes=30))
    # The fake has the supervisor's interface, not its type: Any for the type checker.
    fake: Any = FakeSupervisor
    sched = Scheduler(ctx, LoopOptions(quiet=True, lease=60.0), supervisor_factory=fake)
    sup = fake()
    engine = Engine(ctx, sup, sched._owner("bench"), EngineOptions(lease=60.0))
    sup.on_result = engine.on_result
    clock.advance(31 * 60)
    engine.fire_due()
    times = []
    for run_id in list(engine.active):
        engine.on_result(result_for(run_id))
        times.append(_timed(engine.record_results))
    return {"jobs": size, "runs_finished": len(times), "finish_one_ms": round(median(times) * 1e3, 1)}


# --- apply -f ------------------------------------------------------------------------------


def jobs_file(directory: Path, count: int) -> Path:
    path = directory / f"jobs-{count}.yaml"
    lines = ["jobs:"]
    for index in range(count):
        lines += [f"  - name: job-{index:05d}", "    every: 1h", f'    command: "echo {index}"']
    path.write_text("\n".join(lines) + "\n")
    return path


def run_wall(argv: list[str], env: dict[str, str], tty: bool) -> float:
    """Wall time of one command; stdout (and stderr) a pipe drained to nowhere, or a pseudo-terminal."""
    if not tty:
        started = time.perf_counter()
        proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        elapsed = time.perf_counter() - started
    else:
        master, slave = pty.openpty()
        started = time.perf_counter()
        child = subprocess.Popen(argv, env=env, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
        os.close(slave)
        while True:  # drain the terminal, or a full one blocks the command
            try:
                if not os.read(master, 65536):
                    break
            except OSError:  # EIO: the child closed its side
                break
        child.wait()
        elapsed = time.perf_counter() - started
        os.close(master)
        proc = subprocess.CompletedProcess(argv, child.returncode)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}")
    return elapsed


def measure_apply(rounds: int, tree: Path | None) -> dict[str, Any]:
    work = new_workdir("apply")
    path = jobs_file(work, APPLY_JOBS)
    result: dict[str, Any] = {"jobs": APPLY_JOBS, "rounds": rounds}
    for tty in (False, True):
        times = []
        for index in range(rounds):
            env = bench_env(work / f"home-{int(tty)}-{index}")
            if tree is not None:
                env["PYTHONPATH"] = str(tree)
            times.append(run_wall([*cronctl_cmd(), "apply", "-f", str(path)], env, tty))
        result["apply_tty_s" if tty else "apply_pipe_s"] = round(median(times), 2)
    result["python_pass_s"] = round(median(run_wall([PYTHON, "-c", "pass"], dict(os.environ), False)
                                           for _ in range(rounds)), 3)
    for loader in ("SafeLoader", "CSafeLoader"):
        code = (f"import yaml; loader = getattr(yaml, {loader!r}, None); "
                f"loader and yaml.load(open({str(path)!r}).read(), Loader=loader)")
        result[f"yaml_{loader}_s"] = round(median(run_wall([PYTHON, "-c", code], dict(os.environ), False)
                                                  for _ in range(rounds)), 2)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,50000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--apply-rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="10,000 jobs only, 3 rounds, 1 apply round")
    parser.add_argument("--profile", action="store_true", help="add a cProfile of store writes at each size")
    parser.add_argument("--before", type=Path, default=None, help="time this checkout's store module too")
    parser.add_argument("--apply-only", action="store_true", help="measure the `apply -f` row only")
    parser.add_argument("--tree", type=Path, default=None, help="measure the cronctl of this checkout")
    parser.add_argument("--label", default="this checkout", help="what the table's title calls the cronctl measured")
    parser.add_argument("--results", type=Path, default=None, help="directory to save store_speed.json/.md in")
    args = parser.parse_args(argv)
    if args.tree is not None:
        sys.path.insert(0, str(args.tree.resolve()))
    sizes = [10_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    rounds = 3 if args.quick else args.rounds
    apply_rounds = 1 if args.quick else args.apply_rounds
    before = load_store_module(args.before.resolve()) if args.before else None
    writes = [] if args.apply_only else [measure_write(size, rounds, before) for size in sizes]
    finish = None if args.apply_only else measure_finish(FINISH_SIZE, rounds)
    applied = measure_apply(apply_rounds, args.tree.resolve() if args.tree else None)
    command = "python bench/store_speed.py" + (" --quick" if args.quick else "") + (
        " --tree DIR" if args.tree else "") + (
        " --before DIR" if args.before else "") + (" --apply-only" if args.apply_only else "")
    rows = []
    for w in writes:
        rows.append([f"store write of one job at {w['jobs']:,} jobs ({w['store_mib']} MiB)",
                     f"{w['one_job_write_ms']} ms", f"write floor {w['write_floor_ms']} ms"])
        rows.append([f"store write of the whole document at {w['jobs']:,} jobs", f"{w['store_write_ms']} ms",
                     (f"before {w['before_ms']} ms, " if w["before_ms"] is not None else "")
                     + f"stdlib codec {w['stdlib_codec_ms']} ms, write floor {w['write_floor_ms']} ms"])
    if finish is not None:
        rows.append([f"finishing one run at {finish['jobs']:,} jobs", f"{finish['finish_one_ms']} ms",
                     f"median of {finish['runs_finished']} runs"])
    rows.append([f"`apply -f` of {applied['jobs']:,} new jobs", f"{applied['apply_pipe_s']} s (pipe), "
                 f"{applied['apply_tty_s']} s (TTY)",
                 f"`python -c pass` {applied['python_pass_s']} s; YAML parse alone: SafeLoader "
                 f"{applied['yaml_SafeLoader_s']} s, CSafeLoader {applied['yaml_CSafeLoader_s']} s"])
    text = table(f"Store-write rows ({args.label}; median)",
                 ["row", "cronctl", "peers, same run"], rows, command=command)
    text += f"\n- {machine_note()}\n"
    if args.profile and not args.apply_only:
        text += "".join("\n" + profile_write(size, rounds) for size in sizes)
    print(text)
    data = {"writes": writes, "finish": finish, "apply": applied}
    save_results(args.results, "store_speed", data, text)
    return data


if __name__ == "__main__":
    main()
