"""Notifications owed (SPEC §12): written into the job's state by the very write that takes
the decision they report, so a loop killed after the decision still delivers them.

    state["notify_owed"] = {KEY: {"event", "target", "body", "owed_at", "attempts",
                                  "next_at", "lease_by", "lease_until", "last_error"}}

KEY is the idempotency key: the same on every try, sent as the `Idempotency-Key` header.
Delivery (loop/notify_worker.py) takes a lease on an entry (`take`), sends it outside any
store write, then settles it (`settle`): dropped when sent, rescheduled with backoff when
it failed, dropped and counted in state["notify_abandoned"] once `give_up` has passed.
A lease that ran out (its loop died mid-send) lets any loop take the entry again: at
least once, and on PostgreSQL once per key among live loops.

state["alerts"] remembers what was already said: `failing` (a failure was notified, so a
success is a `recovery`) and `stale_since` (the job was reported stale; cleared when it is
healthy again). Both exist only for jobs with targets. Pure functions of the document:
both stores run them inside their own transactions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from cronctl.jobs.chain_broken import broken_chain
from cronctl.jobs.notifyfields import target_label
from cronctl.models import FAILED_STATUSES, AuditEvent, RunStatus
from cronctl.timefmt import from_iso, to_iso

OWED = "notify_owed"
ALERTS = "alerts"
ABANDONED = "notify_abandoned"
OUTPUT_BYTES = 4096
# The healthchecks.io protocol: what each event appends to the ping URL.
PING_SUFFIX = {"start": "/start", "success": "", "failure": "/fail"}
# Events owed in one write, in the order they happened (delivery keeps it per job).
EVENT_ORDER = {"start": 0, "success": 1, "failure": 1, "recovery": 2, "output": 3, "stale": 4, "chain_failed": 5}


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff from `first` doubling to `cap`, until `give_up` after the notification was owed."""

    first: float = 10.0
    cap: float = 3600.0
    give_up: float = 86400.0

    def delay(self, attempts: int) -> float:
        return float(min(self.cap, self.first * 2.0 ** max(0, attempts - 1)))


@dataclass(frozen=True)
class Item:
    job: str
    key: str
    entry: dict[str, Any]


@dataclass(frozen=True)
class Result:
    """One try: `sent`, `retry` (timeout, refused, 5xx) or `abandon` (refused for good, e.g. a 4xx)."""

    job: str
    key: str
    outcome: str
    detail: str = ""
    code: int | None = None


def _host() -> str:
    import socket  # here: force-run and a loop's start import this module, few ask the host

    return socket.gethostname()


def targets_of(entry: dict[str, Any] | None) -> list[dict[str, Any]]:
    notify = (entry or {}).get("notify")
    return [t for t in notify if isinstance(t, dict)] if isinstance(notify, list) else []


# --- owing: inside the decision's write --------------------------------------------------------


def after_start(doc: dict[str, Any], job: str, claim: dict[str, Any], now: datetime) -> None:
    """A run's child starts (mark_dispatched): `start`."""
    entry = doc["jobs"].get(job)
    if not targets_of(entry):
        return
    body = _run_body(job, claim, None, now)
    body.update(status="running", text=f"cronctl: {job} started (run {claim['run_id']}) on {body['host']}")
    _owe(entry, "start", body, now)


def after_finish(doc: dict[str, Any], job: str, claim: dict[str, Any], record: dict[str, Any], output: str,
                 now: datetime) -> None:
    """A run's terminal write: success / failure / recovery / output / stale. (A chain's end
    owes chain_failed where it is decided, whatever write that is: `chain_failed`.)"""
    entry = doc["jobs"].get(job)
    if not targets_of(entry):
        return
    assert entry is not None
    state, status = entry["state"], record["status"]
    alerts = state.setdefault(ALERTS, {})
    body = _run_body(job, claim, record, now, output)
    if status == RunStatus.SUCCESS.value:
        _owe(entry, "success", body, now)
        if alerts.pop("failing", None):
            _owe(entry, "recovery", body, now)
        alerts.pop("stale_since", None)
    elif status in FAILED_STATUSES or status == RunStatus.NOT_STARTED.value or _failed_its_chain(state, record):
        _owe(entry, "failure", body, now)
        alerts["failing"] = True
        if _now_stale(entry, record) and not alerts.get("stale_since"):
            alerts["stale_since"] = to_iso(now)
            _owe(entry, "stale", {**body, "text": _stale_text(job, entry, record)}, now)
    if output.strip() and record.get("started_at") is not None:
        _owe(entry, "output", body, now)
    if not alerts:
        state.pop(ALERTS, None)


def _failed_its_chain(state: dict[str, Any], record: dict[str, Any]) -> bool:
    """A killed chain node failed its chain (jobs/chain_broken.py): a failure, unlike a lone kill."""
    mark = broken_chain(state)
    return mark is not None and mark.get("run_id") == record["run_id"]


