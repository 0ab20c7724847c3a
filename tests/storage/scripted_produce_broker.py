"""A scripted broker for the sender's idempotent appends: it reads ProduceRequests (v3) as
Kafka does, records the producer fields of every batch, and answers what the test says
(the answers no healthy broker gives on demand: OUT_OF_ORDER_SEQUENCE_NUMBER, a fenced
producer, silence). Also: reading back the batches of a real broker's partition."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from coordinator_server.storage.kafka.produce import Leader, ProduceSender

PRODUCER_ID = 4000


def batch_of(*records: tuple[bytes, bytes]) -> bytes:
    """A batch built as the log builds it before it knows its sequence."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, PRODUCER_ID, 0, 0, 1 << 20)
    for offset, (key, value) in enumerate(records):
        builder.append(offset, 0, key, value, [])
    return bytes(builder.build())


# A scripted broker: reads ProduceRequests (v3) as Kafka does and answers what the test says.


@dataclass
class Sent:
    correlation_id: int
    # partition -> (producer id, epoch, base sequence, record count, raw batch)
    batches: dict[int, tuple[int, int, int, int, bytes]]


def parse_produce(payload: bytes) -> Sent:
    api_key, version, correlation_id, client_id_length = struct.unpack_from(">hhih", payload, 0)
    assert (api_key, version) == (0, 3)
    position = 10 + client_id_length + 12
    (name_length,) = struct.unpack_from(">h", payload, position)
    position += 2 + name_length
    (partitions,) = struct.unpack_from(">i", payload, position)
    position += 4
    batches = {}
    for _ in range(partitions):
        partition, size = struct.unpack_from(">ii", payload, position)
        position += 8
        raw = payload[position : position + size]
        position += size
        batch = MemoryRecords(raw).next_batch()
        assert batch is not None and batch.validate_crc()
        count = len(list(batch))
        batches[partition] = (
            batch.producer_id,
            batch.producer_epoch,
            batch.base_sequence,
            count,
            raw,
        )
    return Sent(correlation_id, batches)


def answer(correlation_id: int, results: dict[int, tuple[int, int]]) -> bytes:
    """A ProduceResponse v3: partition -> (error code, base offset)."""
    body = struct.pack(">iih", correlation_id, 1, 3) + b"log" + struct.pack(">i", len(results))
    for partition, (error_code, base_offset) in results.items():
        body += struct.pack(">ihqq", partition, error_code, base_offset, -1)
    body += struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


Script = Callable[[Sent], dict[int, tuple[int, int]] | None]


def answering(*answers: dict[int, tuple[int, int]] | None) -> Script:
    """Answers these, one per request, in turn (None: no answer)."""
    queue = list(answers)
    return lambda request: queue.pop(0)


@dataclass
class ScriptedBroker:
    script: Script
    requests: list[Sent] = field(default_factory=list)
    server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                request = parse_produce(await reader.readexactly(size))
                self.requests.append(request)
                results = self.script(request)
                if results is not None:
                    writer.write(answer(request.correlation_id, results))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def stamps(broker: ScriptedBroker, partition: int = 0) -> list[tuple[int, int, int, int]]:
    return [r.batches[partition][:4] for r in broker.requests if partition in r.batches]


def submit(
    sender: ProduceSender, partition: int, *records: tuple[bytes, bytes]
) -> asyncio.Future[int]:
    return sender.submit(partition, batch_of(*records), len(records))


def keys(raw: bytes) -> list[bytes | None]:
    batch = MemoryRecords(raw).next_batch()
    assert batch is not None
    return [record.key for record in batch]


async def read_batches(
    bootstrap: str, topic: str, partition: int
) -> list[tuple[int, int, int, list[tuple[bytes | None, bytes | None]]]]:
    """(producer id, epoch, base sequence, records) of every batch of the partition."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        leader = client.cluster.leader_for_partition(TopicPartition(topic, partition))
        assert leader is not None
        batches = []
        offset = 0
        while True:
            request = FetchRequest(100, 1, 1 << 20, 0, [(topic, [(partition, offset, 1 << 20)])])
            response = await client.send(leader, request)
            data = response.topics[0][1][0]
            high_watermark, raw = data[2], data[-1]
            records = MemoryRecords(raw) if raw else None
            while records is not None:
                batch = records.next_batch()
                if batch is None:
                    break
                batches.append(
                    (
                        batch.producer_id,
                        batch.producer_epoch,
                        batch.base_sequence,
                        [(r.key, r.value) for r in batch],
                    )
                )
                offset = batch.next_offset
            if offset >= high_watermark:
                return batches
    finally:
        await client.close()


async def start_sender(
    broker: ScriptedBroker,
    *,
    request_timeout_ms: int = 2000,
    delivery_timeout_ms: int = 6000,
    **options: Any,
) -> ProduceSender:
    """A sender whose four partitions the scripted broker (started here) leads; `options`
    go to ProduceSender (its producer)."""
    broker.server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    host, port = broker.server.sockets[0].getsockname()[:2]

    async def metadata() -> dict[int, Leader]:
        return dict.fromkeys(range(4), Leader(1, host, port))

    sender = ProduceSender(
        "log",
        metadata,
        client_id="coordinator-test",
        request_timeout_ms=request_timeout_ms,
        max_inflight_requests=1,
        max_request_bytes=1 << 20,
        delivery_timeout_ms=delivery_timeout_ms,
        **options,
    )
    await sender.start()
    return sender
