"""The chain rules of jobs/graph.py applied where definitions change: validate, apply, add,
edit, remove. Each check raises with one message per problem, naming file, job and field."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cronctl.errors import ConfigError, ConflictError
from cronctl.jobs.graph import Where, graph_problems, orphaned_by
from cronctl.jobs.state import JobView
from cronctl.models import JobSpec


def stored_specs(doc: dict[str, Any]) -> dict[str, JobSpec]:
    return {name: JobView.from_entry(entry).spec for name, entry in doc["jobs"].items()}


def upstreams(specs: Iterable[JobSpec]) -> set[str]:
    """The jobs `specs` run after: with every job in a chain, what the rules judge a write by
    (`DefinitionsEdit.linked_specs`)."""
    return {name for spec in specs for name in spec.after}


def check_file(path: str, specs: list[JobSpec]) -> None:
    """`validate`: the file's jobs on their own form a valid graph."""
    _raise_problems({spec.name: spec for spec in specs}, _file_where(path), None)


def check_apply(stored: dict[str, JobSpec], path: str, specs: list[JobSpec], pruned: Iterable[str],
                force: bool) -> None:
    """`apply`: the store (`stored`: its jobs in chains, at least) as it will be after the
    apply; only this file's jobs are blamed.

    A prune that would leave a dependant after a removed job is refused unless `force`.
    """
    before = {**stored, **{spec.name: spec for spec in specs}}
    gone = set(pruned)
    refuse_orphans(before, gone, force, "apply --prune")
    after = {name: spec for name, spec in before.items() if name not in gone}
    _raise_problems(after, _file_where(path), [spec.name for spec in specs])


def check_cli(stored: dict[str, JobSpec], spec: JobSpec) -> None:
    """`add` / `edit` of one job: the store (`stored`: its jobs in chains, at least) with this job as given."""
    specs = {**stored, spec.name: spec}
    _raise_problems(specs, lambda job, field: f"job '{job}': --{field}", [spec.name, *_dependants(specs, spec)])


def refuse_orphans(specs: dict[str, JobSpec], removed: set[str], force: bool, action: str) -> None:
    """Removing an upstream leaves its dependants waiting for a job that never runs."""
    orphans = orphaned_by(removed, specs)
    if not orphans or force:
        return
    which = "; ".join(f"{', '.join(children)} run(s) after {upstream}" for upstream, children in orphans.items())
    raise ConflictError(f"{action} would orphan dependant job(s): {which}; "
                        f"remove or edit them first, or add --force")


def _dependants(specs: dict[str, JobSpec], spec: JobSpec) -> list[str]:
    """An edit that moves a job to another root can break the jobs after it: blame them too."""
    return [name for name, other in specs.items() if spec.name in other.after]


def _file_where(path: str) -> Where:
    return lambda job, field: f"{path}: job '{job}': field '{field}'"


def _raise_problems(specs: dict[str, JobSpec], where: Where, judged: list[str] | None) -> None:
    problems = graph_problems(specs, where, judged)
    if problems:
        raise ConfigError(problems)