def _now_stale(entry: dict[str, Any], record: dict[str, Any]) -> bool:
    """Failures in a row reached alert_after, or the job cannot start at all (blocked_config)."""
    if record.get("reason") == "blocked_config":
        return True
    limit = entry.get("alert_after") or 1
    streak = entry["state"].get("consecutive_failures") or 0
    return isinstance(streak, int) and isinstance(limit, int) and streak >= limit


def _stale_text(job: str, entry: dict[str, Any], record: dict[str, Any]) -> str:
    if record.get("reason") == "blocked_config":
        return f"cronctl: {job} is stale: it cannot start ({record.get('output_tail') or 'blocked_config'})"
    streak = entry["state"].get("consecutive_failures")
    return f"cronctl: {job} is stale: {streak} failed run(s) in a row (alert_after {entry.get('alert_after') or 1})"


def owe_stale(doc: dict[str, Any], job: str, state_word: str, reason: str, now: datetime) -> bool:
    """The loop's health pass found `job` late or wedged: `stale`, once until it is healthy again."""
    entry = doc["jobs"].get(job)
    if not targets_of(entry):
        return False
    assert entry is not None
    alerts = entry["state"].setdefault(ALERTS, {})
    if alerts.get("stale_since"):
        return False
    alerts["stale_since"] = to_iso(now)
    state = entry["state"]
    body = {**_empty_body(job, now), "status": state_word, "reason": reason,
            "run_id": state.get("last_run_id")}
    body["text"] = f"cronctl: {job} is {state_word}: {reason}"
    _owe(entry, "stale", body, now, key=f"cronctl-{job}-stale-{to_iso(now)}")
    return True


def healthy_again(doc: dict[str, Any], job: str) -> None:
    """The health pass found `job` no longer stale: a later episode is news again."""
    entry = doc["jobs"].get(job)
    alerts = ((entry or {}).get("state") or {}).get(ALERTS)
    if isinstance(alerts, dict) and alerts.pop("stale_since", None) and not alerts:
        entry["state"].pop(ALERTS, None)


def chain_failed(doc: dict[str, Any], details: dict[str, Any], now: datetime) -> None:
    """A chain ended `failed` (the details of its chain.finished row): `chain_failed` to its
    root's targets, in the write that ended it (a finish, or a claim write that skipped its
    last nodes). One key per chain and target."""
    root = str(details.get("root"))
    entry = doc["jobs"].get(root)
    if details.get("outcome") != "failed" or not targets_of(entry):
        return
    assert entry is not None
    body = {**_empty_body(root, now), "chain": details.get("chain"), "status": "failed",
            "reason": ", ".join(f"{job} {status}" for job, status in sorted(details.get("statuses", {}).items())
                                if status != RunStatus.SUCCESS.value)}
    body["text"] = f"cronctl: chain {details.get('chain')} of {root} failed ({body['reason']})"
    _owe(entry, "chain_failed", body, now, key=f"cronctl-{details.get('chain')}-chain_failed")


def _owe(entry: dict[str, Any], event: str, body: dict[str, Any], now: datetime, key: str | None = None) -> None:
    """One owed entry per target that wants `event`; the key says run (or episode), event and target."""
    owed = None
    base = key or f"cronctl-{body.get('run_id')}-{event}"
    for index, target in enumerate(targets_of(entry), start=1):
        if event not in (target.get("on") or []) or ("ping" in target and event not in PING_SUFFIX):
            continue
        if owed is None:
            owed = entry["state"].setdefault(OWED, {})
        ikey = f"{base}-{index}"
        if ikey in owed:
            continue
        payload = {**body, "event": event, "idempotency_key": ikey}
        if "text" not in body:
            payload["text"] = _text(event, payload)
        owed[ikey] = {"event": event, "target": dict(target), "body": payload, "owed_at": to_iso(now),
                      "attempts": 0, "next_at": to_iso(now), "lease_by": None, "lease_until": None,
                      "last_error": None}


def _empty_body(job: str, now: datetime) -> dict[str, Any]:
    return {"job": job, "run_id": None, "chain": None, "status": None, "reason": None, "exit_code": None,
            "started_at": None, "ended_at": to_iso(now), "duration_s": None, "host": _host(), "output": ""}


def _run_body(job: str, claim: dict[str, Any], record: dict[str, Any] | None, now: datetime,
              output: str = "") -> dict[str, Any]:
    body = _empty_body(job, now)
    body.update(run_id=claim["run_id"], chain=claim.get("chain"), started_at=claim.get("started_at"))
    if record is None:
        body["ended_at"] = None
        return body
    body.update(status=record["status"], reason=record.get("reason"), exit_code=record.get("exit_code"),
                started_at=record.get("started_at"), ended_at=record.get("ended_at"),
                duration_s=record.get("duration"),
                output=output.encode("utf-8", "replace")[-OUTPUT_BYTES:].decode("utf-8", "ignore"))
    return body


