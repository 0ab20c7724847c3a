"""Kafka's consumer group protocol (KIP-848) as the bench speaks it to a Kafka broker:
ConsumerGroupHeartbeat (68) versions 0 and 1 and ConsumerGroupDescribe (69) version 0, built
on aiokafka's protocol classes, and a raw connection that keeps many requests in flight.

aiokafka defines neither API. Both are flexible versions only (compact strings and arrays,
tagged fields) and name topics by uuid (`cluster_topics.Uuid`). A heartbeat answer's
`Assignment` is a nullable struct, which Kafka writes as one signed byte (-1: null, 1: a
struct follows) before the struct's fields; `NullableAssignment` reads it.

Version 1 of ConsumerGroupHeartbeat adds the subscribed regular expression and has the member
make up its own id (KIP-1082); version 0 takes the id the coordinator gives in its first
answer. `ConsumerGroupHeartbeat` is built at the newest of the two the broker offers.

`KafkaWire` writes each request's frame as soon as it is asked for and matches the answers by
correlation id. A Kafka broker reads a connection's requests one at a time (the next once the
previous is answered), so requests on one connection queue in the broker, not here.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from io import BytesIO
from typing import Any, cast

from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int8,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from coordinator_protocol.framing import FrameDecoder
from coordinator_server.storage.kafka.cluster_topics import Uuid

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69

_INT32 = struct.Struct(">i")
_TOPIC_PARTITIONS = CompactArray(
    ("topic_id", Uuid),
    ("partitions", CompactArray(Int32)),
    ("tags", TaggedFields),
)
_ASSIGNMENT = Schema(("topic_partitions", _TOPIC_PARTITIONS), ("tags", TaggedFields))


class NullableAssignment(AbstractType[Any]):  # type: ignore[misc]
    """A heartbeat answer's assignment: None, or (topic_partitions, tags)."""

    @classmethod
    def encode(cls, value: Any) -> bytes:
        if value is None:
            return cast(bytes, Int8.encode(-1))
        return cast(bytes, Int8.encode(1) + _ASSIGNMENT.encode(value))

    @classmethod
    def decode(cls, data: BytesIO) -> Any:
        if Int8.decode(data) < 0:
            return None
        return _ASSIGNMENT.decode(data)


def _heartbeat_response_schema() -> Schema:
    return Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("error_message", CompactString("utf-8")),
        ("member_id", CompactString("utf-8")),
        ("member_epoch", Int32),
        ("heartbeat_interval_ms", Int32),
        ("assignment", NullableAssignment),
        ("tags", TaggedFields),
    )


class ConsumerGroupHeartbeatResponse_v0(Response):  # type: ignore[misc]
    API_KEY = CONSUMER_GROUP_HEARTBEAT
    API_VERSION = 0
    SCHEMA = _heartbeat_response_schema()


class ConsumerGroupHeartbeatResponse_v1(Response):  # type: ignore[misc]
    API_KEY = CONSUMER_GROUP_HEARTBEAT
    API_VERSION = 1
    SCHEMA = _heartbeat_response_schema()


def _heartbeat_request_schema(with_regex: bool) -> Schema:
    fields: list[tuple[str, Any]] = [
        ("group_id", CompactString("utf-8")),
        ("member_id", CompactString("utf-8")),
        ("member_epoch", Int32),
        ("instance_id", CompactString("utf-8")),
        ("rack_id", CompactString("utf-8")),
        ("rebalance_timeout_ms", Int32),
        ("subscribed_topic_names", CompactArray(CompactString("utf-8"))),
    ]
    if with_regex:
        fields.append(("subscribed_topic_regex", CompactString("utf-8")))
    fields += [
        ("server_assignor", CompactString("utf-8")),
        ("topic_partitions", _TOPIC_PARTITIONS),
        ("tags", TaggedFields),
    ]
    return Schema(*fields)


class ConsumerGroupHeartbeatRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = CONSUMER_GROUP_HEARTBEAT
    API_VERSION = 0
    RESPONSE_TYPE = ConsumerGroupHeartbeatResponse_v0
    SCHEMA = _heartbeat_request_schema(with_regex=False)


