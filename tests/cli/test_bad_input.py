"""Bad input never crashes cronctl and never half-changes the store.

Hypothesis generates job files (unknown fields, wrong types, nested garbage,
plausible-looking values, raw YAML noise) for `validate -f` and `apply -f`, and
argument lists for `add` and `edit`. For every example:

- the exit code is 0, 1 or 2, and stderr has no traceback and no "internal error";
- `validate` never touches the store;
- a rejected input leaves jobs.json byte-identical;
- an accepted file is applied idempotently: applying it again writes nothing.

Every example starts from a copy of one seeded home (jobs from the file under test,
from another file and by hand), passed with --home. The `cli` fixture is function
scoped and Hypothesis does not reset it between examples; that is fine here because
it only captures output, and each call reads its capture afresh.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from cronctl.jobs.jobfile import JOB_FIELDS

Cli = Callable[..., Any]

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# --- a seeded home, copied fresh for every example ---------------------------------------

SEED_FILE = """\
defaults: {timezone: Europe/Berlin}
jobs:
  - {name: backup, cron: "0 3 * * *", command: "pg_dump db"}
  - {name: tick, every: 5m, command: ["echo", "hi"], jitter: 30s}
"""
OTHER_FILE = "jobs:\n  - {name: other, every: 1h, command: 'true'}\n"


class Workspace:
    """One directory for the whole test: the jobs file at a fixed path, a seed home, a scratch home."""

    def __init__(self, root: Path, cli: Cli) -> None:
        self.root = root
        self.cli = cli
        self.file = root / "jobs.yaml"
        self.seed = root / "seed"
        self.home = root / "home"
        self.file.write_text(SEED_FILE)
        (root / "other.yaml").write_text(OTHER_FILE)
        for args in (("apply", "-f", str(self.file)), ("apply", "-f", str(root / "other.yaml")),
                     ("add", "hand", "--every", "1h", "--", "true"),
                     ("add", "held", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--paused", "--", "true")):
            result = self.run_in(self.seed, *args)
            assert result.code == 0, result

    def run_in(self, home: Path, *args: str) -> Any:
        return self.cli("--home", str(home), *args)

    def run(self, *args: str) -> Any:
        return self.run_in(self.home, *args)

    def reset(self) -> bytes:
        """A fresh copy of the seed home; returns the store's bytes."""
        if self.home.exists():
            shutil.rmtree(self.home)
        shutil.copytree(self.seed, self.home)
        self.home.chmod(0o700)
        return self.store_bytes()

    def store_bytes(self) -> bytes:
        return (self.home / "jobs.json").read_bytes()


@pytest.fixture
def workspace(cli: Cli) -> Iterator[Workspace]:
    with tempfile.TemporaryDirectory(prefix="cronctl-fuzz-") as root:
        yield Workspace(Path(root), cli)


def assert_no_crash(result: Any) -> None:
    assert result.code in (0, 1, 2), result
    assert "Traceback" not in result.err, result.err
    assert "internal error" not in result.err, result.err


# --- generated job files --------------------------------------------------------------------

DURATIONS = ["30s", "5m", "1h30m", "2d", "500ms", "1.5s", "0", 0, "10ms", "-1m", "1x", "30s1m", 30, 1.5,
             "36500d", "36501d", "0.0001s", ""]
