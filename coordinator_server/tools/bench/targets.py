"""The two coordinators a benchmark drives, behind one small interface.

`OursTarget` speaks the wire contract (msgpack frames, pipelined, answers out of order);
`PeerTarget` speaks Kafka's protocol through aiokafka's protocol classes and connections,
after a FindCoordinator. Group membership (join, sync, heartbeat) goes through
`join`/`sync`/`heartbeat` on both; the measured loops (`commit_loop`, `heartbeat_loop`) use
each side's cheapest way to keep C requests in flight.

A Kafka broker handles one request of a connection at a time (a JoinGroup parked for a
rebalance holds up the rest of its connection), so the peer's members each get their own
connection for joining, as real consumers have, and its measured loops by default keep one
request in flight per connection: C requests in flight are C connections, as C clients would
have them. Our server answers a connection's requests out of order, so its loops pipeline
them over a few connections.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from coordinator_client import ClientSecurity
from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_server.tools.bench.loops import LoopRun, run_loops
from coordinator_server.tools.bench.ours import (
    RequestTemplate,
    WireConnection,
    check_ours,
    first_error,
    parse_ours,
)
from coordinator_server.tools.bench.peer_sasl import aiokafka_settings, open_kafka_secured

MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
# What a coordinator answers while it is not ready for a group yet: Kafka's until its
# `__consumer_offsets` exists (created by the first FindCoordinator) and its partitions have
# loaded; ours while its log loads.
NOT_READY = frozenset({COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR})
# How long a coordinator may take to become ready: Kafka creates `__consumer_offsets` on the
# first FindCoordinator, seconds on one busy core.
READY_TIMEOUT_S = 120.0
READY_RETRY_S = 0.1
PROTOCOL_TYPE = "consumer"
PROTOCOL_NAME = "range"
# The topic every commit names; a Kafka broker checks that it exists, and Apache Kafka that
# it has the partition committed (UNKNOWN_TOPIC_OR_PARTITION otherwise), so the peer's broker
# gets it with at least as many partitions as a commit names.
TOPIC = "bench-topic"
TOPIC_PARTITIONS = 100


@dataclass
class JoinAnswer:
    error_code: int
    generation_id: int = -1
    member_id: str = ""
    leader: str = ""
    members: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CommitSpec:
    group: str
    member_id: str
    generation_id: int
    topic: str
    partitions: int


@dataclass(frozen=True)
class HeartbeatSpec:
    group: str
    member_id: str
    generation_id: int


class CommitTarget(Protocol):
    """What the commits scenario needs of a target: ours, the peer, or a cluster of ours."""

    name: str
    # Processes whose CPU time the measured loops report (name -> pid), and the started
    # processes the target does not use, whose CPU time is reported together as "others".
    watched: dict[str, int]
    others: list[int]

    async def group_names(self, prefix: str, count: int) -> list[str]:
        """`count` group ids for a scenario's groups (a cluster picks them so that every node
        coordinates its share)."""
        ...

    async def ready(self, groups: list[str]) -> None:
        """Return once the coordinator of each group answers as a coordinator (not loading,
        not NOT_COORDINATOR, its offsets topic there)."""

    async def commit_loop(
        self,
        specs: list[CommitSpec],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun: ...

    async def close(self) -> None: ...


class Target(CommitTarget, Protocol):
    """A target of every scenario: group membership and heartbeats too."""

    async def join(
        self,
        index: int,
        group: str,
        member_id: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        metadata: bytes,
    ) -> JoinAnswer: ...

    async def sync(
        self,
        index: int,
        group: str,
        generation_id: int,
        member_id: str,
        assignments: list[tuple[str, bytes]],
    ) -> tuple[int, bytes]: ...

    async def heartbeat(
        self, index: int, group: str, generation_id: int, member_id: str
    ) -> int: ...

    async def leave(self, group: str, members: list[tuple[int, str]]) -> None:
        """The members (index, member id) leave the group, so that no session of theirs
        expires later, while another target is measured on the same core."""

    async def heartbeat_loop(
        self,
        specs: list[HeartbeatSpec],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun: ...


def commit_template(spec: CommitSpec) -> RequestTemplate:
    """Our OffsetCommit of `spec`, pre-encoded."""
    return RequestTemplate(
        8,
        {
            "group_id": spec.group,
            "generation_id_or_member_epoch": spec.generation_id,
            "member_id": spec.member_id,
            "topics": [
                {
                    "name": spec.topic,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": 1000 + p,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                        for p in range(spec.partitions)
                    ],
                }
            ],
        },
    )


def numbered_groups(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i}" for i in range(count)]


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host or "127.0.0.1", int(port)


class OursTarget:
    name = "ours"

    def __init__(
        self,
        host: str,
        port: int,
        connections: list[WireConnection],
        security: ClientSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.security = security
        self._connections = connections
        self.watched: dict[str, int] = {}
        self.others: list[int] = []

    @classmethod
    async def connect(
        cls, address: str, connections: int = 8, security: ClientSecurity | None = None
    ) -> OursTarget:
        host, port = parse_address(address)
        opened = [await WireConnection.open(host, port, security) for _ in range(connections)]
        return cls(host, port, opened, security)

    def _connection(self, index: int) -> WireConnection:
        return self._connections[index % len(self._connections)]

    async def group_names(self, prefix: str, count: int) -> list[str]:
        return numbered_groups(prefix, count)

    async def ready(self, groups: list[str]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = list(groups)
        while waiting:
            body = await self._connection(0).request(15, {"groups": waiting})
            waiting = [
                group["group_id"]
                for group in body.get("groups") or ()
                if group.get("error_code") in NOT_READY
            ]
            if waiting:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"ours: {len(waiting)} groups' coordinator never ready")
                await asyncio.sleep(READY_RETRY_S)

    async def join(
        self,
        index: int,
        group: str,
        member_id: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        metadata: bytes,
    ) -> JoinAnswer:
        body = await self._connection(index).request(
            11,
            {
                "group_id": group,
                "session_timeout_ms": session_timeout_ms,
                "rebalance_timeout_ms": rebalance_timeout_ms,
                "member_id": member_id,
                "group_instance_id": None,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": PROTOCOL_NAME, "metadata": metadata}],
            },
        )
        return JoinAnswer(
            error_code=body["error_code"],
            generation_id=body.get("generation_id", -1),
            member_id=body.get("member_id") or "",
            leader=body.get("leader") or "",
            members=[m["member_id"] for m in body.get("members") or ()],
        )

    async def sync(
        self,
        index: int,
        group: str,
        generation_id: int,
        member_id: str,
        assignments: list[tuple[str, bytes]],
    ) -> tuple[int, bytes]:
        body = await self._connection(index).request(
            14,
            {
                "group_id": group,
                "generation_id": generation_id,
                "member_id": member_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": PROTOCOL_NAME,
                "assignments": [{"member_id": m, "assignment": a} for m, a in assignments],
            },
        )
        return body["error_code"], body.get("assignment") or b""

    async def heartbeat(self, index: int, group: str, generation_id: int, member_id: str) -> int:
        body = await self._connection(index).request(
            12, {"group_id": group, "generation_id": generation_id, "member_id": member_id}
        )
        return int(body["error_code"])

    async def leave(self, group: str, members: list[tuple[int, str]]) -> None:
        if members:
            await self._connection(0).request(
                13,
                {"group_id": group, "members": [{"member_id": m} for _, m in members]},
            )

    async def _loop(
        self,
        templates: list[RequestTemplate],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
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
            security=self.security,
        )

    async def commit_loop(
        self,
        specs: list[CommitSpec],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        templates = [commit_template(spec) for spec in specs]
        return await self._loop(templates, inflight, connections, warmup_s, duration_s)

    async def heartbeat_loop(
        self,
        specs: list[HeartbeatSpec],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        templates = [
            RequestTemplate(
                12,
                {
                    "group_id": spec.group,
                    "generation_id": spec.generation_id,
                    "member_id": spec.member_id,
                },
            )
            for spec in specs
        ]
        return await self._loop(templates, inflight, connections, warmup_s, duration_s)

    async def describe_members(self, group: str) -> int:
        body = await self._connection(0).request(15, {"groups": [group]})
        groups = body.get("groups") or []
        return len(groups[0].get("members") or []) if groups else 0

    async def close(self) -> None:
        for connection in self._connections:
            connection.close()


_KAFKA_INT32 = struct.Struct(">i")


async def _ensure_topic(address: str, partitions: int) -> None:
    """A Kafka coordinator refuses commits to a topic (or partition) that does not exist."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=address, request_timeout_ms=30000)
    forbid_auto_topic_creation(admin._client)
    await admin.start()
    try:
        if TOPIC not in await admin.list_topics():
            await admin.create_topics([NewTopic(TOPIC, max(partitions, TOPIC_PARTITIONS), 1)])
    finally:
        await admin.close()


