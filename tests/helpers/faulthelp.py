"""Shared pieces of the fault-injection tests."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def strace_or_skip(not_installed: str) -> str:
    """strace's path, able to trace here; else the test is skipped (`not_installed` says what
    a missing strace costs the test)."""
    path = shutil.which("strace")
    if path is None:
        pytest.skip(not_installed)
    probe = subprocess.run([path, "-o", "/dev/null", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here (ptrace not permitted?): {probe.stderr.strip()}")
    return path
