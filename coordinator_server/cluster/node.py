"""A node of a coordinator cluster: its membership, takeovers and owned partitions, wired.

The membership (Kafka's group over the log topic) says which node owns which log partition;
this node keeps loaded exactly what it is given (`PartitionOwnership`), taking each over
with Kafka's producer fencing first (`Takeover`), follows the partitions it stands by for
(`StandbyPartitions`), and names every partition's owner to FindCoordinator (`placement`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from coordinator_protocol.errors import NotCoordinatorError
from coordinator_server.cluster.membership import ClusterMembership
from coordinator_server.cluster.ownership import PartitionHost, PartitionOwnership
from coordinator_server.cluster.standby import StandbyPartitions, StandbyRuntime
from coordinator_server.cluster.takeover import FencedLog, Takeover
from coordinator_server.cluster.view import OwnershipView
from coordinator_server.metrics import ClusterGauges, ClusterMetrics
from coordinator_server.node_address import NodeAddress
from coordinator_server.runtime.context import CoordinatorState, PartitionStats
from coordinator_server.storage.kafka.security import KafkaSecurity

logger = logging.getLogger("coordinator_server.cluster")


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    bootstrap_servers: str
    topic: str
    cluster_id: str
    session_timeout_ms: int
    heartbeat_interval_ms: int
    security: KafkaSecurity
    # Whether this node follows the partitions it stands by for (warm standbys).
    standby: bool = True


class ClusterRuntime(PartitionHost, StandbyRuntime, Protocol):
    """What a node uses of the coordinator runtime: loads, unloads and standbys."""

    def partition_stats(self, partition: int) -> PartitionStats | None: ...


class ClusterNode:
    def __init__(
        self,
        settings: ClusterSettings,
        node: NodeAddress,
        runtime: ClusterRuntime,
        log: FencedLog,
        *,
        now_ms: Callable[[], int],
        stopped: Callable[[], str | None],
        metrics: ClusterMetrics | None = None,
    ) -> None:
        """`stopped()`: why the log stopped for good, or None; `metrics` counts the
        takeovers and handovers."""
        self.settings = settings
        self.node = node
        self.metrics = metrics or ClusterMetrics()
        self.membership = ClusterMembership(
            bootstrap_servers=settings.bootstrap_servers,
            topic=settings.topic,
            cluster_id=settings.cluster_id,
            node_id=node.node_id,
            host=node.host,
            port=node.port,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            on_change=self._on_view,
            on_lease_break=self._on_lease_break,
            kafka_security=settings.security,
        )
        self._log = log
        self._runtime = runtime
        self.takeover = Takeover(log, node.node_id, self._owns, now_ms)
        self.ownership = PartitionOwnership(
            runtime, self.take_over, self.hand_over, stopped=stopped
        )
        self.standby = StandbyPartitions(
            runtime, self.ownership.wait_first_loads, enabled=settings.standby
        )
        # The owner of each partition as of the latest view, ready for FindCoordinator, and
        # every node of that view, for DescribeCluster.
        self._owners: dict[int, NodeAddress] = {}
        self._this_node = node
        self._nodes: list[NodeAddress] = []

    def _owns(self, partition: int) -> bool:
        membership = self.membership
        return partition in membership.view.mine_owned and membership.holds_lease()

    def _on_lease_break(self) -> None:
        """The node is a member again after its lease ran out: Kafka may have given its
        partitions to another node meanwhile, which may have written to them, and the
        membership may give them back unchanged. Whatever it still has loaded is taken over
        again (a new epoch, a reload) before it serves from it."""
        owned = sorted(self.ownership.owned)
        if owned:
            logger.warning(
                "node %d is a member again after its lease ran out: taking its %d partitions "
                "over again",
                self.node.node_id,
                len(owned),
            )
        for partition in owned:
            self._runtime.fail_partition(
                partition,
                NotCoordinatorError(
                    f"partition {partition}: this node's membership lapsed; it is taken over again"
                ),
            )

    def may_serve(self) -> bool:
        """Whether this node may answer from its partitions now: only on a valid lease (a
        node paused or cut off past its session may have lost them without knowing)."""
        return self.membership.holds_lease()

    def placement(self, partition: int) -> NodeAddress | None:
        owner = self._owners.get(partition)
        if owner is self._this_node and not self.membership.holds_lease():
            # Its own view may be stale: no node is named rather than a wrong one.
            return None
        return owner

    def nodes(self) -> list[NodeAddress]:
        return self._nodes

    async def take_over(self, partition: int) -> None:
        """Take `partition` over (Kafka's producer fencing, then the ownership record), counted
        in the metrics; what the ownership calls for each partition the view gives this node."""
        try:
            await self.takeover.acquire(partition)
        except asyncio.CancelledError:
            # Lost while being taken over: neither done nor refused.
            raise
        except Exception:
            self.metrics.takeover_failed()
            raise
        self.metrics.takeover_done()

    def hand_over(self, partition: int) -> None:
        """Let `partition` go, counted in the metrics: for each partition the view takes away."""
        self.metrics.partition_lost()
        self.takeover.release(partition)

    def _on_view(self, view: OwnershipView) -> None:
        if view.error is not None:
            logger.error(
                "node %d owns no partition of cluster %s: %s",
                self.node.node_id,
                self.settings.cluster_id,
                view.error,
            )
        addresses = {
            node_id: NodeAddress(node_id, host, port)
            for node_id, (host, port) in view.nodes.items()
        }
        if addresses.get(self.node.node_id) == self.node:
            # This node's own address by identity, for the lease check of `placement`.
            addresses[self.node.node_id] = self._this_node
        self._nodes = [addresses[node_id] for node_id in sorted(addresses)]
        self._owners = {
            partition: addresses[node_id]
            for partition, node_id in view.owners.items()
            if node_id in addresses
        }
        logger.info(
            "cluster %s generation %d: node %d owns %d partitions %s, stands by for %d",
            self.settings.cluster_id,
            view.generation,
            self.node.node_id,
            len(view.mine_owned),
            sorted(view.mine_owned),
            len(view.mine_standby),
        )
        self.ownership.own(view.mine_owned)
        self.standby.stand_by(view.mine_standby, view.mine_owned)

    async def start(self) -> None:
        """Join the cluster and start taking over what it gives this node (the first loads
        are `ownership.wait_first_loads()`)."""
        # Checked before joining: a node that could take nothing over must not be given
        # partitions the others would then wait for.
        await self._log.check()
        await self.membership.start()

    async def close(self) -> None:
        """Stop taking partitions over and standing by (the runtime's close unloads what is
        loaded)."""
        await self.standby.close()
        await self.ownership.close()

    async def leave(self) -> None:
        """Leave the cluster at once: the others take this node's partitions over without
        waiting for its session to expire."""
        await self.membership.stop()

    def gauges(self) -> ClusterGauges:
        view = self.membership.view
        return ClusterGauges(
            generation=view.generation,
            owned=len(view.mine_owned),
            standby=len(view.mine_standby),
            nodes=len(view.nodes),
            holds_lease=self.membership.holds_lease(),
            refused=view.error is not None,
            producer_epochs={p: epoch for p, (_, epoch) in self.takeover.epochs.items()},
        )

    def status(self) -> dict[str, object]:
        view = self.membership.view
        return {
            "cluster_id": self.settings.cluster_id,
            "node_id": self.node.node_id,
            "generation": view.generation,
            "error": view.error,
            "holds_lease": self.membership.holds_lease(),
            "owned": sorted(view.mine_owned),
            "standby": sorted(view.mine_standby),
            "standing_by": sorted(self.standby.standing_by),
            # How far each standby has read the log, of how far the log reaches.
            "standby_offsets": {
                str(p): {
                    "offset": stats.last_committed_offset,
                    "high_watermark": stats.high_watermark,
                }
                for p in sorted(self.standby.standing_by)
                if (stats := self._runtime.partition_stats(p)) is not None
                and stats.state is CoordinatorState.STANDBY
            },
            "epochs": {
                str(p): {"producer_id": pid, "producer_epoch": epoch}
                for p, (pid, epoch) in sorted(self.takeover.epochs.items())
            },
            "takeovers": self.metrics.takeovers,
            "takeover_failures": self.metrics.takeover_failures,
            "handovers": self.metrics.handovers,
            "nodes": {
                str(node_id): f"{host}:{port}"
                for node_id, (host, port) in sorted(view.nodes.items())
            },
        }
