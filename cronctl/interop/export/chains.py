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
    """{upstream: [dependants started by its OnSuccess=]} for the edges systemd can carry
    (only to dependants something starts: see untriggered)."""
    stranded = untriggered(specs)
    targets: dict[str, list[str]] = {}
    for spec in specs:
        if spec.after and spec.name not in stranded:
            targets.setdefault(spec.after[0], []).append(spec.name)
    return {upstream: sorted(names) for upstream, names in targets.items()}


def untriggered(specs: Sequence[JobSpec]) -> dict[str, str]:
    """{dependant: why nothing in systemd would ever start it}.

    A dependant is started only by OnSuccess= of its one upstream, which must itself be
    exported and started (by its timer, or by its own upstream): a multi-upstream or
    `requires: done` edge strands it, and so does a stranded or unexported upstream.
    """
    by_name = {spec.name: spec for spec in specs}
    stranded: dict[str, str] = {}

    def judge(name: str, seen: frozenset[str]) -> str | None:
        spec = by_name[name]
        if not spec.after:
            return None
        if name in stranded or name in seen:
            return stranded.get(name, "its upstreams form a cycle")
        if not maps_to_on_success(spec):
            why = chain_note(spec, "systemd")
        elif spec.after[0] not in by_name:
            why = (f"after {spec.after[0]}: not translatable: {spec.after[0]} is not in this export, "
                   "so nothing starts it")
        elif judge(spec.after[0], seen | {name}) is not None:
            why = f"after {spec.after[0]}: not translatable: nothing starts {spec.after[0]} in systemd, so nothing " \
                  "starts this one"
        else:
            return None
        stranded[name] = why
        return why

    for name in by_name:
        judge(name, frozenset())
    return stranded


def chain_note(spec: JobSpec, engine: str) -> str:
    """Why a dependant is not translated by `engine`."""
    edge = f"after {', '.join(spec.after)} (requires {spec.requires.value})"
    if engine == "systemd":
        why = ("OnSuccess= starts a unit after one unit succeeded; systemd has no unit that waits for several "
               "upstreams or for any outcome")
        return f"{edge}: not translatable: {why}; no unit written, start it by hand or from its upstreams"
    return (f"{edge}: not translatable: {engine} has no job chains (no trigger from another job's end); "
            "nothing written for it, run it from its upstream's command or a workflow engine")
