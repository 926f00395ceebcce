"""Job chains (`after:`) in other engines: what maps, and the words for what does not.

Only systemd has a trigger between units: a single-upstream `requires: success` edge
becomes `OnSuccess=` on the upstream's service (systemd 249 or later). Every other edge,
and every chain in crontab or Kubernetes, is listed as not translatable, never dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from cronctl.models import JobSpec, Requires


def maps_to_on_success(spec: JobSpec) -> bool:
    return len(spec.after) == 1 and spec.requires is Requires.SUCCESS


def on_success_targets(specs: Sequence[JobSpec]) -> dict[str, list[str]]:
    """{upstream: [dependants started by its OnSuccess=]} for the edges systemd can carry."""
    targets: dict[str, list[str]] = {}
    for spec in specs:
        if spec.after and maps_to_on_success(spec):
            targets.setdefault(spec.after[0], []).append(spec.name)
    return {upstream: sorted(names) for upstream, names in targets.items()}


def chain_note(spec: JobSpec, engine: str) -> str:
    """Why a dependant is not translated by `engine`."""
    edge = f"after {', '.join(spec.after)} (requires {spec.requires.value})"
    if engine == "systemd":
        why = ("OnSuccess= starts a unit after one unit succeeded; systemd has no unit that waits for several "
               "upstreams or for any outcome")
        return f"{edge}: not translatable: {why}; no timer written, start it by hand or from its upstreams"
    return (f"{edge}: not translatable: {engine} has no job chains (no trigger from another job's end); "
            "nothing written for it, run it from its upstream's command or a workflow engine")
