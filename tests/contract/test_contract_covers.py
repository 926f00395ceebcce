"""The contract suite is the stores' specification: every method of `LeaseStore`, of
`Definitions` and of the `DefinitionsEdit` it hands over is called by at least one of its
tests, so a method added to an interface without a test that runs it on every backend
fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from cronctl.store.definitions import Definitions, DefinitionsEdit
from cronctl.store.leases import LeaseStore

HERE = Path(__file__).parent


def interface_methods(interface: type) -> set[str]:
    """The public methods and properties an interface (a Protocol) declares."""
    return {name for name, member in vars(interface).items()
            if not name.startswith("_") and (inspect.isfunction(member) or isinstance(member, property))}


def used(pattern: str) -> set[str]:
    source = "\n".join(path.read_text() for path in sorted(HERE.glob("*.py")))
    return set(re.findall(pattern, source))


def test_every_lease_store_method_is_run_by_the_contract_suite() -> None:
    methods = interface_methods(LeaseStore)
    assert len(methods) > 20  # the Protocol's methods were found
    assert sorted(methods - used(r"\.leases\.(\w+)\(")) == []


def test_every_definitions_method_is_run_by_the_contract_suite() -> None:
    methods = interface_methods(Definitions)
    assert methods >= {"get", "names", "editing"}  # the Protocol's methods were found
    assert sorted(methods - used(r"\.definitions\.(\w+)\(")) == []


def test_every_method_of_an_open_definitions_edit_is_run_by_the_contract_suite() -> None:
    methods = interface_methods(DefinitionsEdit)
    assert methods >= {"entries", "add", "replace", "remove"}  # the Protocol's members were found
    # The edit a test holds is named `edit` (`with ctx.definitions.editing(...) as edit:`).
    assert sorted(methods - used(r"\bedit\.(\w+)\b")) == []