PLAUSIBLE: dict[str, list[Any]] = {
    "name": ["backup", "tick", "hand", "other", "held", "fresh", "a", "x-1.y_z", "Bad Name", "", "-x", "a" * 65,
             "off", 12, None],
    "cron": ["0 3 * * *", "*/15 * * * *", "@daily", "@reboot", "0 0 30 2 *", "61 * * * *", "* * *",
             "0 3 * * mon-fri", "* * * * * *", "0 0 29 2 *", "*/0 * * * *", 5, None],
    "every": DURATIONS + [None],
    "at": ["2030-01-01T00:00:00+01:00", "2030-01-01T09:00:00", "2030-01-01", "2026-03-29T02:30:00",
           "not a time", "9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", None, 20300101],
    "timezone": ["UTC", "Europe/Berlin", "America/New_York", "Mars/Base", "", "../etc/passwd", "/etc/localtime",
                 "utc", None, 1],
    "command": ["true", "echo hi | wc -c", ["echo", "hi"], "", "  ", [], [""], ["a", 1], {"a": 1}, None,
                "echo \x00"],
    "cwd": ["/tmp", "relative/dir", "", "~", None, 5, "/tmp/\x00"],
    "env": [{"A": "1"}, {"A": 1, "B": True}, {"CRONCTL_JOB": "x"}, {"1A": "x"}, {"A": None}, {"A": [1]},
            {"": "x"}, [], "A=1", None],
    "timeout": DURATIONS, "kill_grace": DURATIONS, "starting_deadline": DURATIONS + [None],
    "retry_delay": DURATIONS, "jitter": DURATIONS, "grace": DURATIONS + [None],
    "overlap": ["skip", "allow", "replace", "sometimes", "", None, 1],
    "catchup": ["latest", "skip", "all", None],
    "retries": [0, 2, 100, 101, -1, "3", "x", 1.5, True, None],
    "repeat": [1, 3, 0, -2, "2", None, 10**30],
    "on_failure": ["notify-send failed", ["notify", "x"], [], "", None],
    "paused": [True, False, "yes", "no", "maybe", 1, None],
}

# Values that pass on their own; a job built from them is valid unless their combination is not.
VALID: dict[str, list[Any]] = {
    "name": ["backup", "tick", "hand", "fresh", "a", "x-1.y_z", "other"],
    "cron": ["0 3 * * *", "*/15 * * * *", "@daily", "0 3 * * mon-fri", "30 2 * * *", "0 0 29 2 *"],
    "every": ["30s", "5m", "1h30m", "2d", "500ms", "1.5s"],
    "at": ["2030-01-01T00:00:00+01:00", "2030-01-01T09:00:00", "2026-03-29T02:30:00", "2020-01-01T00:00:00Z"],
    "timezone": ["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"],
    "command": ["true", "echo hi | wc -c", ["echo", "hi"], "[/x] :smile:"],
    "cwd": ["/tmp", "relative/dir", "~"],
    "env": [{"A": "1"}, {"A": 1, "B": True}, {}],
    "timeout": ["30s", "1h", 0, "0"], "kill_grace": ["10s", "0"], "starting_deadline": ["5m", None],
    "retry_delay": ["1m", "500ms"], "jitter": ["0s", "1s", "20s"], "grace": ["10m", None],
    "overlap": ["skip", "allow", "replace"], "catchup": ["latest", "skip"],
    "retries": [0, 2, 100], "repeat": [1, 3, None], "on_failure": ["notify-send failed", ["notify", "x"], None],
    "paused": [True, False, "yes"],
}


@st.composite
def nearly_valid_jobs(draw: st.DrawFn) -> dict[Any, Any]:
    """A valid job, sometimes with one field made wrong: exercises the accepting paths too."""
    kind = draw(st.sampled_from(["cron", "every", "at"]))
    entry: dict[Any, Any] = {"name": draw(st.sampled_from(VALID["name"])), kind: draw(st.sampled_from(VALID[kind])),
                             "command": draw(st.sampled_from(VALID["command"]))}
    optional = [f for f in VALID if f not in ("name", "cron", "every", "at", "command")]
    for field in draw(st.lists(st.sampled_from(optional), unique=True, max_size=4)):
        entry[field] = draw(st.sampled_from(VALID[field]))
    if draw(st.integers(0, 3)) == 0:
        field = draw(field_names)
        entry[field] = draw(field_value(field))
    return entry


garbage = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
field_names = st.sampled_from(JOB_FIELDS)


def field_value(field: str) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(PLAUSIBLE[field]), garbage) if field in PLAUSIBLE else garbage


