"""The two coordinators the consumer group scenario drives, as `ConsumerSide`s: ours over the
wire contract (ConsumerGroupHeartbeat 68, ConsumerGroupDescribe 69, msgpack frames answered
out of order, so a few connections carry every member), and a Kafka broker's over Kafka's
protocol (`kafka_consumer_protocol`).

A Kafka broker reads one request of a connection at a time, so the peer's members each get a
connection of their own by default, as Kafka's consumers have (`connections` says otherwise);
its measured loop keeps one request in flight per connection, as the other scenarios' do.

The measured loops send steady heartbeats (the member's id and epoch, nothing else: what a
member sends between changes) from frames encoded once; an answer is decoded only when its
bytes differ from the last good answer to the same request.
"""

from __future__ import annotations

import asyncio
import struct
import time
from io import BytesIO
from typing import Any

from coordinator_server.tools.bench.consumer_members import (
    RETRIABLE,
    Answer,
    Beat,
    GroupSnapshot,
    TopicPartition,
)
from coordinator_server.tools.bench.kafka_consumer_protocol import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    ConsumerGroupDescribe,
    ConsumerGroupHeartbeat,
    KafkaWire,
    frame_of,
    open_kafka_wire,
)
from coordinator_server.tools.bench.loops import LoopRun, run_loops
from coordinator_server.tools.bench.ours import (
    RequestTemplate,
    WireConnection,
    check_ours,
    parse_ours,
)
from coordinator_server.tools.bench.peer_sasl import open_kafka_secured
from coordinator_server.tools.bench.scenarios import BenchError
from coordinator_server.tools.bench.targets import find_coordinator, parse_address

OURS_HEARTBEAT = 68
OURS_DESCRIBE = 69
_INT32 = struct.Struct(">i")
# Describing a group the coordinator is still loading is asked again, this long at most.
DESCRIBE_RETRY_S = 0.1
DESCRIBE_TIMEOUT_S = 60.0


def _grouped(owned: frozenset[TopicPartition]) -> dict[bytes, list[int]]:
    topics: dict[bytes, list[int]] = {}
    for topic_id, partition in owned:
        topics.setdefault(topic_id, []).append(partition)
    for partitions in topics.values():
        partitions.sort()
    return topics


