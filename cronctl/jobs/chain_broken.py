"""A chain node whose own run failed its chain (SPEC §10 "a failed chain is visible").

A chain fails as soon as one of its nodes ends in anything but a success (a skip is the
chain's decision, not the node's end). The node that did so is `failing`, counted by its
own `alert_after`, whatever ended its run: an error, a timeout, a loss healed by a
reclaim, a spawn that failed, and also a kill or a run that never started, which alone
(outside a chain) are no failure (SPEC §12). Its dependants are skipped and read `ok`.

The finish write that records the node's end leaves a mark in its job's state:

    state["chain_failed"] = {"chain": ID, "run_id": RUN, "status": "killed"}

The mark speaks for the job's last run only: a later run of the job (a success, another
chain's skip) makes it stale, so nothing has to clear it. Pure over the job's state.
"""

from __future__ import annotations

from typing import Any

from cronctl.models import FAILED_STATUSES, RunStatus

MARK = "chain_failed"
# A node's own end that fails its chain.
BREAKING = frozenset(status.value for status in RunStatus) - {RunStatus.SUCCESS.value, RunStatus.SKIPPED.value}


def broken_chain(state: dict[str, Any]) -> dict[str, Any] | None:
    """The mark, when the job's last run is the one that failed its chain."""
    mark = state.get(MARK)
    if isinstance(mark, dict) and mark.get("run_id") is not None and mark.get("run_id") == state.get("last_run_id"):
        return mark
    return None


def failed_last(state: dict[str, Any]) -> bool:
    """Whether the job's last run failed: a failed status, or a run that failed its chain."""
    return state.get("last_status") in FAILED_STATUSES or broken_chain(state) is not None


def chain_words(state: dict[str, Any]) -> str:
    """`; chain ID failed here` for a run that failed its chain, else ''."""
    mark = broken_chain(state)
    if mark is None:
        return ""
    return f"; chain {mark.get('chain')} failed with it (the jobs after it were skipped)"
