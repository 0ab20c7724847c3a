"""ProduceSender: how appends become ProduceRequests, and what it does when a broker
refuses, drops or ignores them.

A real broker (Apache Kafka) covers the happy path; the error answers no
healthy test broker gives on demand (NOT_LEADER_OR_FOLLOWER, silence) come from a scripted
broker on a real socket that reads our requests byte by byte as Kafka would.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from kafka_broker import KafkaBroker

from coordinator_server.storage.api import AppendError
from coordinator_server.storage.kafka.log import KafkaLog
from coordinator_server.storage.kafka.produce import Leader, ProduceSender

pytestmark = pytest.mark.timeout(60)


def batch_of(*records: tuple[bytes, bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for offset, (key, value) in enumerate(records):
        builder.append(offset, 0, key, value, [])
    return bytes(builder.build())


@dataclass
class ProducedRequest:
    correlation_id: int
    client_id: str
    acks: int
    timeout_ms: int
    topic: str
    # partition -> the records of its batch, as (key, value)
    batches: dict[int, list[tuple[bytes, bytes | None]]]


def parse_produce_v3(payload: bytes) -> ProducedRequest:
    """A ProduceRequest v3 as a Kafka broker reads it."""
    api_key, version, correlation_id, client_id_length = struct.unpack_from(">hhih", payload, 0)
    assert (api_key, version) == (0, 3)
    position = 10
    client_id = payload[position : position + client_id_length].decode()
    position += client_id_length
    transactional_id_length, acks, timeout_ms, topics = struct.unpack_from(
        ">hhii", payload, position
    )
    assert transactional_id_length == -1
    position += 12
    assert topics == 1
    (name_length,) = struct.unpack_from(">h", payload, position)
    position += 2
    topic = payload[position : position + name_length].decode()
    position += name_length
    (partitions,) = struct.unpack_from(">i", payload, position)
    position += 4
    batches: dict[int, list[tuple[bytes, bytes | None]]] = {}
    for _ in range(partitions):
        partition, size = struct.unpack_from(">ii", payload, position)
        position += 8
        records = MemoryRecords(payload[position : position + size])
        position += size
        batch = records.next_batch()
        assert batch is not None and batch.validate_crc()
        batches[partition] = [(r.key, r.value) for r in batch]
    assert position == len(payload)
    return ProducedRequest(correlation_id, client_id, acks, timeout_ms, topic, batches)


def produce_response_v3(
    correlation_id: int, topic: str, results: dict[int, tuple[int, int]]
) -> bytes:
    """results: partition -> (error code, base offset)."""
    name = topic.encode()
    body = struct.pack(">i", correlation_id) + struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">i", len(results))
    for partition, (error_code, base_offset) in results.items():
        body += struct.pack(">ihqq", partition, error_code, base_offset, -1)
    body += struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


Script = Callable[[ProducedRequest], dict[int, tuple[int, int]] | None]
"""What the scripted broker answers to a request; None: it does not answer."""


@dataclass
class ScriptedBroker:
    script: Script
    requests: list[ProducedRequest] = field(default_factory=list)
    server: asyncio.Server | None = None
    connections: int = 0
    # While set, answers wait in `held` until `release()`.
    holding: bool = False
    held: list[tuple[asyncio.StreamWriter, bytes]] = field(default_factory=list)

    @property
    def leader(self) -> Leader:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return Leader(1, host, port)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                request = parse_produce_v3(await reader.readexactly(size))
                self.requests.append(request)
                results = self.script(request)
                if results is None:
                    continue
                answer = produce_response_v3(request.correlation_id, request.topic, results)
                if self.holding:
                    self.held.append((writer, answer))
                else:
                    writer.write(answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def release(self) -> None:
        self.holding = False
        for writer, answer in self.held:
            writer.write(answer)
        self.held.clear()


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Script], ScriptedBroker]]:
    brokers: list[ScriptedBroker] = []

    def make(script: Script) -> ScriptedBroker:
        broker = ScriptedBroker(script)
        brokers.append(broker)
        return broker

    yield make
    for broker in brokers:
        if broker.server is not None:
            broker.server.close()


async def started(broker: ScriptedBroker, **options: int) -> tuple[ProduceSender, list[int]]:
    broker.server = await asyncio.start_server(broker.serve, "127.0.0.1", 0)
    lookups: list[int] = []

    async def metadata() -> dict[int, Leader]:
        lookups.append(1)
        return dict.fromkeys(range(8), broker.leader)

    sender = ProduceSender(
        "log",
        metadata,
        client_id="coordinator-test",
        request_timeout_ms=options.get("request_timeout_ms", 2000),
        max_inflight_requests=options.get("max_inflight_requests", 1),
        max_request_bytes=1 << 20,
    )
    await sender.start()
    return sender, lookups


def offsets_from(start: Callable[[ProducedRequest], int]) -> Script:
    return lambda request: {p: (0, start(request)) for p in request.batches}


async def test_appends_of_one_turn_leave_in_one_request_with_acks_all(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    broker = scripted(offsets_from(lambda _: 10))
    sender, _ = await started(broker)
    try:
        ends = await asyncio.gather(
            *(sender.submit(p, batch_of((b"k%d" % p, b"v")) * 1, 1) for p in range(8))
        )
        assert ends == [11] * 8
        assert len(broker.requests) == 1
        request = broker.requests[0]
        assert (request.acks, request.timeout_ms, request.topic) == (-1, 2000, "log")
        assert request.client_id == "coordinator-test"
        assert request.batches == {p: [(b"k%d" % p, b"v")] for p in range(8)}
    finally:
        await sender.close()


async def test_a_partition_has_one_batch_on_the_way_and_keeps_its_order(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    next_offset: dict[int, int] = {}

    def log_end(request: ProducedRequest) -> dict[int, tuple[int, int]]:
        results = {}
        for partition, records in request.batches.items():
            results[partition] = (0, next_offset.get(partition, 0))
            next_offset[partition] = results[partition][1] + len(records)
        return results

    broker = scripted(log_end)
    broker.holding = True
    sender, _ = await started(broker, max_inflight_requests=5)
    try:
        first = sender.submit(0, batch_of((b"a", b"1"), (b"b", b"1")), 2)
        second = sender.submit(0, batch_of((b"a", b"2")), 1)
        other = sender.submit(1, batch_of((b"c", b"1")), 1)
        await asyncio.sleep(0.1)
        # Room for five requests, but partition 0 has a batch on the way already.
        assert len(broker.requests) == 1
        broker.release()
        assert await asyncio.gather(first, second, other) == [2, 3, 1]
        # The second batch of partition 0 waited for the first one's answer.
        assert [sorted(r.batches) for r in broker.requests] == [[0, 1], [0]]
        assert broker.requests[1].batches[0] == [(b"a", b"2")]
    finally:
        await sender.close()


async def test_a_batch_refused_by_a_former_leader_goes_again_after_a_lookup(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    answers = iter([{0: (6, -1)}, {0: (0, 40)}])
    broker = scripted(lambda request: next(answers))
    sender, lookups = await started(broker)
    try:
        assert await sender.submit(0, batch_of((b"k", b"v")), 1) == 41
        assert len(broker.requests) == 2
        assert broker.requests[0].batches == broker.requests[1].batches
        assert len(lookups) == 2
    finally:
        await sender.close()


async def test_a_broker_that_moves_to_another_address_gets_its_batches_there(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    """A lookup finds node 1 at a new address (a restarted broker, a new pod): batches go
    there, and what was on the way to the old address fails, its fate unknown."""
    old = scripted(lambda request: None)
    new = scripted(offsets_from(lambda _: 70))
    old.server = await asyncio.start_server(old.serve, "127.0.0.1", 0)
    new.server = await asyncio.start_server(new.serve, "127.0.0.1", 0)
    # Partition 9 has no leader until the broker has moved.
    leaders = [dict.fromkeys(range(8), old.leader)]

    async def metadata() -> dict[int, Leader]:
        return leaders[0]

    sender = ProduceSender(
        "log",
        metadata,
        client_id="coordinator-test",
        request_timeout_ms=30_000,
        max_inflight_requests=1,
        max_request_bytes=1 << 20,
    )
    await sender.start()
    try:
        unanswered = sender.submit(1, batch_of((b"u", b"v")), 1)
        await asyncio.sleep(0.05)
        assert [r.batches for r in old.requests] == [{1: [(b"u", b"v")]}]
        leaders[0] = dict.fromkeys(range(10), new.leader)
        # A partition without a leader makes the sender look the leaders up again.
        assert await asyncio.wait_for(sender.submit(9, batch_of((b"k", b"v")), 1), 10) == 71
        # Lost with the old connection, long before its request timeout.
        with pytest.raises(AppendError) as raised:
            await asyncio.wait_for(unanswered, 10)
        assert raised.value.error_code == 7
        assert [r.batches for r in new.requests] == [{9: [(b"k", b"v")]}]
        # Partition 1 writes again, to the new address, and nothing more to the old one.
        assert await sender.submit(1, batch_of((b"w", b"v")), 1) == 71
        assert len(old.requests) == 1
        assert (old.connections, new.connections) == (1, 1)
    finally:
        await sender.close()


async def test_other_errors_fail_the_append_with_their_code(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    broker = scripted(lambda request: {0: (10, -1), 1: (0, 7)})
    sender, _ = await started(broker)
    try:
        too_large = sender.submit(0, batch_of((b"k", b"v")), 1)
        fine = sender.submit(1, batch_of((b"k", b"v")), 1)
        with pytest.raises(AppendError) as raised:
            await too_large
        assert raised.value.error_code == 10
        assert await fine == 8
    finally:
        await sender.close()


async def test_a_broker_that_does_not_answer_times_out_and_loses_its_connection(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    silent = [True]

    def script(request: ProducedRequest) -> dict[int, tuple[int, int]] | None:
        if silent[0]:
            return None
        return dict.fromkeys(request.batches, (0, 0))

    broker = scripted(script)
    sender, _ = await started(broker, request_timeout_ms=500)
    try:
        began = time.monotonic()
        with pytest.raises(AppendError) as raised:
            await sender.submit(0, batch_of((b"k", b"v")), 1)
        assert raised.value.error_code == 7
        assert time.monotonic() - began < 0.5 + 0.5
        silent[0] = False
        # A new connection carries the next append.
        assert await sender.submit(0, batch_of((b"k", b"v")), 1) == 1
        assert broker.connections == 2
    finally:
        await sender.close()


async def test_close_fails_what_is_outstanding(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    broker = scripted(lambda request: None)
    sender, _ = await started(broker)
    pending = sender.submit(0, batch_of((b"k", b"v")), 1)
    await asyncio.sleep(0.05)
    await sender.close()
    with pytest.raises(AppendError):
        await pending
    with pytest.raises(AppendError):
        await sender.submit(1, batch_of((b"k", b"v")), 1)


@pytest.mark.kafka
async def test_a_real_broker_takes_many_partitions_in_one_request(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    log = KafkaLog(kafka_broker.bootstrap, unique_topic, 20, 1)
    await log.start()
    try:
        ends = await asyncio.gather(
            *(log.append(p, [(b"k%d" % i, b"v") for i in range(p + 1)]) for p in range(20))
        )
        assert ends == [p + 1 for p in range(20)]
        assert await asyncio.gather(*(log.append(p, [(b"x", None)]) for p in range(20))) == [
            p + 2 for p in range(20)
        ]
        loaded: list[tuple[int, bytes, bytes | None]] = []
        await log.load(19, lambda offset, key, value: loaded.append((offset, key, value)))
        assert loaded[-1] == (20, b"x", None)
        assert len(loaded) == 21
    finally:
        await log.close()


async def test_a_broker_with_its_requests_on_the_way_is_backlogged_until_one_returns(
    scripted: Callable[[Script], ScriptedBroker],
) -> None:
    broker = scripted(offsets_from(lambda _: 0))
    broker.holding = True
    sender, _ = await started(broker)
    told: list[bool] = []
    sender.ready_listener = lambda: told.append(sender.backlogged(3))
    try:
        assert not sender.backlogged(3)
        first = sender.submit(0, batch_of((b"k", b"v")), 1)
        await asyncio.sleep(0.1)
        # One request may be on the way (the default), and it is: every partition of
        # that broker is backlogged.
        assert sender.backlogged(0) and sender.backlogged(3)
        broker.release()
        assert await first == 1
        assert told == [False]
    finally:
        await sender.close()
