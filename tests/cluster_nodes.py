"""Nodes of a cluster as real `coordinator-server serve` processes, for the cluster's tests."""

from __future__ import annotations

from apache_kafka import ApacheKafkaBroker

# The broker's group.min.session.timeout.ms is Kafka's default, 6000 ms: the shortest.
SESSION_TIMEOUT_MS = 6000


def node_args(
    broker: ApacheKafkaBroker, topic: str, node_id: int, partitions: int, *extra: str
) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", str(partitions),
        "--offsets-topic-replication-factor", "1",
        "--cluster", "on",
        "--cluster-session-timeout-ms", str(SESSION_TIMEOUT_MS),
        "--cluster-heartbeat-interval-ms", "1000",
        "--node-id", str(node_id),
        *extra,
    ]  # fmt: skip
