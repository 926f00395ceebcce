"""The contract suite is the stores' specification: every method of `LeaseStore` is called
by at least one of its tests, so a method added to the interface without a test that
runs it on every backend fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from cronctl.store.leases import LeaseStore

HERE = Path(__file__).parent


def interface_methods() -> set[str]:
    return {name for name, member in vars(LeaseStore).items()
            if not name.startswith("_") and inspect.isfunction(member)}


def methods_called() -> set[str]:
    source = "\n".join(path.read_text() for path in sorted(HERE.glob("*.py")))
    return set(re.findall(r"\.leases\.(\w+)\(", source))


def test_every_lease_store_method_is_run_by_the_contract_suite() -> None:
    methods = interface_methods()
    assert len(methods) > 20  # the Protocol's methods were found
    assert sorted(methods - methods_called()) == []
