"""The pages of `cronctl run --http` that need the use cases: /metrics and /healthz.

/metrics is the very text of `cronctl metrics`; /healthz is `cronctl status --stale`'s
judgement (ops.status), not a second copy of it. Both are read-only and run on the
endpoint's thread with a Context of their own, so they never share the tick thread's
store caches.
"""

from __future__ import annotations

import json
from typing import Any

from cronctl.context import Context
from cronctl.loop.endpoint import Reply, Route
from cronctl.ops.job_metrics import CONTENT_TYPE
from cronctl.ops.metrics import metrics_for
from cronctl.ops.status import StatusReport, status, status_json


def probe_routes(loop_ctx: Context) -> dict[str, Route]:
    """On the loop's store (on PostgreSQL /healthz judges every loop), through a Context of their own."""
    ctx = loop_ctx.reopen()
    return {
        "/metrics": lambda: Reply(200, metrics_for(ctx), CONTENT_TYPE),
        "/healthz": lambda: healthz(status(ctx)),
    }


def healthz(report: StatusReport) -> Reply:
    """200 while the loop is ok and nothing is stale, else 503.

    One shape whatever the state: `ok`, `loop` (always the loop's object, as `status --json`
    has it), `jobs` (how many) and `stale` (the stale jobs as `status --stale --json` lists
    them; [] when ok).
    """
    body = healthz_body(report)
    return Reply(200 if body["ok"] else 503, (json.dumps(body) + "\n").encode())


def healthz_body(report: StatusReport) -> dict[str, Any]:
    healthy = report.loop.state == "ok" and not report.stale
    return {"ok": healthy, "loop": report.loop.to_dict(), "jobs": len(report.jobs),
            "stale": status_json(report, only_stale=True)["jobs"]}
