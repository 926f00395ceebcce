"""The alerting fields of a job (SPEC §12), `notify` and `alert_after`, checked one job at a time.

A `notify` entry is one target and the events it wants:

    {url: https://hooks.example.com/x, on: [failure, recovery, stale]}   # webhook, POST JSON
    {ping: https://hc-ping.com/UUID}                                      # healthchecks.io: /start, base, /fail
    {email: ops@example.com, on: [output]}                                # $CRONCTL_SMTP or sendmail

Stored normalised (every entry has its `on`), so the loop never re-derives the defaults.
`${VAR}` stays as written: it is expanded from the loop's environment when sent.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from cronctl.errors import CronctlError

EVENTS = ("start", "success", "failure", "recovery", "output", "stale", "chain_failed")
DEFAULT_EVENTS = ("failure", "recovery", "stale")
# The healthchecks.io protocol says when a run starts, succeeds and fails: nothing else.
PING_EVENTS = ("start", "success", "failure")
KINDS = ("url", "ping", "email")
_VAR = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
# An address, or a local mailbox name as cron's MAILTO=root has it (sendmail delivers it).
_EMAIL = re.compile(r"^[^@\s,]+(@[^@\s,]+)?$")


class NotifyFieldProblem(CronctlError):
    """One bad `notify` / `alert_after` value; build_spec adds where it was found."""


def check_notify(value: Any) -> tuple[dict[str, Any], ...]:
    """A list of targets (one mapping is taken as a list of one); `[]` turns notifications off."""
    items = [value] if isinstance(value, dict) else value
    if isinstance(items, str):
        items = [{"url": items}]
    if not isinstance(items, (list, tuple)):
        raise NotifyFieldProblem(f"expected a list of targets like [{{url: https://...}}], got {value!r}")
    return tuple(_check_target(index, item) for index, item in enumerate(items, start=1))


def _check_target(index: int, item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise NotifyFieldProblem(f"target {index}: expected a mapping with one of url, ping, email; got {item!r}")
    if True in item and "on" not in item:
        # YAML 1.1 reads an unquoted `on:` key as the boolean true.
        item = {("on" if key is True else key): value for key, value in item.items()}
    kinds = [key for key in KINDS if key in item]
    unknown = sorted(str(key) for key in item if key not in (*KINDS, "on"))
    if unknown:
        raise NotifyFieldProblem(f"target {index}: unknown key {unknown[0]!r} (allowed: url, ping, email, on)")
    if len(kinds) != 1:
        raise NotifyFieldProblem(f"target {index}: give exactly one of url, ping, email (found "
                                 f"{', '.join(kinds) or 'none'})")
    kind = kinds[0]
    address = item[kind]
    if not isinstance(address, str) or not address.strip():
        raise NotifyFieldProblem(f"target {index}: {kind}: expected text, got {address!r}")
    _check_address(index, kind, address.strip())
    events = _check_events(index, kind, item.get("on"))
    return {kind: address.strip(), "on": list(events)}


def _check_address(index: int, kind: str, address: str) -> None:
    if _VAR.fullmatch(address):
        return  # wholly from the environment: judged when sent
    if kind == "email":
        if not _EMAIL.match(_VAR.sub("x", address)):
            raise NotifyFieldProblem(f"target {index}: email: {address!r} is not an address like "
                                     "ops@example.com (or a local user)")
        return
    if not re.match(r"^https?://[^/\s]+", _VAR.sub("x", address), re.IGNORECASE):
        raise NotifyFieldProblem(f"target {index}: {kind}: {mask(address)!r} is not an http:// or https:// URL")


def _check_events(index: int, kind: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return PING_EVENTS if kind == "ping" else DEFAULT_EVENTS
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names:
        raise NotifyFieldProblem(f"target {index}: on: expected a list of events ({', '.join(EVENTS)})")
    seen: list[str] = []
    for name in names:
        if name not in EVENTS:
            raise NotifyFieldProblem(f"target {index}: on: {name!r} is not an event (one of {', '.join(EVENTS)})")
        if name not in seen:
            seen.append(name)
    return tuple(seen)


def parse_events(text: str) -> list[str]:
    """`--notify-on failure,recovery` -> the events, each checked."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    return list(_check_events(1, "url", names))


def check_alert_after(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if not (isinstance(value, str) and value.strip().isdigit()):
            raise NotifyFieldProblem(f"expected a whole number of failed runs, got {value!r}")
    number = int(value)
    if number < 1:
        raise NotifyFieldProblem(f"must be at least 1, got {number}")
    return number


def mask(address: str) -> str:
    """A URL with its path and query hidden (they carry tokens); an address as it is."""
    match = re.match(r"^([a-z][a-z0-9+.-]*://)([^/?#@]*@)?([^/?#]*)(.*)$", address, re.IGNORECASE)
    if match is None:
        return address
    scheme, _userinfo, host, rest = match.groups()
    return f"{scheme}{host}{'/***' if rest not in ('', '/') else rest}"


def target_label(target: dict[str, Any]) -> str:
    """`url https://hooks.example.com/***`: what outputs show of a target."""
    for kind in KINDS:
        if kind in target:
            return f"{kind} {mask(str(target[kind]))}"
    return "?"


NOTIFY_CHECKS: dict[str, Callable[[Any], Any]] = {"notify": check_notify, "alert_after": check_alert_after}


def masked_targets(targets: Any) -> Any:
    """A job's `notify` as outputs show it: each URL with its path and query masked."""
    if not isinstance(targets, list):
        return targets
    return [{key: mask(value) if key in ("url", "ping") and isinstance(value, str) else value
             for key, value in target.items()} if isinstance(target, dict) else target for target in targets]


def mask_entry(data: dict[str, Any]) -> dict[str, Any]:
    """A job's --json document with every notification URL masked (its targets, and the
    targets of the notifications it owes); the store keeps them whole for the loop."""
    if "notify" in data:
        data["notify"] = masked_targets(data["notify"])
    owed = (data.get("state") or {}).get("notify_owed")
    if isinstance(owed, dict):
        data["state"] = {**data["state"], "notify_owed": {
            key: {**item, "target": (masked_targets([item.get("target")]) or [None])[0]}
            if isinstance(item, dict) else item for key, item in owed.items()}}
    return data
