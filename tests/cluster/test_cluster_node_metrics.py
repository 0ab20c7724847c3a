"""What a cluster node counts of its takeovers and handovers, without Kafka: a takeover the
membership does not allow is a failure, a lost partition a handover."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from coordinator_server.cluster.node import ClusterNode, ClusterSettings
from coordinator_server.cluster.takeover import NotOwnerError
from coordinator_server.metrics import ClusterMetrics
from coordinator_server.node_address import NodeAddress
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.storage.kafka.security import KafkaSecurity


class IdleRuntime:
    def schedule_load(self, partition: int, epoch: int) -> None:
        raise AssertionError("nothing is loaded")

    def schedule_unload(self, partition: int, epoch: int | None) -> None:
        pass

    def partition_state(self, partition: int) -> CoordinatorState | None:
        return None

    async def wait_loaded(self, partition: int) -> None:
        raise AssertionError("nothing is loaded")

    async def wait_left_active(self, partition: int) -> CoordinatorState | None:
        return None


class RecordingLog:
    def __init__(self) -> None:
        self.released: list[int] = []

    async def acquire(self, partition: int) -> tuple[int, int]:
        raise AssertionError("a partition the membership does not give is never acquired")

    def release(self, partition: int) -> None:
        self.released.append(partition)

    def append(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> asyncio.Future[int]:
        raise AssertionError("nothing is appended")


def cluster_node(log: RecordingLog, metrics: ClusterMetrics) -> ClusterNode:
    return ClusterNode(
        ClusterSettings(
            bootstrap_servers="127.0.0.1:1",
            topic="log",
            cluster_id="cluster",
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            security=KafkaSecurity(),
        ),
        NodeAddress(1, "127.0.0.1", 9094),
        IdleRuntime(),
        log,
        now_ms=lambda: 0,
        stopped=lambda: None,
        metrics=metrics,
    )


async def test_a_refused_takeover_counts_as_failed_and_a_lost_partition_as_handed_over() -> None:
    metrics = ClusterMetrics()
    log = RecordingLog()
    node = cluster_node(log, metrics)
    with pytest.raises(NotOwnerError):
        await node.take_over(3)
    assert (metrics.takeovers, metrics.takeover_failures, metrics.handovers) == (0, 1, 0)
    node.hand_over(3)
    assert log.released == [3]
    assert (metrics.takeovers, metrics.takeover_failures, metrics.handovers) == (0, 1, 1)
    status = node.status()
    assert (status["takeovers"], status["takeover_failures"], status["handovers"]) == (0, 1, 1)


def test_a_node_that_never_joined_reports_no_share_and_no_lease() -> None:
    gauges = cluster_node(RecordingLog(), ClusterMetrics()).gauges()
    assert (gauges.owned, gauges.standby, gauges.nodes) == (0, 0, 0)
    assert gauges.holds_lease is False
    assert gauges.refused is False
    assert gauges.producer_epochs == {}
