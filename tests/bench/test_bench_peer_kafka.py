"""The peer against a fresh Apache Kafka broker: its coordinator is found and ready, as Kafka
answers before its `__consumer_offsets` exists and while its partitions load."""

from __future__ import annotations

import asyncio

import pytest
from kafka_broker import KafkaBroker

from coordinator_server.tools.bench.targets import NOT_READY, TOPIC, PeerTarget


async def test_the_peer_waits_for_a_fresh_kafkas_coordinator(
    fresh_kafka_broker: KafkaBroker,
) -> None:
    from aiokafka.conn import create_conn
    from aiokafka.protocol.commit import OffsetCommitRequest
    from aiokafka.protocol.group import HeartbeatRequest

    # No `__consumer_offsets` yet: Kafka answers COORDINATOR_NOT_AVAILABLE first.
    peer = await PeerTarget.connect(fresh_kafka_broker.bootstrap, partitions=20)
    groups = [f"bench-fresh-{i}" for i in range(30)]
    try:
        await peer.ready(groups)
        connection = await create_conn(peer.host, peer.port, client_id="test")
        try:
            answers = await asyncio.gather(
                *(connection.send(HeartbeatRequest(group, -1, "")) for group in groups)
            )
            assert not [a.error_code for a in answers if a.error_code in NOT_READY]
            # The benchmark topic has every partition a commit names (Kafka checks them).
            committed = await connection.send(
                OffsetCommitRequest(groups[0], -1, "", -1, [(TOPIC, [(19, 5, "")])])
            )
            assert committed.topics[0][1][0][-1] == 0
        finally:
            connection.close()
    finally:
        await peer.close()


pytestmark = pytest.mark.kafka