class OursConsumerSide:
    name = "ours"
    member_made_ids = True

    def __init__(self, host: str, port: int, connections: list[WireConnection]) -> None:
        self.host = host
        self.port = port
        self._connections = connections
        self.watched: dict[str, int] = {}
        self.others: list[int] = []
        # Our wire contract names a topic beside its id: the names the answers gave.
        self._topic_names: dict[bytes, str] = {}

    @classmethod
    async def connect(cls, address: str, connections: int) -> OursConsumerSide:
        host, port = parse_address(address)
        opened = [await WireConnection.open(host, port) for _ in range(max(1, connections))]
        return cls(host, port, opened)

    async def heartbeat(self, index: int, beat: Beat) -> Answer:
        body: dict[str, Any] = {
            "group_id": beat.group_id,
            "member_id": beat.member_id,
            "member_epoch": beat.member_epoch,
            "rebalance_timeout_ms": beat.rebalance_timeout_ms,
            "subscribed_topic_names": beat.subscribed_topic_names,
        }
        if beat.owned is not None:
            body["topic_partitions"] = [
                {
                    "topic_id": topic_id,
                    "topic_name": self._topic_names[topic_id],
                    "partitions": partitions,
                }
                for topic_id, partitions in _grouped(beat.owned).items()
            ]
        connection = self._connections[index % len(self._connections)]
        answer = await connection.request(OURS_HEARTBEAT, body)
        assignment = answer.get("assignment")
        owned: frozenset[TopicPartition] | None = None
        if assignment is not None:
            names = self._topic_names
            items: list[TopicPartition] = []
            for topic in assignment.get("topic_partitions") or ():
                topic_id = bytes(topic["topic_id"])
                names[topic_id] = topic["topic_name"]
                items.extend((topic_id, p) for p in topic["partitions"])
            owned = frozenset(items)
        return Answer(
            error_code=int(answer.get("error_code", 0)),
            member_id=answer.get("member_id"),
            member_epoch=int(answer.get("member_epoch", 0)),
            heartbeat_interval_ms=int(answer.get("heartbeat_interval_ms", 0)),
            assignment=owned,
        )

    async def describe(self, group_id: str) -> GroupSnapshot:
        deadline = time.monotonic() + DESCRIBE_TIMEOUT_S
        while True:
            answer = await self._connections[0].request(OURS_DESCRIBE, {"group_ids": [group_id]})
            (group,) = answer["groups"]
            code = int(group.get("error_code", 0))
            if code not in RETRIABLE or time.monotonic() > deadline:
                break
            await asyncio.sleep(DESCRIBE_RETRY_S)
        return GroupSnapshot(
            error_code=code,
            state=group.get("group_state") or "",
            group_epoch=int(group.get("group_epoch", 0)),
            assignment_epoch=int(group.get("assignment_epoch", 0)),
            member_epochs={m["member_id"]: int(m["member_epoch"]) for m in group["members"]},
        )

    async def heartbeat_loop(
        self,
        group_id: str,
        members: list[tuple[str, int]],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        templates = [
            RequestTemplate(
                OURS_HEARTBEAT,
                {"group_id": group_id, "member_id": member_id, "member_epoch": epoch},
            )
            for member_id, epoch in members
        ]
        return await run_loops(
            self.host,
            self.port,
            list(templates),
            parse_ours,
            check_ours,
            inflight,
            connections,
            warmup_s,
            duration_s,
            self.watched,
            self.others,
        )

    async def close(self) -> None:
        for connection in self._connections:
            connection.close()


class _FrameTemplate:
    """A Kafka request frame split around its correlation id (length, api key and version,
    then the id)."""

    __slots__ = ("head", "tail")

    def __init__(self, request: Any) -> None:
        frame = frame_of(request, 0, "bench")
        self.head = frame[:8]
        self.tail = frame[12:]


class PeerConsumerSide:
    """A Kafka broker's group coordinator, through Kafka's protocol."""

    name = "peer"

    def __init__(
        self, host: str, port: int, versions: dict[int, tuple[int, int]], connections: int
    ) -> None:
        self.host = host
        self.port = port
        self.versions = versions
        self.watched: dict[str, int] = {}
        self.others: list[int] = []
        # 0: one connection per member.
        self.connections = connections
        self._wires: dict[int, KafkaWire] = {}
        self._shared: KafkaWire | None = None
        heartbeat_versions = versions[CONSUMER_GROUP_HEARTBEAT]
        # Version 1 has the member make up its id (KIP-1082); version 0 takes the
        # coordinator's.
        self.member_made_ids = heartbeat_versions[1] >= 1

    @classmethod
    async def connect(cls, address: str, connections: int) -> PeerConsumerSide:
        """The coordinator a broker names, and the versions it offers (ApiVersions)."""
        from aiokafka.conn import create_conn

        host, port = await find_coordinator(address)
        probe = await create_conn(host, port, client_id="bench", request_timeout_ms=60000)
        try:
            versions = dict(probe._versions)
        finally:
            probe.close()
        for api_key, name in (
            (CONSUMER_GROUP_HEARTBEAT, "ConsumerGroupHeartbeat"),
            (CONSUMER_GROUP_DESCRIBE, "ConsumerGroupDescribe"),
        ):
            if api_key not in versions:
                raise BenchError(
                    f"the peer at {host}:{port} does not serve {name} ({api_key}): Kafka's "
                    "consumer group protocol needs Apache Kafka 4.0 or later with `consumer` "
                    "in group.coordinator.rebalance.protocols"
                )
        return cls(host, port, versions, connections)

    @property
    def heartbeat_version(self) -> int:
        return int(ConsumerGroupHeartbeat("", "", 0).prepare(self.versions).API_VERSION)

    async def open_members(self, count: int) -> None:
        """Open the members' connections before anything is timed."""
        wanted = count if self.connections <= 0 else min(count, self.connections)
        while len(self._wires) < wanted:
            self._wires[len(self._wires)] = await open_kafka_wire(self.host, self.port)

    async def _wire(self, index: int) -> KafkaWire:
        slot = index if self.connections <= 0 else index % self.connections
        wire = self._wires.get(slot)
        if wire is None:
            wire = self._wires[slot] = await open_kafka_wire(self.host, self.port)
        return wire

    async def heartbeat(self, index: int, beat: Beat) -> Answer:
        owned = None if beat.owned is None else list(_grouped(beat.owned).items())
        request = ConsumerGroupHeartbeat(
            beat.group_id,
            beat.member_id,
            beat.member_epoch,
            rebalance_timeout_ms=beat.rebalance_timeout_ms,
            subscribed_topic_names=beat.subscribed_topic_names,
            topic_partitions=owned,
        ).prepare(self.versions)
        wire = await self._wire(index)
        answer = await wire.send(request)
        assignment: frozenset[TopicPartition] | None = None
        if answer.assignment is not None:
            topic_partitions, _tags = answer.assignment
            assignment = frozenset(
                (bytes(topic_id), p) for topic_id, parts, _ in topic_partitions for p in parts
            )
        return Answer(
            error_code=int(answer.error_code),
            member_id=answer.member_id,
            member_epoch=int(answer.member_epoch),
            heartbeat_interval_ms=int(answer.heartbeat_interval_ms),
            assignment=assignment,
        )

    async def describe(self, group_id: str) -> GroupSnapshot:
        if self._shared is None:
            self._shared = await open_kafka_wire(self.host, self.port)
        request = ConsumerGroupDescribe([group_id]).prepare(self.versions)
        deadline = time.monotonic() + DESCRIBE_TIMEOUT_S
        while True:
            answer = await self._shared.send(request)
            (group,) = answer.groups
            code = int(group[0])
            if code not in RETRIABLE or time.monotonic() > deadline:
                break
            await asyncio.sleep(DESCRIBE_RETRY_S)
        _code, _message, _id, state, group_epoch, assignment_epoch, _assignor, members = group[:8]
        return GroupSnapshot(
            error_code=code,
            state=state or "",
            group_epoch=int(group_epoch),
            assignment_epoch=int(assignment_epoch),
            member_epochs={member[0]: int(member[3]) for member in members or ()},
        )

    async def heartbeat_loop(
        self,
        group_id: str,
        members: list[tuple[str, int]],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        structs = [
            ConsumerGroupHeartbeat(group_id, member_id, epoch).prepare(self.versions)
            for member_id, epoch in members
        ]
        templates = [_FrameTemplate(request) for request in structs]
        response_type = structs[0].RESPONSE_TYPE
        good: dict[int, bytes] = {}

        def parse(payload: bytes) -> tuple[int, bytes]:
            # The response header of a flexible version: the correlation id, then its tagged
            # fields (none: one zero byte).
            correlation_id = _INT32.unpack_from(payload, 0)[0]
            if payload[4] == 0:
                return correlation_id, payload[5:]
            buffer = BytesIO(payload)
            structs[0].parse_response_header(buffer)
            return correlation_id, buffer.read()

        def check(body: bytes, index: int) -> int:
            if good.get(index) == body:
                return 0
            code = int(response_type.decode(BytesIO(body)).error_code)
            if code == 0:
                good[index] = body
            return code

        return await run_loops(
            self.host,
            self.port,
            list(templates),
            parse,
            check,
            inflight,
            connections,
            warmup_s,
            duration_s,
            self.watched,
            self.others,
            opener=open_kafka_secured,
        )

    async def close(self) -> None:
        for wire in self._wires.values():
            wire.close()
        self._wires.clear()
        if self._shared is not None:
            self._shared.close()
            self._shared = None
