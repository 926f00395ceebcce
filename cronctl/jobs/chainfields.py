"""The two fields a chain adds to a job, `after` and `requires`, checked one job at a time.

The rules over several jobs (cycles, unknown names, roots) are in graph.py; this module
plugs into jobfile.build_spec so YAML entries and `add`/`edit` options share the checks.
"""

from __future__ import annotations

from typing import Any, Callable

from cronctl.errors import CronctlError
from cronctl.models import CHAIN_FIELDS, NAME_RE, Requires

__all__ = ["CHAIN_CHECKS", "CHAIN_FIELDS", "chain_combo_problems"]

class ChainFieldProblem(CronctlError):
    """One bad `after` / `requires` value; build_spec adds where it was found."""


def check_after(value: Any) -> tuple[str, ...]:
    """One name or a list of names, each given once."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names:
        raise ChainFieldProblem(f"expected a job name or a list of job names, got {value!r}")
    seen: list[str] = []
    for name in names:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise ChainFieldProblem(f"{name!r} is not a job name")
        if name in seen:
            raise ChainFieldProblem(f"'{name}' is listed twice")
        seen.append(name)
    return tuple(seen)


def check_requires(value: Any) -> Requires:
    try:
        return Requires(value)
    except ValueError:
        raise ChainFieldProblem(f"{value!r} is not one of success | done") from None


CHAIN_CHECKS: dict[str, Callable[[Any], Any]] = {"after": check_after, "requires": check_requires}


def chain_combo_problems(raw: dict[str, Any], where: Callable[[str], str]) -> list[str]:
    """`requires` means nothing without `after`.

    Schedule-only fields (timezone, jitter, ...) are allowed on a dependant and unused:
    a file's `defaults` give them to every job, dependants included.
    """
    if raw.get("after") in (None, []) and raw.get("requires") is not None:
        return [f"{where('requires')}: only applies to a job with 'after'"]
    return []
