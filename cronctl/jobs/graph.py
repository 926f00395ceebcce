"""The rules of job chains over a set of definitions (SPEC §10): pure, no store, no clock.

A job with `after:` is a dependant; a job without is a root when something depends on it.
The graph must be acyclic, name only known jobs, and every dependant must descend from
exactly one root, so a chain (one fire of one root) decides every job it can reach.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from cronctl.models import JobSpec

# where(job, field) -> "file: job 'x': field 'after'" (or the CLI option it came from)
Where = Callable[[str, str], str]


def dependants_of(name: str, specs: Mapping[str, JobSpec]) -> list[str]:
    """The jobs directly `after` `name`, by name."""
    return sorted(other for other, spec in specs.items() if name in spec.after)


def descendants_of(name: str, specs: Mapping[str, JobSpec]) -> list[str]:
    """Every job reachable downstream of `name` (not itself), upstreams before dependants."""
    seen: set[str] = set()
    frontier = [name]
    while frontier:
        current = frontier.pop()
        for child in dependants_of(current, specs):
            if child not in seen:
                seen.add(child)
                frontier.append(child)
    return topological([n for n in specs if n in seen], specs)


def topological(names: Iterable[str], specs: Mapping[str, JobSpec]) -> list[str]:
    """`names` ordered so every upstream (within `names`) comes before its dependants."""
    wanted = sorted(set(names))
    placed: list[str] = []
    done: set[str] = set()

    def place(node: str, path: set[str]) -> None:
        if node in done or node in path:
            return
        for upstream in sorted(specs[node].after if node in specs else ()):
            if upstream in wanted:
                place(upstream, path | {node})
        done.add(node)
        placed.append(node)

    for node in wanted:
        place(node, set())
    return placed


def roots_of(name: str, specs: Mapping[str, JobSpec]) -> set[str]:
    """The scheduled jobs `name` descends from (itself, if it has no `after`)."""
    roots: set[str] = set()
    seen: set[str] = set()
    frontier = [name]
    while frontier:
        current = frontier.pop()
        if current in seen or current not in specs:
            continue
        seen.add(current)
        spec = specs[current]
        if not spec.after:
            roots.add(current)
        frontier.extend(spec.after)
    return roots


def find_cycle(specs: Mapping[str, JobSpec]) -> list[str] | None:
    """One cycle as a closed path [a, b, ..., a] (a is `after` the last but one), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for upstream in sorted(specs[node].after):
            if upstream not in specs:
                continue
            if state.get(upstream) == 1:
                return path[path.index(upstream):] + [upstream]
            if upstream not in state:
                found = visit(upstream, path + [upstream])
                if found:
                    return found
        state[node] = 2
        return None

    for node in sorted(specs):
        if node not in state:
            found = visit(node, [node])
            if found:
                return found
    return None


def graph_problems(specs: Mapping[str, JobSpec], where: Where, judged: Iterable[str] | None = None) -> list[str]:
    """One message per broken rule; only jobs in `judged` (default: all) are blamed.

    `judged` lets `apply` of one file or `add` of one job refuse its own mistakes
    without blaming jobs some other file owns.
    """
    blamed = set(specs if judged is None else judged)
    problems: list[str] = []
    for name in sorted(blamed):
        spec = specs.get(name)
        if spec is None or not spec.after:
            continue
        unknown = [up for up in spec.after if up not in specs]
        if name in spec.after:
            problems.append(f"{where(name, 'after')}: a job cannot run after itself")
        elif unknown:
            problems.append(f"{where(name, 'after')}: unknown upstream job(s) {', '.join(unknown)}")
    cycle = find_cycle(specs)
    if cycle and len(cycle) > 2 and blamed.intersection(cycle):
        # Printed the way the data flows: each job runs after the one before it.
        flow = " -> ".join(reversed(cycle))
        first = next(n for n in reversed(cycle) if n in blamed)
        problems.append(f"{where(first, 'after')}: the jobs form a cycle: {flow}")
        return problems
    for name in sorted(blamed):
        spec = specs.get(name)
        if spec is None or not spec.after:
            continue
        roots = roots_of(name, specs)
        if len(roots) > 1:
            problems.append(f"{where(name, 'after')}: its upstreams descend from different roots "
                            f"({', '.join(sorted(roots))}); a chain starts at one scheduled job")
    return problems


def orphaned_by(removed: Iterable[str], specs: Mapping[str, JobSpec]) -> dict[str, list[str]]:
    """Dependants that would be left `after` a removed job: {removed upstream: [dependants]}."""
    gone = set(removed)
    out: dict[str, list[str]] = {}
    for name in sorted(gone):
        kept = [child for child in dependants_of(name, specs) if child not in gone]
        if kept:
            out[name] = kept
    return out


def tree_lines(root: str, specs: Mapping[str, JobSpec], label: Callable[[str], str]) -> list[str]:
    """The graph below `root` as an indented text tree; a job with several upstreams
    is drawn under each of them, marked as seen again after the first time."""
    lines = [label(root)]
    drawn: set[str] = {root}

    def walk(node: str, prefix: str) -> None:
        children = dependants_of(node, specs)
        for index, child in enumerate(children):
            last = index == len(children) - 1
            branch = "└── " if last else "├── "
            if child in drawn:
                lines.append(f"{prefix}{branch}{child} (see above)")
                continue
            drawn.add(child)
            lines.append(f"{prefix}{branch}{label(child)}")
            walk(child, prefix + ("    " if last else "│   "))

    walk(root, "")
    return lines
