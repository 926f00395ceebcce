"""Who a loop is across hosts (SPEC §9): host id and boot id, each overridable by the environment.

The pid check of an owner is valid only when both match this machine: a pid of another
host or of an earlier boot says nothing about a process here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from cronctl.errors import StoreError

HOST_ID_ENV = "CRONCTL_HOST_ID"
BOOT_ID_ENV = "CRONCTL_BOOT_ID"
MACHINE_ID_PATH = Path("/etc/machine-id")
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def host_id(env: Mapping[str, str] = os.environ, path: Path = MACHINE_ID_PATH) -> str:
    """$CRONCTL_HOST_ID (containers sharing a machine id, tests playing hosts), else /etc/machine-id."""
    return _override_or_file(env, HOST_ID_ENV, path, "host id")


def boot_id(env: Mapping[str, str] = os.environ, path: Path = BOOT_ID_PATH) -> str:
    """$CRONCTL_BOOT_ID, else the kernel's id of this boot."""
    return _override_or_file(env, BOOT_ID_ENV, path, "boot id")


def _override_or_file(env: Mapping[str, str], variable: str, path: Path, what: str) -> str:
    override = env.get(variable, "").strip()
    if override:
        return override
    try:
        value = path.read_text().strip()
    except OSError as exc:
        raise StoreError(f"cannot read the {what} from {path} ({exc.strerror}); set ${variable}") from None
    if not value:
        raise StoreError(f"the {what} in {path} is empty; set ${variable}")
    return value