def _text(event: str, body: dict[str, Any]) -> str:
    """The one line a chat tool shows."""
    words = {"success": "succeeded", "failure": "FAILED", "recovery": "recovered", "output": "printed output"}
    what = words.get(event, event)
    detail = [f"status {body.get('status')}"]
    if body.get("exit_code") is not None:
        detail.append(f"exit {body['exit_code']}")
    if body.get("reason"):
        detail.append(str(body["reason"]))
    if body.get("duration_s") is not None:
        detail.append(f"{body['duration_s']}s")
    return f"cronctl: {body['job']} {what} ({', '.join(detail)}) run {body.get('run_id')} on {body.get('host')}"


# --- delivering: short writes of their own --------------------------------------------------------


def owed_items(doc: dict[str, Any], now: datetime, leases: bool = True) -> list[Item]:
    """Entries due for a try now and not leased by a live try. `leases=False`: the JSON store,
    where one loop runs per home, so a lease found there was its dead predecessor's."""
    found: list[Item] = []
    now_iso = to_iso(now) or ""
    for job, entry in doc["jobs"].items():
        owed = (entry.get("state") or {}).get(OWED)
        if not owed:
            continue
        for key, item in owed.items():
            free = not leases or str(item.get("lease_until") or "") <= now_iso
            if str(item.get("next_at") or "") <= now_iso and free:
                found.append(Item(job, key, item))
    # In the order they were owed (the store sorts keys): a ping's /start before its /fail.
    found.sort(key=lambda i: (str(i.entry.get("owed_at") or ""), EVENT_ORDER.get(str(i.entry.get("event")), 9)))
    return found


def take(doc: dict[str, Any], wanted: list[tuple[str, str]], by: str, now: datetime, lease_s: float,
         leases: bool = True) -> list[Item]:
    """Lease the wanted entries still owed and free (`leases=False`: see owed_items); returns copies."""
    taken: list[Item] = []
    now_iso, until = to_iso(now) or "", to_iso(now + timedelta(seconds=lease_s))
    for job, key in wanted:
        item = (((doc["jobs"].get(job) or {}).get("state") or {}).get(OWED) or {}).get(key)
        if item is None or (leases and str(item.get("lease_until") or "") > now_iso):
            continue
        item["lease_by"], item["lease_until"] = by, until
        taken.append(Item(job, key, dict(item)))
    return taken


Row = tuple[AuditEvent, dict[str, Any]]


def settle(doc: dict[str, Any], results: list[Result], now: datetime, policy: RetryPolicy) -> list[Row]:
    """Record each try's outcome; returns its audit rows (`notify.sent`, `notify.failed`, `notify.abandoned`)."""
    rows: list[Row] = []
    for result in results:
        entry = doc["jobs"].get(result.job)
        owed = ((entry or {}).get("state") or {}).get(OWED) or {}
        item = owed.get(result.key)
        if item is None:
            continue  # the job was removed meanwhile, or another loop settled it
        item["attempts"] = int(item.get("attempts") or 0) + 1
        details = _row(result, item)
        _count(doc, "sent" if result.outcome == "sent" else "failed")
        if result.outcome == "sent":
            rows.append((AuditEvent.NOTIFY_SENT, details))
            _drop(entry, result.key)
            continue
        rows.append((AuditEvent.NOTIFY_FAILED, details))
        owed_at = from_iso(item.get("owed_at")) or now
        next_at = now + timedelta(seconds=policy.delay(item["attempts"]))
        if result.outcome == "abandon" or (next_at - owed_at).total_seconds() > policy.give_up:
            rows.append((AuditEvent.NOTIFY_ABANDONED, {**details, "owed_at": item.get("owed_at")}))
            _abandon(entry, result, item, now)
            _count(doc, "abandoned")
            continue
        details["next_try_at"] = to_iso(next_at)
        item.update(next_at=to_iso(next_at), lease_by=None, lease_until=None, last_error=result.detail)
    return rows


def _row(result: Result, item: dict[str, Any]) -> dict[str, Any]:
    body = item.get("body") or {}
    return {"job": result.job, "run_id": body.get("run_id"), "notification": item.get("event"),
            "target": target_label(item.get("target") or {}), "key": result.key, "attempt": item["attempts"],
            "code": result.code, **({"error": result.detail} if result.detail else {})}


def _count(doc: dict[str, Any], outcome: str) -> None:
    """Delivery counters for `cronctl metrics`, persisted like the lateness histogram."""
    totals = doc.setdefault("metrics", {}).setdefault("notifications", {})
    totals[outcome] = int(totals.get(outcome) or 0) + 1


def _drop(entry: dict[str, Any], key: str) -> None:
    owed = entry["state"].get(OWED) or {}
    owed.pop(key, None)
    if not owed:
        entry["state"].pop(OWED, None)


def _abandon(entry: dict[str, Any], result: Result, item: dict[str, Any], now: datetime) -> None:
    _drop(entry, result.key)
    given_up = entry["state"].setdefault(ABANDONED, {"count": 0})
    given_up["count"] = int(given_up.get("count") or 0) + 1
    given_up["last"] = {"event": item.get("event"), "target": target_label(item.get("target") or {}),
                        "key": result.key, "at": to_iso(now), "error": result.detail, "attempts": item["attempts"]}
