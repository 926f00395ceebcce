"""`force-run` of a chain (SPEC §10): `force-run ROOT` starts a chain as its schedule would,
`force-run NODE --chain` starts one at NODE; with `--wait` it waits for the chain's end.
Through the running loop when there is one (the chain is recorded, the loop claims it),
else in this process (loop/chain_run.py), as a plain `force-run` runs a job here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cronctl.context import Context
from cronctl.errors import CronctlError
from cronctl.ops.chains import ChainReport, chain_report, force_chain
from cronctl.store import chain_doc, history

# A loop gone for this long while --wait waits: the chain will not end before one runs again.
LOOP_GONE_GRACE = 10.0
# How long --wait gives the last records to follow the chain's end (written just after it).
RECORDS_GRACE = 5.0


@dataclass(frozen=True)
class ChainRun:
    chain_id: str
    jobs: list[str]
    via_loop: bool
    report: ChainReport | None  # once it ended: waited for, or run here

    @property
    def exit_code(self) -> int:
        """0 when every node succeeded, else the first failed node's (upstreams first)."""
        from cronctl.ops.runs import exit_code_of

        if self.report is None:
            return 1
        if self.report.outcome == "success":
            return 0
        by_run = {r["run_id"]: r for r in self.report.runs}
        for node in self.report.nodes:
            if node.status not in ("success", chain_doc.SKIPPED):
                return exit_code_of(by_run.get(node.run_id or "")) or 1
        return 1


def starts_chain(ctx: Context, name: str) -> bool:
    """Whether `force-run NAME` starts a chain: a job with no `after` that has dependants."""
    if ctx.store.chain_free():
        return False
    doc = ctx.store.read()
    entry = doc["jobs"].get(name)
    return entry is not None and not entry.get("after") and chain_doc.has_dependants(doc, name)


def force_chain_run(ctx: Context, name: str, wait: bool) -> ChainRun:
    forced = force_chain(ctx, name)
    if not forced.loop_running:
        run_chain_here(ctx, forced.chain_id)
        return ChainRun(forced.chain_id, forced.jobs, False, settled_report(ctx, forced.chain_id))
    if not wait:
        return ChainRun(forced.chain_id, forced.jobs, True, None)
    wait_for_chain(ctx, forced.chain_id)
    return ChainRun(forced.chain_id, forced.jobs, True, settled_report(ctx, forced.chain_id))


def run_chain_here(ctx: Context, chain_id: str) -> None:
    """No loop runs: this process claims, supervises and records the chain's runs."""
    from cronctl.loop.chain_run import drive_chain
    from cronctl.loop.engine import build_engine
    from cronctl.loop.on_failure import ON_FAILURE_TIMEOUT
    from cronctl.ops.runs import cli_owner

    engine = build_engine(ctx, cli_owner())
    engine.supervisor.start()
    try:
        engine.recover_pending()
        drive_chain(engine, chain_id)
        engine.supervisor.wait_idle(ON_FAILURE_TIMEOUT + 10.0)  # on_failure hooks end by their own timeout
    finally:
        engine.supervisor.shutdown("shutdown", wait=30)
        engine.record_results()
        engine.drop_delivered()


def wait_for_chain(ctx: Context, chain_id: str) -> None:
    """Until the running loop has ended the chain; refuses to wait forever on a dead loop."""

    gone_since: float | None = None
    while not _ended(ctx, chain_id):
        if _loop_alive(ctx):
            gone_since = None
        elif gone_since is None:
            gone_since = ctx.clock.monotonic()
        elif ctx.clock.monotonic() - gone_since > LOOP_GONE_GRACE:
            raise CronctlError(f"the loop stopped while chain {chain_id} ran; it goes on when 'cronctl run' "
                               f"runs (see 'cronctl history --chain {chain_id}')")
        ctx.clock.sleep(0.05)


def _loop_alive(ctx: Context) -> bool:
    """A loop that will go on with the chain: this home's, or on PostgreSQL any live one."""
    from cronctl.loop.heartbeat import loop_alive

    if ctx.cluster is not None:
        from cronctl.ops.cluster import live_loops

        return bool(live_loops(ctx))
    return loop_alive(ctx.paths, ctx.clock.now()) is not None


def _ended(ctx: Context, chain_id: str) -> bool:
    chain = (ctx.store.read().get("chains") or {}).get(chain_id)
    return chain is None or chain.get("ended_at") is not None


def settled_report(ctx: Context, chain_id: str) -> ChainReport:
    """The chain's report once every run it names has its record (appended just after the end)."""
    deadline = ctx.clock.monotonic() + RECORDS_GRACE
    while True:
        report = chain_report(ctx, chain_id)
        if ctx.clock.monotonic() > deadline or not _missing_records(ctx, report):
            return report
        ctx.clock.sleep(0.05)


def _missing_records(ctx: Context, report: ChainReport) -> list[Any]:
    recorded = {r["run_id"] for r in report.runs}
    return [node for node in report.nodes
            if node.run_id and node.run_id not in recorded and node.status not in chain_doc.OPEN
            and history.find_record(ctx.paths, node.job, node.run_id) is None]
