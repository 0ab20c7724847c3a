"""Consumer groups over TCP against a server process whose log is a real Kafka topic."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka_broker import KafkaBroker
from server_process import ServerProcess
from wire_client import WireClient, commit_errors, fetch_body, fetched_offsets

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.consumer import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
)
from coordinator_protocol.errors import ErrorCode

TOPIC = "orders"
TOPIC_PARTITIONS = 64

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def kafka_args(broker: KafkaBroker, topic: str, *extra: str) -> list[str]:
    return [
        "--port", "0",
        "--bootstrap-servers", broker.bootstrap,
        "--offsets-topic", topic,
        "--offsets-topic-partitions", "4",
        "--offsets-topic-replication-factor", "1",
        "--group-min-session-timeout-ms", "500",
        "--group-initial-rebalance-delay-ms", "1000",
        *extra,
    ]  # fmt: skip


@contextlib.contextmanager
def server(broker: KafkaBroker, topic: str) -> Iterator[ServerProcess]:
    with ServerProcess(kafka_args(broker, topic)) as process:
        yield process


@dataclass
class Member:
    """One consumer's side of the classic protocol, as bare wire calls."""

    client: WireClient
    group: str
    instance_id: str | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 20_000
    member_id: str = ""
    generation: int = -1
    # The generation whose assignment `assignment` holds: a join moves `generation` on before
    # the sync that brings that generation's assignment.
    synced_generation: int = -1
    leader: str = ""
    assignment: list[int] = field(default_factory=list)
    joined_members: list[dict[str, Any]] = field(default_factory=list)

    def join_body(self) -> dict[str, Any]:
        return {
            "group_id": self.group,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocols": [
                {"name": "range", "metadata": ConsumerProtocolSubscription([TOPIC]).encode()}
            ],
            "reason": None,
        }

    async def join(self, timeout: float = 60) -> dict[str, Any]:
        response = await self.client.call(ApiKey.JOIN_GROUP, self.join_body(), timeout=timeout)
        if response["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
            # KIP-394: the first join only hands out the member id.
            self.member_id = response["member_id"]
            response = await self.client.call(ApiKey.JOIN_GROUP, self.join_body(), timeout=timeout)
        assert response["error_code"] == 0, response
        self.member_id = response["member_id"]
        self.generation = response["generation_id"]
        self.leader = response["leader"]
        self.joined_members = response["members"]
        return response

    async def sync(self, timeout: float = 60) -> dict[str, Any]:
        assignments = []
        if self.member_id == self.leader and self.joined_members:
            assignments = assign_round_robin([m["member_id"] for m in self.joined_members])
        response = await self.client.call(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": assignments,
            },
            timeout=timeout,
        )
        assert response["error_code"] == 0, response
        decoded = ConsumerProtocolAssignment.decode(response["assignment"])
        self.assignment = sorted(p for tp in decoded.partitions for p in tp.partitions)
        self.synced_generation = self.generation
        return response

    async def heartbeat(self) -> int:
        response = await self.client.call(
            ApiKey.HEARTBEAT,
            {
                "group_id": self.group,
                "generation_id": self.generation,
                "member_id": self.member_id,
                "group_instance_id": self.instance_id,
            },
        )
        code: int = response["error_code"]
        return code


def assign_round_robin(member_ids: list[str]) -> list[dict[str, Any]]:
    ordered = sorted(member_ids)
    owned: dict[str, list[int]] = {m: [] for m in ordered}
    for partition in range(TOPIC_PARTITIONS):
        owned[ordered[partition % len(ordered)]].append(partition)
    return [
        {
            "member_id": member,
            "assignment": ConsumerProtocolAssignment([TopicPartitions(TOPIC, parts)]).encode(),
        }
        for member, parts in owned.items()
    ]


def expected_assignment(member_ids: list[str], member: str) -> list[int]:
    ordered = sorted(member_ids)
    return [p for p in range(TOPIC_PARTITIONS) if ordered[p % len(ordered)] == member]


@contextlib.asynccontextmanager
async def members(
    process: ServerProcess, group: str, count: int, **kwargs: Any
) -> AsyncIterator[list[Member]]:
    clients = [await WireClient.connect(process.host, process.port) for _ in range(count)]
    joined: list[Member] = []
    try:
        joined = [
            Member(
                client,
                group,
                instance_id=(
                    f"{kwargs['instance_prefix']}-{i}" if "instance_prefix" in kwargs else None
                ),
                session_timeout_ms=kwargs.get("session_timeout_ms", 10_000),
                rebalance_timeout_ms=kwargs.get("rebalance_timeout_ms", 20_000),
            )
            for i, client in enumerate(clients)
        ]
        yield joined
    finally:
        # Members may have reconnected: close every client they used.
        for client in {id(c): c for c in [*clients, *(m.client for m in joined)]}.values():
            await client.close()


async def form_group(group: list[Member]) -> None:
    await asyncio.gather(*(m.join() for m in group))
    await asyncio.gather(*(m.sync() for m in group))


