"""Sessions whose client is gone mid-protocol, ended by the loops (issue 20, SPEC §9).

PostgreSQL ends a transaction left idle past `idle_in_transaction_session_timeout` (set by
`short_transaction`), but no timer of its own runs while a session waits for the rest of
a message, for the next message of a pipeline or for the next buffer of a COPY. A network
that stalls just there and keeps the socket open (a hung middlebox, a frozen pooler)
leaves the session holding its row locks for as long as the stall lasts, and every loop
that needs those job rows waits on them: no reclaim, no finish, no claim of that job on
any host. The server cannot tell that the client gave up (it abandoned the connection at
its round-trip deadline, through the same stalled path).

So the healer of every loop ends such a session: a cronctl session of the same database
role, waiting on its client (`ClientRead`) in the same statement or idle period for longer
than a round-trip deadline, inside a transaction that holds rows (it has a transaction id)
and has been open for longer than the loop's lease plus the reclaim margin. By then
every lease such a transaction could have protected has run out and its own client gave
up on it long ago (a round trip's deadline is at most a quarter of the lease); ending it
rolls it back, as its idle timeout would have. A healthy cronctl transaction is over in
well under a second; the longest, a definitions change of 10,000 jobs, takes seconds.
Each session ended is audited `cluster.session_ended` (its pid, application_name, state,
age and statement).
"""

from __future__ import annotations

from dataclasses import dataclass

from cronctl.models import AuditEvent
from cronctl.store.pg.audit import AuditRow, write_audit
from cronctl.store.pg.connect import APPLICATION_NAME, Connection
from cronctl.store.pg.deadline import DEFAULT_DEADLINE_S
from cronctl.store.pg.loops import LoopIdentity
from cronctl.store.pg.transaction import short_transaction

_END_STUCK = """
SELECT a.pid, a.application_name, a.state,
       round(extract(epoch FROM clock_timestamp() - a.xact_start)::numeric, 1)::float8,
       left(a.query, 200), pg_terminate_backend(a.pid)
  FROM pg_stat_activity AS a
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
   AND a.usename = current_user
   AND a.application_name LIKE %(app)s
   AND a.wait_event_type = 'Client' AND a.wait_event = 'ClientRead'
   AND a.backend_xid IS NOT NULL
   AND a.state_change < clock_timestamp() - make_interval(secs => %(quiet)s)
   AND a.xact_start < clock_timestamp() - make_interval(secs => %(after)s)
"""


@dataclass(frozen=True)
class EndedSession:
    pid: int
    application_name: str
    state: str
    transaction_s: float
    query: str


def end_stuck_sessions(conn: Connection, me: LoopIdentity, after_s: float,
                       quiet_s: float = DEFAULT_DEADLINE_S) -> list[EndedSession]:
    """End the cronctl sessions stuck on a gone client (see the module doc) whose transaction
    is older than `after_s` and whose client has been silent for `quiet_s`; audit each."""
    with short_transaction(conn):
        rows = conn.execute(_END_STUCK, {"app": f"{APPLICATION_NAME}%", "quiet": quiet_s,
                                         "after": after_s}).fetchall()
        ended = [EndedSession(int(pid), str(app), str(state), float(age), str(query or ""))
                 for pid, app, state, age, query, done in rows if done]
        write_audit(conn, [AuditRow(AuditEvent.CLUSTER_SESSION_ENDED, reason="client_gone",
                                    details={"pid": me.pid, "session_pid": session.pid,
                                             "application_name": session.application_name,
                                             "state": session.state, "transaction_s": session.transaction_s,
                                             "statement": session.query, "after_s": after_s})
                           for session in ended], me.loop_id, me.host_id)
    return ended