@st.composite
def job_entries(draw: st.DrawFn) -> dict[Any, Any]:
    """Mostly plausible jobs with a few wrong fields, so the checks past the first one run too."""
    entry: dict[Any, Any] = {}
    if draw(st.integers(0, 9)):
        entry["name"] = draw(field_value("name"))
    if draw(st.integers(0, 9)):
        kind = draw(st.sampled_from(["cron", "every", "at"]))
        entry[kind] = draw(field_value(kind))
    if draw(st.integers(0, 9)):
        entry["command"] = draw(field_value("command"))
    for field in draw(st.lists(field_names, unique=True, max_size=5)):
        entry[field] = draw(field_value(field))
    for _ in range(draw(st.integers(0, 9)) // 8):
        entry[draw(st.text(max_size=10))] = draw(garbage)
    return entry


documents = st.one_of(
    st.fixed_dictionaries(
        {"jobs": st.lists(st.one_of(nearly_valid_jobs(), nearly_valid_jobs(), job_entries(), garbage), max_size=4)},
        optional={
            "defaults": st.dictionaries(st.one_of(field_names, st.text(max_size=8)),
                                        garbage, max_size=3)
            | st.builds(lambda f, v: {f: v}, field_names, st.deferred(lambda: garbage)),
            "extra": garbage,
        },
    ),
    garbage,
)

# Text YAML cannot round-trip from Python objects: syntax errors, tags, anchors, odd keys.
YAML_SNIPPETS = [
    "jobs: [\n", "jobs:\n  - {? [a, b] : 1}\n", "jobs:\n  - &a [*a]\n", "jobs: !!python/object:os.system x\n",
    "jobs:\n  - {name: a, every: 1m, command: !!binary aGVsbG8=}\n", "jobs:\n  - {name: a, name: b}\n",
    "jobs:\n  - {name: a, every: 1m, command: x, env: {A: !!binary aGVsbG8=}}\n", "\t", "%YAML 9.9\n---\n",
    "jobs:\n  - {name: a, at: 2030-01-01 10:00:00, command: x}\n", "--- a\n--- b\n", "jobs: {? {a: 1} : 2}\n",
    'jobs:\n  - {name: a, every: 1m, command: "\\udcff"}\n', "jobs:\n  - {name: a, every: 1m, command: x, 1: 2}\n",
    "jobs:\n  - {name: a, every: 1m, command: x}\n  - {name: a, every: 1m, command: x}\n",
    '"\\U10010000": 1\n', "[" * 3000 + "]" * 3000 + "\n",
    "jobs:\n  - {name: a, every: 1m, command: x, on_failure: &a [*a], env: &e {A: *e}}\n",
]


def dump(document: Any) -> str:
    return yaml.safe_dump(document, allow_unicode=True, default_flow_style=False, sort_keys=False)


valid_documents = st.fixed_dictionaries(
    {"jobs": st.lists(nearly_valid_jobs(), max_size=4, unique_by=lambda j: repr(j.get("name")))})

yaml_texts = st.one_of(
    valid_documents.map(dump),
    valid_documents.map(dump),
    documents.map(dump),
    documents.map(dump).flatmap(lambda text: st.tuples(st.just(text), st.integers(0, max(len(text) - 1, 0)),
                                                       st.text(max_size=3))
                                .map(lambda t: t[0][:t[1]] + t[2] + t[0][t[1] + 1:])),
    st.sampled_from(YAML_SNIPPETS),
    st.lists(st.sampled_from(list("jobs:name-[]{}?&*!|>'\"#\n\t %@,") + ["every", "cron", "jobs:\n  - "]),
             max_size=30).map("".join),
)


@settings(max_examples=250, **SETTINGS)
@given(text=yaml_texts, prune=st.booleans())
def test_generated_job_files_never_crash_validate_or_apply(workspace: Workspace, text: str, prune: bool) -> None:
    before = workspace.reset()
    workspace.file.write_text(text, encoding="utf-8", errors="surrogateescape")

    checked = workspace.run("validate", "-f", str(workspace.file))
    assert_no_crash(checked)
    assert workspace.store_bytes() == before

    applied = workspace.run("apply", "-f", str(workspace.file), *(["--prune"] if prune else []))
    assert_no_crash(applied)
    event(f"validate exit {checked.code}, apply exit {applied.code}")
    if applied.code != 0:
        assert workspace.store_bytes() == before
        assert applied.out == ""
        # Only a clash with another file's job can fail a file that validates.
        assert checked.code != 0 or "already defined by" in applied.err, applied.err
        return
    # validate knows no store: it refuses every past `at`; apply only one new to the store
    assert checked.code == 0 or "is in the past" in checked.err, checked.err
    after = workspace.store_bytes()
    jobs = json.loads(after)["jobs"]
    assert {"hand", "held", "other"} <= set(jobs)  # never pruned: not from this file
    again = workspace.run("apply", "-f", str(workspace.file), *(["--prune"] if prune else []))
    assert again.code == 0, again.err
    assert workspace.store_bytes() == after, "a second apply of the same file changed the store"


# --- generated argument lists ----------------------------------------------------------------

OPTION_FIELDS = {
    "--cron": "cron", "--every": "every", "--at": "at", "--timezone": "timezone", "--tz": "timezone",
    "--cwd": "cwd", "--env": None, "-e": None, "--timeout": "timeout", "--kill-grace": "kill_grace",
    "--overlap": "overlap", "--catchup": "catchup", "--starting-deadline": "starting_deadline",
    "--retries": "retries", "--retry-delay": "retry_delay", "--repeat": "repeat", "--jitter": "jitter",
    "--grace": "grace", "--on-failure": "on_failure",
}
FLAGS = ["--paused", "--not-paused", "--json"]
ENV_VALUES = ["A=1", "PGHOST=db", "A", "=x", "CRONCTL_JOB=1", "1A=x", "A=\x00", "A=b=c", ""]
UNSET_VALUES = list(JOB_FIELDS) + ["source", "state", "kill-grace", "colour", ""]
NAMES = ["backup", "tick", "hand", "other", "held", "fresh", "Bad", "", "-x", "a" * 65, "x\udcff"]


def option_value(option: str) -> st.SearchStrategy[str]:
    field = OPTION_FIELDS[option]
    pool = ENV_VALUES if field is None else [str(v) for v in PLAUSIBLE[field] if v is not None and v != ""]
    return st.one_of(st.sampled_from(pool), st.text(max_size=12))


OPTION_OF = {field: option for option, field in OPTION_FIELDS.items() if field}


@st.composite
def nearly_valid_arguments(draw: st.DrawFn, command: str) -> list[str]:
    """add/edit with values that pass on their own, sometimes plus one wrong token."""
    fresh = ["fresh", "a", "x-1.y_z", "new.job", "n0"]
    existing = ["backup", "tick", "hand", "held", "other"]
    args = [command, draw(st.sampled_from(fresh if command == "add" else existing) | st.sampled_from(fresh + existing))]
    if command == "add" or draw(st.booleans()):
        kind = draw(st.sampled_from(["cron", "every", "at"]))
        args += [OPTION_OF[kind], str(draw(st.sampled_from(VALID[kind])))]
    optional = sorted(f for f in OPTION_OF if f not in ("cron", "every", "at"))
    for field in draw(st.lists(st.sampled_from(optional), unique=True, max_size=3)):
        value = draw(st.sampled_from([v for v in VALID[field] if v is not None and not isinstance(v, (list, dict))]))
        args += [OPTION_OF[field], str(value)]
    if draw(st.booleans()):
        args += ["--env", draw(st.sampled_from(["A=1", "PGHOST=db", "A=b=c"]))]
    if command == "edit" and draw(st.booleans()):
        args += ["--unset", draw(st.sampled_from(["cwd", "env", "repeat", "grace", "timeout", "jitter"]))]
    if draw(st.booleans()):
        args.append(draw(st.sampled_from(FLAGS)))
    if draw(st.integers(0, 3)) == 0:
        option = draw(st.sampled_from(sorted(OPTION_FIELDS)))
        args += [option, draw(option_value(option))]
    if command == "add" or draw(st.booleans()):
        args += ["--", *draw(st.lists(st.sampled_from(["true", "echo hi", "[/x]", "a b"]), min_size=1, max_size=3))]
    return args


def arguments(command: str) -> st.SearchStrategy[list[str]]:
    return st.one_of(nearly_valid_arguments(command), argument_lists(command))


@st.composite
def argument_lists(draw: st.DrawFn, command: str) -> list[str]:
    args = [command, draw(st.one_of(st.sampled_from(NAMES), st.text(max_size=8)))]
    for _ in range(draw(st.integers(0, 6))):
        choice = draw(st.integers(0, 19))
        if choice < 14:
            option = draw(st.sampled_from(sorted(OPTION_FIELDS)))
            args += [option, draw(option_value(option))]
        elif choice < 17:
            args.append(draw(st.sampled_from(FLAGS)))
        elif choice < 18 and command == "edit":
            args += ["--unset", draw(st.sampled_from(UNSET_VALUES))]
        else:
            args.append(draw(st.one_of(st.text(max_size=10), st.sampled_from(["--", "-n", "--bogus", "-"]))))
    if draw(st.booleans()):
        args += ["--", *draw(st.lists(st.one_of(st.sampled_from(["true", "echo hi", "", "[/x]"]),
                                                st.text(max_size=10)), min_size=0, max_size=3))]
    return args


def check_cli_example(workspace: Workspace, args: list[str]) -> Any:
    before = workspace.reset()
    result = workspace.run(*args)
    assert_no_crash(result)
    event(f"{args[0]} exit {result.code}")
    if result.code != 0:
        assert workspace.store_bytes() == before, f"a rejected {args[0]} changed the store"
        return result
    # Accepted (or --help): whatever is in the store now, every reader can read it.
    listed = workspace.run("list", "--json")
    assert listed.code == 0, listed.err
    assert workspace.run("list").code == 0
    assert workspace.run("next").code == 0
    options = args[:args.index("--")] if "--" in args else args  # after `--` it is the job's command
    if "--json" in options and "--help" not in options and "-h" not in options:
        json.loads(result.out)
    return result


@settings(max_examples=200, **SETTINGS)
@given(args=arguments("add"))
def test_generated_add_arguments_never_crash_or_half_write(workspace: Workspace, args: list[str]) -> None:
    result = check_cli_example(workspace, args)
    if result.code == 0 and "--help" not in args and "-h" not in args:
        assert args[1] in json.loads(workspace.store_bytes())["jobs"]
        assert workspace.run("show", args[1]).code == 0


@settings(max_examples=200, **SETTINGS)
@given(args=arguments("edit"))
def test_generated_edit_arguments_never_crash_or_half_write(workspace: Workspace, args: list[str]) -> None:
    result = check_cli_example(workspace, args)
    if result.code == 0 and "--help" not in args and "-h" not in args:
        assert workspace.run("show", args[1]).code == 0


# --- the other commands that take operator input ------------------------------------------

# Real argv cannot hold NUL (C strings), so generated tokens leave it out.
argv_text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=10)
OTHER_TOKENS = ["backup", "tick", "hand", "held", "ghost", "--from", "-n", "--json", "--since", "--job", "--event",
                "--all", "--force", "-f", "--stale", "--run", "--count", "1", "0", "-1", "1000", "1001",
                "2026-03-29T02:30:00", "9999-12-31T23:00:00", "0001-01-01T00:00:00+01:00", "1h", "36500d",
                "36501d", "run.*", "job.", "", "--"]
# No lone surrogates (undecodable argv bytes) here: click prints its own usage errors, and the
# strict stream pytest captures with would fail where a real stderr (backslashreplace) does not.


@settings(max_examples=200, **SETTINGS)
@given(command=st.sampled_from(["next", "audit", "show", "list", "pause", "resume", "remove", "history", "logs",
                                "status", "validate"]),
       args=st.lists(st.one_of(st.sampled_from(OTHER_TOKENS), argv_text), max_size=5))
def test_generated_arguments_of_the_other_commands_never_crash(
    workspace: Workspace, command: str, args: list[str]
) -> None:
    before = workspace.reset()
    result = workspace.run(command, *args)
    assert result.code in (0, 1, 2, 3), result
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    event(f"{command} exit {result.code}")
    if result.code != 0 or command not in ("pause", "resume", "remove"):
        assert workspace.store_bytes() == before