async def find_coordinator(
    address: str, timeout_s: float = READY_TIMEOUT_S, security: ClientSecurity | None = None
) -> tuple[str, int]:
    """The group coordinator a Kafka broker names (FindCoordinator), asked again while it is
    not available: Apache Kafka answers COORDINATOR_NOT_AVAILABLE until its
    `__consumer_offsets` exists, which the first FindCoordinator has it create. The broker
    names the coordinator's endpoint on the listener asked."""
    from aiokafka.conn import create_conn
    from aiokafka.protocol.coordination import FindCoordinatorRequest

    host, port = parse_address(address)
    deadline = time.monotonic() + timeout_s
    connection = await create_conn(
        host, port, client_id="bench", request_timeout_ms=120000, **aiokafka_settings(security)
    )
    try:
        while True:
            answer = await connection.send(FindCoordinatorRequest("bench", 0))
            if answer.error_code == 0:
                return str(answer.host), int(answer.port)
            if answer.error_code not in NOT_READY or time.monotonic() > deadline:
                raise RuntimeError(
                    f"FindCoordinator at {address} failed with error {answer.error_code}"
                )
            await asyncio.sleep(READY_RETRY_S)
    finally:
        connection.close()


class KafkaRequestTemplate:
    """A Kafka request frame (length, header, body) split around its correlation id."""

    __slots__ = ("head", "tail")

    def __init__(self, request: Any, client_id: str = "bench") -> None:
        header = request.build_request_header(correlation_id=0, client_id=client_id)
        message = header.encode() + request.encode()
        frame = _KAFKA_INT32.pack(len(message)) + message
        # Length (4), api_key (2), api_version (2), then the correlation id.
        self.head = frame[:8]
        self.tail = frame[12:]


