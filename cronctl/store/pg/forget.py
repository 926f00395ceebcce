"""Forgetting loops (SPEC §9): a silent loop whose runs are all reclaimed, after `--forget-after`
(at once when it was on the forgetting loop's own host and is certainly dead); a decommissioned
host at once, by `cronctl store forget-host HOST`.

A loop that stopped beating stays in `status` as `unreachable` (stale: exit 3) so that
nobody misses it; once nothing of it is left to reclaim and it has been silent for the
`--forget-after` time, the live loops forget it (`cluster.loop_forgotten`), and `status`
is clean again. A run is the loop's while it is claimed or running under its owner
(host, boot and pid): such a loop is kept until another loop has reclaimed the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from cronctl.errors import ConflictError, CronctlError
from cronctl.models import AuditEvent
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.connect import Connection
from cronctl.store.pg.loops import UNREACHABLE_AFTER_S, LoopIdentity
from cronctl.store.pg.transaction import short_transaction

DEFAULT_FORGET_AFTER_S = 15 * 60.0

# Nothing of the loop left to reclaim: no live run claimed under its owner.
_NOTHING_LIVE = """NOT EXISTS (SELECT 1 FROM cronctl_runs AS r
                    WHERE r.live AND r.host_id = l.host_id AND r.boot_id = l.boot_id
                      AND r.claim -> 'owner' ->> 'pid' = l.pid::text)"""
_RETURNING = "RETURNING l.host_id, l.pid, extract(epoch FROM clock_timestamp() - l.heartbeat_at), l.stopped_at IS NULL"


@dataclass(frozen=True)
class Forgotten:
    host: str
    pid: int
    silent_s: float
    was_live: bool  # False: it had stopped cleanly (forget-host forgets those too)

    def details(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "silent_s": round(self.silent_s, 1)}


def forget_silent(conn: Connection, after_s: float, loop_id: UUID | None, host_id: str | None) -> list[Forgotten]:
    """Forget every loop silent for `after_s` whose runs were all reclaimed; audited by the
    forgetting loop (`loop_id`, `host_id`) in the same transaction."""
    with short_transaction(conn):
        rows = conn.execute(
            "DELETE FROM cronctl_loops AS l WHERE l.stopped_at IS NULL"
            " AND l.heartbeat_at < clock_timestamp() - %s * interval '1 second'"
            f" AND {_NOTHING_LIVE} {_RETURNING}", (after_s,)).fetchall()
        gone = [Forgotten(host, int(pid), float(silent), bool(live)) for host, pid, silent, live in rows]
        write_audit(conn, [AuditRow(AuditEvent.CLUSTER_LOOP_FORGOTTEN, reason="silent",
                                    details={**f.details(), "forget_after_s": after_s}) for f in gone],
                    loop_id, host_id)
    return gone


def forget_dead_here(conn: Connection, me: LoopIdentity, alive: Callable[[int, float], bool]) -> list[Forgotten]:
    """Forget, at once, the silent loops of this host that are certainly dead: of an earlier
    boot, or of this boot with a pid (and start time) no longer alive, once their runs are all
    reclaimed (a dead owner here is reclaimed within a tick). Without this a loop restarted on
    its host (systemd's Restart=always after an OOM kill) would leave its predecessor listed
    `unreachable` for the whole `--forget-after`."""
    with short_transaction(conn):
        rows = conn.execute(
            "SELECT loop_id, boot_id, pid, pid_start FROM cronctl_loops WHERE host_id = %s AND stopped_at IS NULL"
            " AND loop_id <> %s AND heartbeat_at < clock_timestamp() - %s * interval '1 second'",
            (me.host_id, me.loop_id, UNREACHABLE_AFTER_S)).fetchall()
        dead = [loop_id for loop_id, boot, pid, start in rows
                if boot != me.boot_id or not alive(int(pid), float(start))]
        if not dead:
            return []
        gone = conn.execute(f"DELETE FROM cronctl_loops AS l WHERE l.loop_id = ANY(%s) AND {_NOTHING_LIVE} "
                            f"{_RETURNING}", (dead,)).fetchall()
        forgotten = [Forgotten(host, int(pid), float(silent), bool(live)) for host, pid, silent, live in gone]
        write_audit(conn, [AuditRow(AuditEvent.CLUSTER_LOOP_FORGOTTEN, reason="owner_dead", details=f.details())
                           for f in forgotten], me.loop_id, me.host_id)
    return forgotten


@dataclass(frozen=True)
class HostForgotten:
    loops: list[Forgotten]
    live_runs: int  # runs of the host still claimed or running: reclaimed once their leases run out


def forget_host(conn: Connection, host: str, by: str) -> HostForgotten:
    """Forget every loop of `host` at once; refused while one of them still beats."""
    with short_transaction(conn):
        rows = conn.execute("SELECT pid, extract(epoch FROM clock_timestamp() - heartbeat_at), stopped_at IS NULL"
                            " FROM cronctl_loops WHERE host_id = %s ORDER BY heartbeat_at DESC", (host,)).fetchall()
        if not rows:
            known = [h for (h,) in conn.execute("SELECT DISTINCT host_id FROM cronctl_loops ORDER BY 1")]
            raise CronctlError(f"store forget-host: no loop of host '{host}' is remembered "
                               f"(hosts: {', '.join(known) or 'none'})")
        beating = [(int(pid), float(age)) for pid, age, live in rows if live and float(age) <= UNREACHABLE_AFTER_S]
        if beating:
            pid, age = beating[0]
            raise ConflictError(f"store forget-host: host '{host}' has a live loop (pid {pid}, heartbeat "
                                f"{age:.1f}s ago); stop it there first")
        gone = conn.execute(f"DELETE FROM cronctl_loops AS l WHERE l.host_id = %s {_RETURNING}", (host,)).fetchall()
        forgotten = [Forgotten(h, int(pid), float(silent), bool(live)) for h, pid, silent, live in gone]
        found = conn.execute("SELECT count(*) FROM cronctl_runs WHERE host_id = %s AND live",
                             (host,)).fetchone()
        write_audit(conn, [AuditRow(AuditEvent.CLUSTER_LOOP_FORGOTTEN, reason="operator",
                                    details={**f.details(), "by": by}) for f in forgotten], None, None)
    return HostForgotten(forgotten, int(found[0]) if found else 0)
