"""Real-world answers to "is this claim's owner alive" and "has this lease expired"."""

from __future__ import annotations

import time
from typing import Any, Callable

from cronctl.proc.identity import ProcIdentity, boot_id, is_alive


def owner_alive(owner: dict[str, Any]) -> bool:
    """Alive only if the same boot, the same pid AND the same process start time (pid reuse safe)."""
    if not owner.get("pid") or owner.get("boot_id") != boot_id():
        return False
    return is_alive(ProcIdentity(int(owner["pid"]), float(owner.get("start_time") or 0.0)))


def lease_checker(monotonic: Callable[[], float] = time.monotonic) -> Callable[[dict[str, Any]], bool]:
    """Leases live on the system-wide monotonic clock, valid only within one boot."""
    now_mono, boot = monotonic(), boot_id()

    def expired(claim: dict[str, Any]) -> bool:
        if claim.get("boot_id") != boot:
            return True
        return float(claim.get("lease_until_mono") or 0.0) < now_mono

    return expired
