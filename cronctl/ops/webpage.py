"""The dashboard's page (SPEC §14): one HTML document, its script and its style sheet.

The three files are package data (cronctl/ops/dashboard/), read once when the loop
starts serving, so the page works offline: nothing is fetched from anywhere but this
endpoint. Every answer forbids inline script and every other origin
(Content-Security-Policy), so even a job name that slipped past the page's escaping
could not run. `/jobs/NAME` is the same page: its script shows that job.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cronctl.context import Context
from cronctl.loop.endpoint import Handler, Reply, Request
from cronctl.ops.webactions import action_handler
from cronctl.ops.webapi import WebApi

STATIC = Path(__file__).parent / "dashboard"
POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8"}


def page_replies(actions: bool) -> dict[str, Reply]:
    """Each file as an answer; the HTML says whether the loop has a token (the page then shows buttons)."""
    replies: dict[str, Reply] = {}
    for name in ("index.html", "app.js", "app.css"):
        path = STATIC / name
        body = path.read_bytes()
        if name == "index.html":
            body = body.replace(b"{{actions}}", b"on" if actions else b"off")
        replies[name] = Reply(200, body, _TYPES[path.suffix], (("Content-Security-Policy", POLICY),))
    return replies


def dashboard_handlers(ctx: Context, actions: bool) -> dict[str, Handler]:
    """`/`, `/jobs/NAME`, `/assets/...` and the JSON API, on a Context of their own."""
    replies = page_replies(actions)
    api = WebApi(ctx.reopen())

    def page(request: Request) -> Reply:
        return replies["index.html"]

    def asset(request: Request) -> Reply:
        reply = replies.get(request.path[len("/assets/"):])
        return reply if reply is not None and not request.path.endswith(".html") else Reply(
            404, b'{"error": "no such asset"}\n')

    return {"/": page, "/jobs/": page, "/assets/": asset, **api.handlers()}


def dashboard_actions(ctx: Context, token: str | None) -> Handler:
    return action_handler(ctx.reopen, token)


def dashboard_hooks(ctx: Context, token: str | None) -> tuple[Callable[[], dict[str, Handler]], Callable[[], Handler]]:
    """What `run_loop` hands the loop for its --http endpoint: the pages and API, and the actions."""
    return (lambda: dashboard_handlers(ctx, token is not None)), (lambda: dashboard_actions(ctx, token))
