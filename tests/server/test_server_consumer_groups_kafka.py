"""Kafka's consumer group protocol (KIP-848) on Apache Kafka, through the real server process:
the coordinator learns the topics, their ids and partition counts from the data cluster's
metadata, and a group reacts when partitions are added, when a topic it subscribes to is
created after the member joined, and when one is deleted."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from apache_kafka import ApacheKafkaBroker
from server_process import ServerProcess
from wire_client import WireClient

from coordinator_protocol.api_keys import ApiKey

pytestmark = pytest.mark.slow

Owned = dict[tuple[bytes, str], list[int]]


def server_args(broker: ApacheKafkaBroker, log_topic: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", log_topic,
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        # The topics are read again every half second, so that changes show quickly.
        "--metadata-max-age-ms", "500",
        "--group-consumer-assignment-interval-ms", "0",
        *broker.coordinator_args,
    ]  # fmt: skip


class Member:
    """One member heartbeating by hand: it owns what it was last given, revoking at once."""

    def __init__(self, client: WireClient, group: str, *topics: str) -> None:
        self.client = client
        self.group = group
        self.member_id = str(uuid.uuid4())
        self.topics = list(topics)
        self.epoch = 0
        self.owned: Owned = {}

    async def heartbeat(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "group_id": self.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "topic_partitions": [
                {"topic_id": topic_id, "topic_name": name, "partitions": partitions}
                for (topic_id, name), partitions in self.owned.items()
            ],
        }
        if self.epoch == 0:
            body.update(rebalance_timeout_ms=30_000, subscribed_topic_names=self.topics)
        response = await self.client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)
        assert response["error_code"] == 0, response
        self.epoch = response["member_epoch"]
        if response["assignment"] is not None:
            self.owned = {
                (tp["topic_id"], tp["topic_name"]): sorted(tp["partitions"])
                for tp in response["assignment"]["topic_partitions"]
            }
        return response

    def by_name(self) -> dict[str, list[int]]:
        return {name: partitions for (_, name), partitions in self.owned.items()}

    async def until(self, expected: dict[str, list[int]], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while self.by_name() != expected:
            assert time.monotonic() < deadline, f"owns {self.by_name()}, not {expected}"
            await self.heartbeat()
            await asyncio.sleep(0.2)


async def test_the_group_follows_partitions_added_topics_created_and_deleted(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    orders, later = f"orders-{suffix}", f"later-{suffix}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(orders, 2, 1)])
        with ServerProcess(server_args(kafka_broker, f"__cg_log_{suffix}")) as server:
            client = await WireClient.connect(server.host, server.port)
            try:
                member = Member(client, f"group-{suffix}", orders, later)
                await member.heartbeat()
                await member.until({orders: [0, 1]})
                ids = {name: topic_id for topic_id, name in member.owned}
                assert len(ids[orders]) == 16

                await admin.create_partitions({orders: NewPartitions(4)})
                await member.until({orders: [0, 1, 2, 3]})

                await admin.create_topics([NewTopic(later, 3, 1)])
                await member.until({orders: [0, 1, 2, 3], later: [0, 1, 2]})

                await admin.delete_topics([orders])
                await member.until({later: [0, 1, 2]})
            finally:
                await client.close()
    finally:
        await admin.close()


async def test_a_topic_made_after_the_servers_last_read_is_read_for_the_member_naming_it(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    fresh, later = f"fresh-{suffix}", f"later-{suffix}"
    args = server_args(kafka_broker, f"__cg_log_{suffix}")
    # Kafka's default: the periodic read would come five minutes later.
    at = args.index("--metadata-max-age-ms")
    del args[at : at + 2]
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        with ServerProcess(args) as server:
            await admin.create_topics([NewTopic(fresh, 3, 1)])
            client = await WireClient.connect(server.host, server.port)
            try:
                # Made after the server's read: the join waits for a read of its own, and
                # its first answer holds the topic's partitions.
                member = Member(client, f"group-{suffix}", fresh)
                await member.heartbeat()
                assert member.by_name() == {fresh: [0, 1, 2]}

                # Named at the join but made afterwards: read for again without the member
                # naming it again (a heartbeat names its topics only when they change).
                waiting = Member(client, f"waiting-{suffix}", later)
                await waiting.heartbeat()
                assert waiting.by_name() == {}
                await admin.create_topics([NewTopic(later, 2, 1)])
                await waiting.until({later: [0, 1]}, timeout=15)
            finally:
                await client.close()
    finally:
        await admin.close()