async def describe(process: ServerProcess, group: str) -> dict[str, Any]:
    client = await WireClient.connect(process.host, process.port)
    try:
        for _ in range(200):
            response = await client.call(ApiKey.DESCRIBE_GROUPS, {"groups": [group]})
            (described,) = response["groups"]
            if described["error_code"] != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return dict(described)
            await asyncio.sleep(0.05)
        raise AssertionError("the group's partition never loaded")
    finally:
        await client.close()


async def test_fifty_members_join_at_once_and_agree_on_generation_leader_and_assignment(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    with server(kafka_broker, unique_topic) as process:
        async with members(process, "fifty", 50) as group:
            await form_group(group)
            assert len({m.generation for m in group}) == 1
            assert len({m.leader for m in group}) == 1
            leader = group[0].leader
            (leader_member,) = [m for m in group if m.member_id == leader]
            assert len(leader_member.joined_members) == 50
            assert all(m.joined_members == [] for m in group if m is not leader_member)
            ids = [m.member_id for m in group]
            assert len(set(ids)) == 50
            for member in group:
                assert member.assignment == expected_assignment(ids, member.member_id)
            described = await describe(process, "fifty")
            assert described["group_state"] == "Stable"
            assert len(described["members"]) == 50


async def test_a_member_that_stops_heartbeating_is_removed_and_the_others_rebalance(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    with server(kafka_broker, unique_topic) as process:
        async with members(process, "quiet", 3) as group:
            survivors, silent = group[:2], group[2]
            # Only the silent member's session is short: the survivors' heartbeats may be
            # late on a loaded machine without a second member expiring.
            silent.session_timeout_ms = 1500
            await form_group(group)
            first_generation = group[0].generation

            async def keep_alive(member: Member) -> None:
                while True:
                    code = await member.heartbeat()
                    if code == ErrorCode.REBALANCE_IN_PROGRESS:
                        await member.join()
                        await member.sync()
                    else:
                        assert code == 0, code
                    await asyncio.sleep(0.3)

            tasks = [asyncio.create_task(keep_alive(m)) for m in survivors]
            try:
                deadline = asyncio.get_running_loop().time() + 20
                while not all(m.synced_generation > first_generation for m in survivors):
                    assert asyncio.get_running_loop().time() < deadline, "no rebalance"
                    for task in tasks:
                        if task.done():
                            task.result()
                    await asyncio.sleep(0.1)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            ids = [m.member_id for m in survivors]
            for member in survivors:
                assert member.assignment == expected_assignment(ids, member.member_id)
            described = await describe(process, "quiet")
            assert sorted(m["member_id"] for m in described["members"]) == sorted(ids)
            assert silent.member_id not in {m["member_id"] for m in described["members"]}
            assert await silent.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_static_member_restarts_and_gets_its_assignment_back_without_a_rebalance(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    with server(kafka_broker, unique_topic) as process:
        async with members(process, "static", 3, instance_prefix="host") as group:
            await form_group(group)
            generation = group[0].generation
            restarting = group[1]
            old_member_id, old_assignment = restarting.member_id, restarting.assignment
            await restarting.client.close()
            restarting.client = await WireClient.connect(process.host, process.port)
            restarting.member_id = ""  # a restarted process remembers only its instance id
            await restarting.join()
            await restarting.sync()
            assert restarting.member_id != old_member_id
            assert restarting.generation == generation
            assert restarting.assignment == old_assignment
            for member in group:
                assert await member.heartbeat() == 0
            described = await describe(process, "static")
            assert described["group_state"] == "Stable"


async def test_a_server_restart_keeps_groups_and_offsets(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    args = kafka_args(kafka_broker, unique_topic)
    first = ServerProcess(args).start()
    try:
        async with members(first, "durable", 3, instance_prefix="box") as group:
            await form_group(group)
            generation = group[0].generation
            for member in group:
                body = {
                    "group_id": "durable",
                    "generation_id_or_member_epoch": member.generation,
                    "member_id": member.member_id,
                    "group_instance_id": member.instance_id,
                    "topics": [
                        {
                            "name": TOPIC,
                            "partitions": [
                                {"partition_index": p, "committed_offset": 100 + p}
                                for p in member.assignment
                            ],
                        }
                    ],
                }
                response = await member.client.call(ApiKey.OFFSET_COMMIT, body)
                assert set(commit_errors(response).values()) == {0}
            before = await describe(first, "durable")
    finally:
        first.kill()
    with ServerProcess(args) as second:
        after = await describe(second, "durable")
        assert after["group_state"] == "Stable"
        assert after["protocol_data"] == before["protocol_data"] == "range"
        assert sorted((m["member_id"], m["member_assignment"]) for m in after["members"]) == sorted(
            (m["member_id"], m["member_assignment"]) for m in before["members"]
        )
        client = await WireClient.connect(second.host, second.port)
        try:
            fetched = await client.call(ApiKey.OFFSET_FETCH, fetch_body("durable", None))
            assert fetched_offsets(fetched) == {
                (TOPIC, p): 100 + p for p in range(TOPIC_PARTITIONS)
            }
            # The members carry on in the same generation with the restarted server.
            for member in group:
                member.client = client
                assert await member.heartbeat() == 0
                assert member.generation == generation
        finally:
            await client.close()
