"""Names that are strings resolve: the fast path's command bodies ("module.function" under
cronctl.cli, looked up only when a command line takes the fast path) and every module
path a docstring or comment points a reader to (`cli/fastpath.py`, `bench/x.py`...). A
renamed or never-written module is found here, not by a reader (cli/argv.py was named
in four docstrings and never existed)."""

from __future__ import annotations

import re
from importlib import import_module
from pathlib import Path

import pytest

from cronctl.cli import fastpath

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "cronctl"
# A path as the code names one: a package folder (or bench/tests/docs) and a file in it.
NAMED_PATH = re.compile(r"(?<![\w./-])((?:cli|loop|ops|store|jobs|proc|interop|schedule|bench|tests|docs)"
                        r"/[\w/]+\.(?:py|md))")


@pytest.mark.parametrize("command", sorted(fastpath.COMMANDS))
def test_every_fast_path_body_resolves_to_a_function(command: str) -> None:
    module, function = fastpath.COMMANDS[command].body.split(".")
    body = getattr(import_module(f"cronctl.cli.{module}"), function, None)
    assert callable(body), f"fast path '{command}' names cronctl.cli.{module}.{function}, which does not exist"


def test_every_module_path_named_in_the_code_exists() -> None:
    missing = []
    for source in sorted(PACKAGE.rglob("*.py")):
        for match in NAMED_PATH.finditer(source.read_text()):
            named = match.group(1)
            if not (PACKAGE / named).exists() and not (REPO / named).exists():
                missing.append(f"{source.relative_to(REPO)}: {named}")
    assert missing == [], "paths named that do not exist:\n" + "\n".join(missing)


def test_one_message_for_a_job_that_is_not_defined(cli) -> None:  # type: ignore[no-untyped-def]
    """Every command says it with errors.no_job_named; no module spells it by hand."""
    from cronctl.errors import JobNotFoundError, no_job_named

    assert str(no_job_named("nightly")) == "no job named 'nightly' (see 'cronctl list')"
    assert str(no_job_named("a", "b")) == "no job named 'a', 'b' (see 'cronctl list')"
    assert isinstance(no_job_named("a"), JobNotFoundError)
    by_hand = [str(path.relative_to(REPO)) for path in sorted(PACKAGE.rglob("*.py"))
               if "no job named" in path.read_text() and path.name != "errors.py"]
    assert by_hand == []
    for argv in (["show", "ghost"], ["history", "ghost"], ["logs", "ghost"], ["pause", "ghost"],
                 ["remove", "ghost"], ["force-run", "ghost"], ["kill", "ghost"]):
        result = cli(*argv)
        said = "cronctl: error: no job named 'ghost' (see 'cronctl list')"
        assert (result.code, result.err.strip()) == (1, said), argv


def test_the_shared_translation_depends_on_no_one_export_format() -> None:
    """interop/translate.py serves crontab, systemd and Kubernetes alike: it imports none of
    their modules (the systemd-only oncalendar.py included)."""
    import ast

    tree = ast.parse((PACKAGE / "interop" / "translate.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    formats = {name for name in imported if name == "cronctl.interop.oncalendar"
               or name.startswith("cronctl.interop.export")}
    assert formats == set()
