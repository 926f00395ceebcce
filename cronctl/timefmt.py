"""ISO 8601 conversion at the store and audit boundary (UTC, explicit offset)."""

from __future__ import annotations

from datetime import datetime, timezone


def to_iso(when: datetime | None) -> str | None:
    if when is None:
        return None
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds")


def from_iso(text: str | None) -> datetime | None:
    if text is None:
        return None
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {text!r} has no UTC offset")
    return parsed.astimezone(timezone.utc)


def utc_ms(when: datetime) -> datetime:
    """Round to the store's millisecond precision so slots compare equal after a round trip."""
    when = when.astimezone(timezone.utc)
    return when.replace(microsecond=(when.microsecond // 1000) * 1000)
