"""What the admin tool's tests on Apache Kafka share: a data topic with records on both sides of
a known time, a real server whose log is Kafka, and a `Setup` that runs the tool and drives
groups against them."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition
from kafka_broker import KafkaBroker
from server_process import ServerProcess

from coordinator_client import CoordinatorClient
from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from coordinator_protocol.messages import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequestMember,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from coordinator_server.cli import main

PARTITIONS = 3
PER_PARTITION = 10  # records in each partition, 5 before and 5 after `middle_ms`


class Setup:
    def __init__(self, broker: KafkaBroker, server: ServerProcess, topic: str, middle_ms: int):
        self.broker = broker
        self.server = server
        self.topic = topic
        self.middle_ms = middle_ms

    @property
    def coordinator(self) -> str:
        return f"{self.server.host}:{self.server.port}"

    def run(self, *args: str, kafka: bool = True) -> int:
        options = ["--bootstrap-server", self.coordinator]
        if kafka:
            options += ["--kafka-bootstrap-servers", self.broker.bootstrap]
        return main(["groups", *args, *options])

    def tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, partition)

    def call(self, coroutine: Any) -> Any:
        async def run() -> Any:
            async with CoordinatorClient(self.coordinator) as client:
                return await coroutine(client)

        return asyncio.run(run())

    def commit(self, group: str, offsets: dict[int, int]) -> None:
        self.call(lambda c: c.commit_offsets(group, {self.tp(p): o for p, o in offsets.items()}))

    def committed(self, group: str) -> dict[int, int]:
        fetched = self.call(lambda c: c.fetch_offsets(group))
        return {tp.partition: value.offset for tp, value in fetched.items()}

    def join(self, group: str) -> str:
        """A member that stays (30 s session) without heartbeating: owns partitions 0, 1."""

        async def join(client: CoordinatorClient) -> str:
            request = JoinGroupRequest(
                group_id=group,
                session_timeout_ms=30_000,
                rebalance_timeout_ms=30_000,
                member_id="",
                group_instance_id="admin-test",
                protocol_type="consumer",
                protocols=[
                    JoinGroupRequestProtocol(
                        name="range",
                        metadata=ConsumerProtocolSubscription([self.topic]).encode(),
                    )
                ],
            )
            joined = await client.join_group(request)
            assignment = ConsumerProtocolAssignment([TopicPartitions(self.topic, [0, 1])])
            await client.sync_group(
                SyncGroupRequest(
                    group_id=group,
                    generation_id=joined.generation_id,
                    member_id=joined.member_id,
                    group_instance_id="admin-test",
                    protocol_type="consumer",
                    protocol_name="range",
                    assignments=[
                        SyncGroupRequestAssignment(
                            member_id=joined.member_id, assignment=assignment.encode()
                        )
                    ],
                )
            )
            return joined.member_id

        member_id: str = self.call(join)
        return member_id

    def leave(self, group: str, member_id: str) -> None:
        self.call(
            lambda c: c.leave(
                group,
                [LeaveGroupRequestMember(member_id=member_id, group_instance_id="admin-test")],
            )
        )


@contextlib.contextmanager
def started(kafka_broker: KafkaBroker) -> Iterator[Setup]:
    """A data topic with records before and after a middle time, and a server whose log is
    Kafka, for the admin tool's tests."""
    topic = f"admin-{uuid.uuid4().hex[:10]}"

    async def produce() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
        await producer.start()
        try:
            for p in range(PARTITIONS):
                for i in range(PER_PARTITION // 2):
                    await producer.send_and_wait(topic, f"early-{i}".encode(), partition=p)
            await asyncio.sleep(0.05)
            middle_ms = int(time.time() * 1000)
            await asyncio.sleep(0.05)
            for p in range(PARTITIONS):
                for i in range(PER_PARTITION // 2):
                    await producer.send_and_wait(topic, f"late-{i}".encode(), partition=p)
        finally:
            await producer.stop()
        return middle_ms

    middle_ms = asyncio.run(produce())
    args = [
        "--port", "0",
        "--bootstrap-servers", kafka_broker.bootstrap,
        "--offsets-topic", f"{topic}-offsets",
        "--offsets-topic-partitions", "2",
        "--offsets-topic-replication-factor", "1",
        "--group-min-session-timeout-ms", "500",
        "--group-initial-rebalance-delay-ms", "0",
    ]  # fmt: skip
    with ServerProcess(args) as server:
        yield Setup(kafka_broker, server, topic, middle_ms)


def group_name() -> str:
    return f"admin-group-{uuid.uuid4().hex[:8]}"
