"""Real writers killed at every step of a write, and real disks that fail (EIO, ENOSPC)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.helpers.faulthelp import strace_or_skip
from tests.helpers.store_helpers import STORE_ERROR_EXIT, run_worker, seed, temp_files

from cronctl.errors import StoreWriteError
from cronctl.paths import Paths, open_home
from cronctl.store.jsonstore import CRASH_ENV, WRITE_STEPS, Store, serialize


@pytest.fixture
def paths(tmp_path: Path) -> Paths:
    return open_home(tmp_path / "home")


def seed_twice(paths: Paths) -> tuple[bytes, bytes]:
    """Two writes, so that there is a backup: returns (backup bytes, store bytes)."""
    first = seed(paths, {"a": {"value": "first"}})
    current = seed(paths, {"a": {"value": "old"}})
    assert paths.store_backup.read_bytes() == first
    return first, current


# --- crash points ---------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("step", WRITE_STEPS)
def test_a_writer_killed_at_any_step_leaves_the_old_or_the_new_document(paths: Paths, step: str) -> None:
    first, old = seed_twice(paths)
    result = run_worker("set", paths.home, "a", "new", env={CRASH_ENV: step})
    assert result.returncode == -signal.SIGKILL, result.stderr

    store = Store(paths)
    doc = store.read()
    renamed = WRITE_STEPS.index(step) > WRITE_STEPS.index("rename")
    if renamed:
        assert doc["jobs"]["a"] == {"value": "new"} and doc["rev"] == 3
    else:
        assert paths.store.read_bytes() == old
    # The backup moves to the old document at the backup step, in one piece.
    backed_up = WRITE_STEPS.index(step) > WRITE_STEPS.index("backup")
    assert paths.store_backup.read_bytes() == (old if backed_up else first)

    leftovers = temp_files(paths)
    if step == "open" or renamed:
        assert leftovers == []
    else:
        assert len(leftovers) == 1 and leftovers[0].startswith("jobs.json.tmp.")

    with store.transaction() as doc:
        doc["jobs"]["b"] = {"value": "after the crash"}
    assert store.read()["rev"] == doc["rev"] == (4 if renamed else 3)
    assert temp_files(paths) == []


# --- EIO from the kernel, injected with strace ------------------------------------------


@pytest.fixture
def strace() -> str:
    return strace_or_skip("strace is not installed, so fsync cannot be made to fail with EIO")


def fsync_fails(strace: str, which: int) -> list[str]:
    # trace=fsync, not trace=none: strace 6.1 only injects into syscalls it traces,
    # so "-e trace=none -e inject=..." silently injects nothing. The trace goes to /dev/null.
    return [strace, "-f", "-qq", "-o", "/dev/null", "-e", "trace=fsync", "-e", f"inject=fsync:error=EIO:when={which}"]


@pytest.mark.slow
def test_eio_on_the_temp_file_fsync_fails_the_write_and_keeps_the_store_byte_identical(
    paths: Paths, strace: str
) -> None:
    first, old = seed_twice(paths)
    result = run_worker("set", paths.home, "a", "new", prefix=fsync_fails(strace, 1))
    assert result.returncode == STORE_ERROR_EXIT, result.stderr
    assert f"cannot write store {paths.store}: Input/output error (at step fsync)" in result.stderr
    assert "the store was not changed" in result.stderr
    assert paths.store.read_bytes() == old
    assert paths.store_backup.read_bytes() == first
    assert temp_files(paths) == []


@pytest.mark.slow
def test_eio_on_the_directory_fsync_reports_unknown_durability_with_the_new_document_in_place(
    paths: Paths, strace: str
) -> None:
    _, old = seed_twice(paths)
    result = run_worker("set", paths.home, "a", "new", prefix=fsync_fails(strace, 2))
    assert result.returncode == STORE_ERROR_EXIT, result.stderr
    assert "could not flush its directory" in result.stderr
    assert "Input/output error" in result.stderr
    assert "in place but may not survive" in result.stderr
    assert Store(paths).read()["jobs"]["a"] == {"value": "new"}
    assert paths.store_backup.read_bytes() == old
    assert temp_files(paths) == []


def test_eio_injected_in_process_at_fsync_keeps_the_store_byte_identical(paths: Paths) -> None:
    _, old = seed_twice(paths)

    def fault(step: str) -> None:
        if step == "fsync":
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    with pytest.raises(StoreWriteError, match=r"Input/output error.*the store was not changed"):
        with Store(paths, fault=fault).transaction() as doc:
            doc["jobs"]["a"] = {"value": "new"}
    assert paths.store.read_bytes() == old
    assert temp_files(paths) == []


# --- ENOSPC on a real, full filesystem ----------------------------------------------------


@pytest.fixture
def tiny_home(tmp_path: Path) -> Iterator[Paths]:
    """A home on its own 64 KiB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield open_home(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(directory: Path) -> Path:
    """Write a file until the filesystem is full; returns it so the space can be given back."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


@pytest.mark.slow
def test_a_full_disk_fails_the_write_and_keeps_the_old_store(tiny_home: Paths) -> None:
    _, old = seed_twice(tiny_home)
    filler = fill(tiny_home.home)
    store = Store(tiny_home)
    with pytest.raises(StoreWriteError) as caught:
        with store.transaction() as doc:
            doc["jobs"]["big"] = {"value": "x" * 10_000}
    message = str(caught.value)
    assert str(tiny_home.store) in message
    assert "No space left on device" in message
    assert "the store was not changed" in message
    assert tiny_home.store.read_bytes() == old
    assert json.loads(old) == store.read()
    assert temp_files(tiny_home) == []

    filler.unlink()
    with store.transaction() as doc:
        doc["jobs"]["big"] = {"value": "x" * 10_000}
    assert tiny_home.store.read_bytes() == serialize(store.read())
    assert store.read()["rev"] == 3
