"""The secret grep (SPEC §9, "secrets stay with cronctl"): a password planted in the loop's
environment must turn up in no output, store, log, audit row or child environment."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

PASSWORD = "S3cretPw-q7Zx"

# Every variable of the loop's environment that must not reach a child, each carrying the password
# (CRONCTL_STORE is set by the PostgreSQL test: here it would select that store).
PLANTED = {
    "PGPASSWORD": PASSWORD,
    "PGPASSFILE": f"/nonexistent/{PASSWORD}.pgpass",
    "PGSERVICE": f"svc-{PASSWORD}",
    "PGSERVICEFILE": f"/nonexistent/{PASSWORD}.conf",
    "PGSSLKEY": f"/nonexistent/{PASSWORD}.key",
    "PGUSER": f"user-{PASSWORD}",
}


def files_with(root: Path, secret: str = PASSWORD) -> list[str]:
    """Every file under `root` whose bytes hold `secret`."""
    needle = secret.encode()
    return [str(path) for path in sorted(root.rglob("*")) if path.is_file() and needle in path.read_bytes()]


def texts_with(texts: Iterable[tuple[str, str]], secret: str = PASSWORD) -> list[str]:
    """The names of the (name, text) pairs whose text holds `secret`."""
    return [name for name, text in texts if secret in text]
