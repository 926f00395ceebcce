"""The PostgreSQL store's beat (loop/beat.py): this loop as one member of the cluster.

Imported only by a loop that runs on PostgreSQL (loop/cluster.py imports psycopg).
"""

from __future__ import annotations

from collections.abc import Callable

from cronctl.context import Context
from cronctl.loop.beat import HealInputs
from cronctl.loop.clockstep import ClockStep
from cronctl.loop.cluster import ClusterMember
from cronctl.loop.cluster_life import first_heal
from cronctl.loop.control import Controls
from cronctl.loop.engine import Engine
from cronctl.loop.forgetting import LoopForgetter
from cronctl.loop.heal import Killer
from cronctl.proc.kill import kill_run_processes
from cronctl.store.suspects import Suspect

# While the database is out of reach, the tick thread looks again this often (the beat itself
# backs off; runs whose lease cannot be renewed are ended by the fence thread, loop/fence.py).
OUTAGE_RETRY_S = 0.5


class ClusterBeat:
    """One beat query per tick; heal and serve only when it says so (loop/cluster.py)."""

    def __init__(self, ctx: Context, cluster: ClusterMember, forgetter: LoopForgetter) -> None:
        self.ctx = ctx
        self.cluster = cluster
        self.forgetter = forgetter

    def begin(self) -> float | None:
        return None if self.cluster.beat() else OUTAGE_RETRY_S

    def heal_due(self, since_last_heal: float) -> bool:
        return self.cluster.needs_healing

    def heal_inputs(self) -> HealInputs:
        cluster = self.cluster
        cluster.end_stuck_sessions()  # rows held by a session whose client is gone (SPEC §9)
        if cluster.store.take_over_held():  # slots held by a silent loop fire here (SPEC §9)
            cluster.due.invalidate()
        found = self.ctx.leases.suspects()
        return HealInputs(cluster.db_now(), cluster.liveness(), self._local_killer(found), found)

    def _local_killer(self, found: list[Suspect]) -> Killer:
        """Kill the processes of a run only on its own host: another host's pid means nothing here
        (that host's loop self-fences its runs before their leases can run out)."""
        here = self.cluster.me.host_id
        foreign = {claim.run_id for suspect in found for claim in suspect.claims
                   if claim.owner_host not in (None, here)}

        def kill(run_id: str, child: dict[str, object] | None, grace: float) -> int:
            return 0 if run_id in foreign else kill_run_processes(run_id, child, grace)

        return kill

    def healed(self) -> None:
        self.cluster.healed()

    def first_heal(self, heal: Callable[[], object]) -> None:
        first_heal(heal)  # an outage meanwhile leaves it to the next tick's

    def serve(self, controls: Controls) -> None:
        self.cluster.serve_requests(controls)  # requests of commands on any host

    def end(self) -> None:
        self.forgetter.maybe_forget(self.cluster)  # silent loops, once all their runs are reclaimed

    def clock_stepped(self, engine: Engine, step: ClockStep) -> list[str]:
        return []  # the database's clock judges what is due: a local step moves nothing