class ConsumerGroupHeartbeatRequest_v1(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = CONSUMER_GROUP_HEARTBEAT
    API_VERSION = 1
    RESPONSE_TYPE = ConsumerGroupHeartbeatResponse_v1
    SCHEMA = _heartbeat_request_schema(with_regex=True)


HeartbeatStruct = ConsumerGroupHeartbeatRequest_v0 | ConsumerGroupHeartbeatRequest_v1


class ConsumerGroupHeartbeat(Request[HeartbeatStruct]):  # type: ignore[misc]
    """One heartbeat. `topic_partitions`: (topic id, partitions) pairs, None when unchanged
    since the member's last heartbeat; `subscribed_topic_names` None likewise."""

    API_KEY = CONSUMER_GROUP_HEARTBEAT

    def __init__(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        rebalance_timeout_ms: int = -1,
        subscribed_topic_names: list[str] | None = None,
        topic_partitions: list[tuple[bytes, list[int]]] | None = None,
    ) -> None:
        self.group_id = group_id
        self.member_id = member_id
        self.member_epoch = member_epoch
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.subscribed_topic_names = subscribed_topic_names
        self.topic_partitions = topic_partitions

    def build(self, request_struct_class: type[HeartbeatStruct]) -> HeartbeatStruct:
        partitions: list[tuple[bytes, list[int], dict[int, bytes]]] | None = (
            None
            if self.topic_partitions is None
            else [(topic_id, list(parts), {}) for topic_id, parts in self.topic_partitions]
        )
        head = (
            self.group_id,
            self.member_id,
            self.member_epoch,
            None,
            None,
            self.rebalance_timeout_ms,
            self.subscribed_topic_names,
        )
        if request_struct_class.API_VERSION >= 1:
            return request_struct_class(*head, None, None, partitions, {})
        return request_struct_class(*head, None, partitions, {})


_DESCRIBE_ASSIGNMENT = Schema(
    (
        "topic_partitions",
        CompactArray(
            ("topic_id", Uuid),
            ("topic_name", CompactString("utf-8")),
            ("partitions", CompactArray(Int32)),
            ("tags", TaggedFields),
        ),
    ),
    ("tags", TaggedFields),
)


class ConsumerGroupDescribeResponse_v0(Response):  # type: ignore[misc]
    API_KEY = CONSUMER_GROUP_DESCRIBE
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "groups",
            CompactArray(
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("group_id", CompactString("utf-8")),
                ("group_state", CompactString("utf-8")),
                ("group_epoch", Int32),
                ("assignment_epoch", Int32),
                ("assignor_name", CompactString("utf-8")),
                (
                    "members",
                    CompactArray(
                        ("member_id", CompactString("utf-8")),
                        ("instance_id", CompactString("utf-8")),
                        ("rack_id", CompactString("utf-8")),
                        ("member_epoch", Int32),
                        ("client_id", CompactString("utf-8")),
                        ("client_host", CompactString("utf-8")),
                        ("subscribed_topic_names", CompactArray(CompactString("utf-8"))),
                        ("subscribed_topic_regex", CompactString("utf-8")),
                        ("assignment", _DESCRIBE_ASSIGNMENT),
                        ("target_assignment", _DESCRIBE_ASSIGNMENT),
                        ("tags", TaggedFields),
                    ),
                ),
                ("authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class ConsumerGroupDescribeRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = CONSUMER_GROUP_DESCRIBE
    API_VERSION = 0
    RESPONSE_TYPE = ConsumerGroupDescribeResponse_v0
    SCHEMA = Schema(
        ("group_ids", CompactArray(CompactString("utf-8"))),
        ("include_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class ConsumerGroupDescribe(Request[ConsumerGroupDescribeRequest_v0]):  # type: ignore[misc]
    API_KEY = CONSUMER_GROUP_DESCRIBE

    def __init__(self, group_ids: list[str]) -> None:
        self.group_ids = group_ids

    def build(
        self, request_struct_class: type[ConsumerGroupDescribeRequest_v0]
    ) -> ConsumerGroupDescribeRequest_v0:
        return request_struct_class(self.group_ids, False, {})


def response_body(request: RequestStruct, payload: bytes) -> tuple[int, BytesIO]:
    """A response frame's correlation id and its body, past the header (whose tagged fields
    follow the correlation id in a flexible version)."""
    buffer = BytesIO(payload)
    header = request.parse_response_header(buffer)
    return int(header.correlation_id), buffer


def frame_of(request: RequestStruct, correlation_id: int, client_id: str) -> bytes:
    header = request.build_request_header(correlation_id=correlation_id, client_id=client_id)
    message = header.encode() + request.encode()
    return cast(bytes, _INT32.pack(len(message)) + message)


class KafkaWire(asyncio.Protocol):
    """One connection to a Kafka broker; `send` returns the decoded answer."""

    def __init__(self, client_id: str = "bench") -> None:
        self.client_id = client_id
        self.transport: asyncio.Transport | None = None
        self._decoder = FrameDecoder(64 * 1024 * 1024)
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[RequestStruct, asyncio.Future[Any]]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        for _, future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError("the broker closed the connection"))
        self._pending.clear()

    def data_received(self, data: bytes) -> None:
        for payload in self._decoder.feed(data):
            correlation_id = _INT32.unpack_from(payload, 0)[0]
            pending = self._pending.pop(correlation_id, None)
            if pending is None:
                continue
            request, future = pending
            if future.done():
                continue
            try:
                _, body = response_body(request, payload)
                future.set_result(request.RESPONSE_TYPE.decode(body))
            except Exception as error:
                future.set_exception(error)

    def send(self, request: RequestStruct) -> asyncio.Future[Any]:
        if self.transport is None or self.transport.is_closing():
            raise ConnectionError("the connection to the broker is closed")
        correlation_id = next(self._correlation)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = (request, future)
        self.transport.write(frame_of(request, correlation_id, self.client_id))
        return future

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def open_kafka_wire(host: str, port: int) -> KafkaWire:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(KafkaWire, host, port)
    return protocol
