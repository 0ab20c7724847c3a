"""ProduceRequest and ProduceResponse as the log's sender writes and reads them (Kafka's
`ProduceRequest` and `ProduceResponse`), and the connection that carries them to a broker.

Only what the log sends: one topic, acks=all, no transactional id, record batches that are
finished before they get here (built by aiokafka's batch builder, stamped by the sender).
Versions 3 to 8: their requests are the same, their responses add the partition's log start
offset (v5) and the broker's error message (v8). A connection answers its requests in the
order they were sent (Kafka's guarantee), each answer a size-prefixed frame; what the
answers mean for the appends is the sender's business (`produce`).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Iterable
from typing import Protocol, cast

__all__ = [
    "ACKS_ALL",
    "MAX_RESPONSE_BYTES",
    "PRODUCE_API_KEY",
    "PRODUCE_VERSION",
    "PartitionResponse",
    "ProduceConnection",
    "ResponseHandler",
    "correlation_id_of",
    "encode_produce_request",
    "read_produce_response",
]

log = logging.getLogger(__name__)

PRODUCE_API_KEY = 0
# v3 is the first version that carries record batches (magic 2), and the oldest one Kafka
# 4 still serves; its response has everything an append needs. The log asks the broker and
# uses the newest it can (see kafka_idempotence.choose_produce_version).
PRODUCE_VERSION = 3
ACKS_ALL = -1
# A produce response names each partition once: a few dozen bytes each. Anything this large
# is not one of ours.
MAX_RESPONSE_BYTES = 64 * 1024 * 1024

_HEADER = struct.Struct(">hhih")
_BODY_START = struct.Struct(">hhii")
_PARTITION = struct.Struct(">ii")
_PARTITION_RESULT = struct.Struct(">ihqq")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

PartitionResponse = tuple[int, int, int, str | None]
"""What a ProduceResponse says of one partition: (partition, error code, base offset, the
broker's error message or None)."""


def encode_produce_request(
    version: int,
    correlation_id: int,
    client_id: bytes,
    topic: bytes,
    timeout_ms: int,
    batches: Iterable[tuple[int, bytes]],
) -> bytes:
    """A ProduceRequest frame (size prefix included): one record batch per partition of
    `batches`, all of one topic, acks=all, no transactional id."""
    parts = [
        b"",
        _HEADER.pack(PRODUCE_API_KEY, version, correlation_id, len(client_id)),
        client_id,
        # transactional_id (null), acks, timeout, one topic.
        _BODY_START.pack(-1, ACKS_ALL, timeout_ms, 1),
        len(topic).to_bytes(2, "big"),
        topic,
        b"",
    ]
    count = 0
    for partition, batch in batches:
        parts.append(_PARTITION.pack(partition, len(batch)))
        parts.append(batch)
        count += 1
    parts[6] = _INT32.pack(count)
    size = sum(len(part) for part in parts)
    parts[0] = _INT32.pack(size)
    return b"".join(parts)


def correlation_id_of(payload: bytes) -> int:
    """The correlation id a response frame (size prefix removed) answers."""
    (correlation_id,) = _INT32.unpack_from(payload, 0)
    return int(correlation_id)


def read_produce_response(payload: bytes, version: int) -> list[PartitionResponse]:
    """Every partition a ProduceResponse (v3 to v8, size prefix removed) answers for, in its
    order. Raises struct.error, IndexError or UnicodeDecodeError on a frame that is not one."""
    results: list[PartitionResponse] = []
    position = 4
    (topics,) = _INT32.unpack_from(payload, position)
    position += 4
    for _ in range(topics):
        name_length = int.from_bytes(payload[position : position + 2], "big", signed=True)
        position += 2 + max(name_length, 0)
        (partitions,) = _INT32.unpack_from(payload, position)
        position += 4
        for _ in range(partitions):
            partition, error_code, base_offset, _ = _PARTITION_RESULT.unpack_from(payload, position)
            position += _PARTITION_RESULT.size
            message: str | None = None
            if version >= 5:
                # log_start_offset
                position += 8
            if version >= 8:
                (record_errors,) = _INT32.unpack_from(payload, position)
                position += 4
                for _ in range(max(record_errors, 0)):
                    # batch_index, batch_index_error_message
                    _, position = _read_string(payload, position + 4)
                message, position = _read_string(payload, position)
            results.append((partition, error_code, base_offset, message))
    return results


class ResponseHandler(Protocol):
    """What a connection hands its frames to: the sender's side of one broker."""

    def response(self, connection: ProduceConnection, payload: bytes) -> None:
        """One response frame, size prefix removed; raises ValueError (or what reading it
        raises) when it cannot be one of ours, and the connection is then closed."""
        ...

    def connection_lost(self, connection: ProduceConnection, exc: Exception | None) -> None: ...

    def describe(self) -> str: ...


class ProduceConnection(asyncio.Protocol):
    """One connection to one broker: frames out, responses (in request order) back."""

    def __init__(self, handler: ResponseHandler) -> None:
        self._handler = handler
        self._buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._handler.connection_lost(self, exc)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        while len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big", signed=True)
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                self.abort(f"a response of {size} bytes")
                return
            if len(buffer) < 4 + size:
                return
            payload = bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            try:
                self._handler.response(self, payload)
            except (struct.error, ValueError, IndexError, UnicodeDecodeError) as error:
                self.abort(f"a response that cannot be read: {error!r}")
                return

    def abort(self, reason: str) -> None:
        log.warning("closing the produce connection to %s: %s", self._handler.describe(), reason)
        if self.transport is not None:
            self.transport.abort()


def _read_string(payload: bytes, position: int) -> tuple[str | None, int]:
    """A nullable string (int16 length) and the position after it."""
    (length,) = _INT16.unpack_from(payload, position)
    position += 2
    if length < 0:
        return None, position
    return payload[position : position + length].decode(errors="replace"), position + length
