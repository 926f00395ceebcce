"""What `history --chain ID` and `force-run --chain --wait` print of a chain (SPEC §10):
every node in graph order with its runs, skipped nodes included, then the chain's outcome."""

from __future__ import annotations

from typing import Any

from cronctl.cli import render


def chain_history_view(report: dict[str, Any]) -> None:
    """The runs as `history` prints them; a node with no run yet gets a line of its own."""
    recorded = {str(r["job"]) for r in report["runs"]}
    rows = list(report["runs"])
    for node in report["nodes"]:
        if node["job"] not in recorded:
            rows.append({"job": node["job"], "run_id": node.get("run_id") or "-", "status": node["status"],
                         "reason": node.get("reason")})
    order = {node["job"]: index for index, node in enumerate(report["nodes"])}
    rows.sort(key=lambda r: order.get(r["job"], len(order)))  # stable: each node's runs keep their order
    render.history_table(rows)
    render.say(outcome_line(report))


def outcome_line(report: dict[str, Any]) -> str:
    chain = report["chain"]
    if report.get("outcome") is not None:
        return f"chain {chain}: {report['outcome']} (ended {report.get('ended_at')})"
    if report.get("root") is None:
        return f"chain {chain}: its outcome is no longer kept (the store keeps the last chains only)"
    return f"chain {chain}: in progress"


def node_outcomes(report: dict[str, Any]) -> list[str]:
    """One line per node: `force-run --chain --wait` says how each ended."""
    lines = []
    for node in report["nodes"]:
        why = f" ({node['reason']}: {node['upstream']})" if node.get("upstream") else (
            f" ({node['reason']})" if node.get("reason") else "")
        lines.append(f"  {node['job']:<16} {node['status']}{why}")
    return lines
