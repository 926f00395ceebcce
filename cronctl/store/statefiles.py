"""Small state files beside the store (heartbeat, control requests and replies).

Each is written whole to a temp file and renamed, so a reader sees the old or the new
content, never half of one; a file that does not parse reads as absent.
"""

from __future__ import annotations

import json
import os
from contextlib import suppress
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: dict[str, Any], tmp_dir: Path | None = None) -> None:
    """Small state files (heartbeat, control replies): temp + rename, readers never see half a file.

    tmp_dir: where the temp file is written (same file system), when not beside `path`: the
    loop's heartbeat writes its temp file elsewhere so that, in the home directory, only the
    rename is seen (the store watch wakes once per rewrite, not twice). When that fails (no
    such directory, another file system) the write is made as without it, and its error, if
    any, is the one raised."""
    text = (json.dumps(data, sort_keys=True) + "\n").encode()
    if tmp_dir is not None:
        elsewhere = tmp_dir / f".{path.name}.{os.getpid()}.tmp"
        try:
            _write_then_rename(elsewhere, text, path)
            return
        except OSError:  # no such directory, another file system...: the write beside `path` says
            with suppress(OSError):
                os.unlink(elsewhere)
    _write_then_rename(path.with_name(f".{path.name}.{os.getpid()}.tmp"), text, path)


def _write_then_rename(tmp: Path, text: bytes, path: Path) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, text)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_file_durably(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Put `data` in place of `path` so that a crash or a kill at any moment leaves the old
    file or the new one, never an empty or half-written one: a temp file in the same
    directory, fsync, rename over the target, fsync the directory (the rename itself
    must survive a power loss). Raises OSError; the temp file never stays behind."""
    remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)  # the umask must not narrow what readers (node_exporter) may open
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_directory(path.parent)


def remove_stale_temps(path: Path) -> None:
    """Remove the temp files of `path` that a killed writer left (`.NAME.PID.tmp` whose PID
    is gone): SIGKILL gives the writer no chance to, and nothing else ever would."""
    prefix, suffix = f".{path.name}.", ".tmp"
    try:
        names = [n for n in os.listdir(path.parent) if n.startswith(prefix) and n.endswith(suffix)]
    except OSError:
        return
    for name in names:
        pid_text = name[len(prefix):-len(suffix)]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _pid_alive(int(pid_text)):
            continue
        with suppress(OSError):
            os.unlink(path.parent / name)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable: it is only once the directory entry is on disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