class PeerTarget:
    """A Kafka-protocol coordinator through aiokafka's protocol classes, every connection
    secured as `security` says (None: PLAINTEXT)."""

    name = "peer"

    def __init__(self, host: str, port: int, security: ClientSecurity | None = None) -> None:
        self.host = host
        self.port = port
        self.security = security
        self.watched: dict[str, int] = {}
        self.others: list[int] = []
        self._members: dict[int, Any] = {}
        self._shared: list[Any] = []
        self._opening: dict[int, asyncio.Future[Any]] = {}

    @classmethod
    async def connect(
        cls,
        address: str,
        partitions: int = TOPIC_PARTITIONS,
        timeout_s: float = READY_TIMEOUT_S,
        security: ClientSecurity | None = None,
        admin_address: str | None = None,
    ) -> PeerTarget:
        """`partitions`: the most partitions of the benchmark topic a commit names.
        `admin_address`: a PLAINTEXT listener of the broker's own principal, which creates
        the topic (the benchmark's principal may only read and write it); `address` itself
        when not given."""
        host, port = await find_coordinator(address, timeout_s, security)
        await _ensure_topic(admin_address or address, partitions)
        return cls(host, port, security)

    async def group_names(self, prefix: str, count: int) -> list[str]:
        return numbered_groups(prefix, count)

    async def ready(self, groups: list[str]) -> None:
        # A heartbeat of no member probes a group's coordinator: what it answers once ready
        # (UNKNOWN_MEMBER_ID, say) is not what it answers before. (DescribeGroups would do in
        # one request, but aiokafka decodes Kafka's v3 answer with v2's schema.)
        from aiokafka.protocol.group import HeartbeatRequest

        connection = await self._open()
        self._shared.append(connection)
        deadline = time.monotonic() + READY_TIMEOUT_S
        waiting = list(groups)
        while waiting:
            answers = await asyncio.gather(
                *(connection.send(HeartbeatRequest(group, -1, "")) for group in waiting)
            )
            waiting = [
                group
                for group, answer in zip(waiting, answers, strict=True)
                if answer.error_code in NOT_READY
            ]
            if waiting:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"peer: {len(waiting)} groups' coordinator never ready")
                await asyncio.sleep(READY_RETRY_S)

    async def _open(self) -> Any:
        from aiokafka.conn import create_conn

        return await create_conn(
            self.host,
            self.port,
            client_id="bench",
            request_timeout_ms=300000,
            **aiokafka_settings(self.security),
        )

    async def _member_connection(self, index: int) -> Any:
        connection = self._members.get(index)
        if connection is not None:
            return connection
        opening = self._opening.get(index)
        if opening is None:
            opening = self._opening[index] = asyncio.ensure_future(self._open())
        connection = await opening
        self._members[index] = connection
        return connection

    async def join(
        self,
        index: int,
        group: str,
        member_id: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        metadata: bytes,
    ) -> JoinAnswer:
        from aiokafka.protocol.group import JoinGroupRequest

        connection = await self._member_connection(index)
        answer = await connection.send(
            JoinGroupRequest(
                group,
                session_timeout_ms,
                rebalance_timeout_ms,
                member_id,
                None,
                PROTOCOL_TYPE,
                [(PROTOCOL_NAME, metadata)],
            )
        )
        return JoinAnswer(
            error_code=answer.error_code,
            generation_id=answer.generation_id,
            member_id=answer.member_id,
            leader=answer.leader_id,
            members=[m[0] for m in answer.members],
        )

    async def sync(
        self,
        index: int,
        group: str,
        generation_id: int,
        member_id: str,
        assignments: list[tuple[str, bytes]],
    ) -> tuple[int, bytes]:
        from aiokafka.protocol.group import SyncGroupRequest

        connection = await self._member_connection(index)
        answer = await connection.send(
            SyncGroupRequest(group, generation_id, member_id, None, assignments)
        )
        return answer.error_code, answer.member_assignment

    async def heartbeat(self, index: int, group: str, generation_id: int, member_id: str) -> int:
        from aiokafka.protocol.group import HeartbeatRequest

        connection = await self._member_connection(index)
        answer = await connection.send(HeartbeatRequest(group, generation_id, member_id))
        return int(answer.error_code)

    async def leave(self, group: str, members: list[tuple[int, str]]) -> None:
        from aiokafka.protocol.group import LeaveGroupRequest

        async def leave_one(index: int, member_id: str) -> None:
            connection = await self._member_connection(index)
            await connection.send(LeaveGroupRequest(group, member_id))

        await asyncio.gather(*(leave_one(index, member_id) for index, member_id in members))

    async def _loop(
        self,
        requests: list[Any],
        check: Callable[[Any], int],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        """Requests encoded once by aiokafka's protocol classes at the versions the
        coordinator offers, pipelined over raw connections; an answer is decoded by aiokafka
        only when its bytes differ from the last good answer to the same request."""
        versions_connection = await self._open()
        try:
            structs = [request.prepare(versions_connection._versions) for request in requests]
        finally:
            versions_connection.close()
        templates = [KafkaRequestTemplate(struct) for struct in structs]
        good: dict[int, bytes] = {}

        def parse(payload: bytes) -> tuple[int, bytes]:
            return _KAFKA_INT32.unpack_from(payload, 0)[0], payload[4:]

        def check_answer(body: bytes, index: int) -> int:
            if good.get(index) == body:
                return 0
            code = check(structs[index].RESPONSE_TYPE.decode(body))
            if code == 0:
                good[index] = body
            return code

        return await run_loops(
            self.host,
            self.port,
            list(templates),
            parse,
            check_answer,
            inflight,
            connections,
            warmup_s,
            duration_s,
            self.watched,
            self.others,
            security=self.security,
            opener=open_kafka_secured,
        )

    async def commit_loop(
        self,
        specs: list[CommitSpec],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        from aiokafka.protocol.commit import OffsetCommitRequest

        requests = [
            OffsetCommitRequest(
                spec.group,
                spec.generation_id,
                spec.member_id,
                -1,
                [(spec.topic, [(p, 1000 + p, "") for p in range(spec.partitions)])],
            )
            for spec in specs
        ]

        def check(answer: Any) -> int:
            for _, partitions in answer.topics:
                for partition in partitions:
                    if partition[-1]:
                        return int(partition[-1])
            return 0

        return await self._loop(requests, check, inflight, connections, warmup_s, duration_s)

    async def heartbeat_loop(
        self,
        specs: list[HeartbeatSpec],
        inflight: int,
        connections: int,
        warmup_s: float,
        duration_s: float,
    ) -> LoopRun:
        from aiokafka.protocol.group import HeartbeatRequest

        requests = [
            HeartbeatRequest(spec.group, spec.generation_id, spec.member_id) for spec in specs
        ]
        return await self._loop(
            requests,
            lambda answer: int(answer.error_code),
            inflight,
            connections,
            warmup_s,
            duration_s,
        )

    async def close(self) -> None:
        for connection in [*self._members.values(), *self._shared]:
            connection.close()
        self._members.clear()
        self._shared.clear()


__all__ = [
    "CommitSpec",
    "CommitTarget",
    "HeartbeatSpec",
    "JoinAnswer",
    "OursTarget",
    "PeerTarget",
    "Target",
    "find_coordinator",
    "first_error",
]
