"""`--notify TARGET` (repeatable) and `--notify-on EVENTS`: the `notify:` field of add and edit.

A target is a webhook URL, `ping+URL` (the healthchecks.io protocol), `mailto:ADDRESS`,
or `none` (no notification, not even the file's defaults). The events apply to every
target given with them; without them each kind has its default (SPEC §12).
"""

from __future__ import annotations

from typing import Any

from cronctl.errors import UsageError


def notify_field(targets: list[str] | None, events: str | None) -> list[dict[str, Any]] | None:
    """The YAML-shaped `notify` value (build_spec checks it), or None when neither option was given."""
    if not targets:
        if events:
            raise UsageError("--notify-on needs --notify TARGET: the events are those of the targets given with it")
        return None
    if [t.strip().lower() for t in targets] == ["none"]:
        if events:
            raise UsageError("--notify none turns notifications off; --notify-on has nothing to apply to")
        return []
    on = [part.strip() for part in events.split(",") if part.strip()] if events else None
    return [_target(text, on) for text in targets]


def _target(text: str, on: list[str] | None) -> dict[str, Any]:
    text = text.strip()
    if text.lower() == "none":
        raise UsageError("--notify none cannot be combined with other targets")
    if text.lower().startswith("mailto:"):
        target: dict[str, Any] = {"email": text[len("mailto:"):]}
    elif text.lower().startswith("ping+"):
        target = {"ping": text[len("ping+"):]}
    else:
        target = {"url": text}
    if on is not None:
        target["on"] = on
    return target
