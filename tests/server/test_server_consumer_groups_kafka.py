"""Kafka's consumer group protocol (KIP-848) on Apache Kafka, through the real server process:
the coordinator learns the topics, their ids and partition counts from the data cluster's
metadata, and a group reacts when partitions are added, when a topic it subscribes to is
created after the member joined, and when one is deleted; what a member gets wrong is
answered with Kafka's codes, and the group serves on and reloads from its log."""

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
from coordinator_protocol.errors import ErrorCode

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


def heartbeat_body(group: str, member_id: str, epoch: int, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"group_id": group, "member_id": member_id, "member_epoch": epoch}
    if epoch == 0:
        body.update(rebalance_timeout_ms=30_000, topic_partitions=[])
    body.update(fields)
    return body


async def test_bad_heartbeats_get_kafkas_codes_and_the_group_serves_on_from_its_log(
    kafka_broker: ApacheKafkaBroker,
) -> None:
    """Kafka's answers to what a member gets wrong (GroupMetadataManagerTest's cases), on a
    server whose log is on Apache Kafka: each refused heartbeat leaves the group serving its
    member, and the log, read again by a restarted server, holds the group as it was."""
    suffix = uuid.uuid4().hex[:8]
    orders, group, classic_group = f"orders-{suffix}", f"group-{suffix}", f"classic-{suffix}"
    args = server_args(kafka_broker, f"__cg_log_{suffix}")
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(orders, 2, 1)])
        with ServerProcess(args) as server:
            client = await WireClient.connect(server.host, server.port)
            try:

                async def code_of(body: dict[str, Any]) -> int:
                    answer = await client.call(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)
                    return int(answer["error_code"])

                member = Member(client, group, orders)
                await member.until({orders: [0, 1]})
                static = heartbeat_body(
                    group, str(uuid.uuid4()), 0, subscribed_topic_names=[orders]
                )
                static["instance_id"] = "instance-1"
                assert await code_of(static) == ErrorCode.NONE
                # The static member's join moved the group on: the first member gives a
                # partition up and reaches the new epoch, so that it has one in the past.
                while member.epoch < 2 or len(member.by_name().get(orders, [])) != 1:
                    await member.heartbeat()
                    await asyncio.sleep(0.1)
                epoch = member.epoch
                kept = member.by_name()

                refused = {
                    "unknown assignor": heartbeat_body(
                        group, str(uuid.uuid4()), 0,
                        subscribed_topic_names=[orders], server_assignor="sticky",
                    ),
                    "invalid regular expression": heartbeat_body(
                        group, str(uuid.uuid4()), 0, subscribed_topic_regex="orders-(",
                    ),
                    "an epoch from the future": heartbeat_body(
                        group, member.member_id, epoch + 5
                    ),
                    "an epoch from the past": heartbeat_body(group, member.member_id, epoch - 1),
                    "an unknown member": heartbeat_body(group, str(uuid.uuid4()), 3),
                    "a static member joining twice": {
                        **heartbeat_body(
                            group, str(uuid.uuid4()), 0, subscribed_topic_names=[orders]
                        ),
                        "instance_id": "instance-1",
                    },
                }  # fmt: skip
                expected = {
                    "unknown assignor": ErrorCode.UNSUPPORTED_ASSIGNOR,
                    "invalid regular expression": ErrorCode.INVALID_REGULAR_EXPRESSION,
                    "an epoch from the future": ErrorCode.FENCED_MEMBER_EPOCH,
                    "an epoch from the past": ErrorCode.FENCED_MEMBER_EPOCH,
                    "an unknown member": ErrorCode.UNKNOWN_MEMBER_ID,
                    "a static member joining twice": ErrorCode.UNRELEASED_INSTANCE_ID,
                }
                answered = {what: await code_of(body) for what, body in refused.items()}
                assert answered == expected

                # A subscription to a topic that does not exist joins, with nothing.
                missing = Member(client, group, f"missing-{suffix}")
                await missing.heartbeat()
                assert missing.by_name() == {}

                # A member of one protocol calling the other's APIs: a consumer-protocol
                # member's classic Heartbeat, and a classic group's member heartbeating
                # with the consumer protocol.
                classic_heartbeat = {
                    "group_id": group, "generation_id": epoch, "member_id": member.member_id,
                }  # fmt: skip
                answer = await client.call(ApiKey.HEARTBEAT, classic_heartbeat)
                assert answer["error_code"] == ErrorCode.UNKNOWN_MEMBER_ID
                joined = await client.call(
                    ApiKey.JOIN_GROUP,
                    {
                        "group_id": classic_group, "session_timeout_ms": 30_000,
                        "member_id": "", "protocol_type": "consumer",
                        "protocols": [{"name": "range", "metadata": b""}],
                    },
                )  # fmt: skip
                assert joined["error_code"] == ErrorCode.MEMBER_ID_REQUIRED
                answer = await client.call(
                    ApiKey.CONSUMER_GROUP_HEARTBEAT,
                    heartbeat_body(classic_group, joined["member_id"], 1),
                )
                assert answer["error_code"] == ErrorCode.GROUP_ID_NOT_FOUND

                # The group served its member throughout (the member subscribed to a
                # missing topic moved the group to a new epoch: the member follows it and
                # keeps its partition).
                await member.heartbeat()
                assert member.epoch >= epoch and member.by_name() == kept
                epoch = member.epoch
            finally:
                await client.close()

        # The log read again: the group and its members as they were.
        with ServerProcess(args) as again:
            client = await WireClient.connect(again.host, again.port)
            try:
                described = await client.call(
                    ApiKey.CONSUMER_GROUP_DESCRIBE, {"group_ids": [group]}
                )
                (state,) = described["groups"]
                assert state["error_code"] == 0, state
                by_id = {m["member_id"]: m for m in state["members"]}
                assert by_id[member.member_id]["member_epoch"] == epoch
                assert by_id[static["member_id"]]["instance_id"] == "instance-1"
                assert missing.member_id in by_id
                assert len(by_id) == 3
                member.client = client
                await member.heartbeat()
                assert member.epoch >= epoch
            finally:
                await client.close()
    finally:
        await admin.close()
