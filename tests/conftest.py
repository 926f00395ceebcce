from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.receivers import Receiver

REPO = Path(__file__).resolve().parent.parent

# No terminal size from outside: tests that want one set COLUMNS themselves (monkeypatch).
# pytest imports readline at start-up (_pytest/capture.py, _readline_workaround), and GNU
# readline exports COLUMNS=80 and LINES=24 into the process's C environment. os.environ
# does not show them, but every child started with the inherited environment gets them:
# pytest-xdist's workers do, so in a worker `cronctl list` and `status` fitted their
# tables to 80 columns and the tests expecting whole piped rows failed (only under -n).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)
    os.unsetenv(_name)

# Children must be able to get Ctrl-C: tests send SIGINT to `cronctl run`, `logs -f` and
# `status --watch` and expect a clean exit. A suite started in the background by a shell
# without job control (`nohup bash .ci/run &`) has SIGINT ignored, every child inherits
# that, and Python then never installs its KeyboardInterrupt handler: those children
# ignored the tests' SIGINT, the tests timed out and the children were left running.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a handler resets to default at exec


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every cronctl path of the test lives under tmp_path."""
    path = tmp_path / "home"
    monkeypatch.setenv("CRONCTL_HOME", str(path))
    monkeypatch.setenv("NO_COLOR", "1")
    return path


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self):  # type: ignore[no-untyped-def]
        return json.loads(self.out)


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    """Run cronctl in-process through its real entry point (error mapping included)."""
    from cronctl.cli.main import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def cronctl_bin() -> list[str]:
    """The installed console script next to this interpreter, else `python -m cronctl`."""
    candidate = Path(sys.executable).with_name("cronctl")
    if candidate.exists():
        return [str(candidate)]
    return [sys.executable, "-m", "cronctl"]


def subprocess_env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["CRONCTL_HOME"] = str(home)
    env["NO_COLOR"] = "1"
    return env


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver answering 200 (tests/helpers/receivers.py), stopped after the test."""
    server = Receiver()
    yield server
    server.stop()


# The runner tests' fixtures (tests/helpers/runnerhelp.py has the pieces).
@pytest.fixture
def results():  # type: ignore[no-untyped-def]
    from tests.helpers.runnerhelp import Results

    return Results()


@pytest.fixture
def supervisor(results):  # type: ignore[no-untyped-def]
    from cronctl.proc.supervisor import Supervisor

    sup = Supervisor(on_result=results)
    sup.start()
    yield sup
    sup.shutdown(wait=30)
