"""The data cluster's topics with their ids, read from Apache Kafka by MetadataRequest v12:
the ids Kafka gave the topics, a topic created again under a new id, partitions added, no
topic ever created by the reads, the last snapshot kept while no broker answers; and the
response's decoding on its own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaError
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
    UnsignedVarInt32,
)
from kafka_broker import KafkaBroker

from coordinator_server.consumer_groups.heartbeat import (
    ClusterTopic,
    ClusterTopicsSnapshot,
    ClusterTopicsSource,
)
from coordinator_server.storage.kafka.cluster_topics import (
    ZERO_UUID,
    DataTopic,
    KafkaClusterTopics,
    MetadataRequest_v12,
    MetadataRequestWithTopicIds,
    MetadataResponse_v12,
    Uuid,
    topics_of,
)

LOGGER = "coordinator_server.storage.kafka.cluster_topics"
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5


# -- Kafka's own report of a topic's id: CreateTopics v7 answers it -----------------------


class CreateTopicsResponse_v7(Response):  # type: ignore[misc]
    API_KEY = 19
    API_VERSION = 7
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("topic_id", Uuid),
                ("error_code", Int16),
                ("error_message", CompactString("utf-8")),
                ("num_partitions", Int32),
                ("replication_factor", Int16),
                (
                    "configs",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        ("value", CompactString("utf-8")),
                        ("read_only", Boolean),
                        ("config_source", Int8),
                        ("is_sensitive", Boolean),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class CreateTopicsRequest_v7(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = 19
    API_VERSION = 7
    RESPONSE_TYPE = CreateTopicsResponse_v7
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("num_partitions", Int32),
                ("replication_factor", Int16),
                (
                    "assignments",
                    CompactArray(
                        ("partition_index", Int32),
                        ("broker_ids", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                (
                    "configs",
                    CompactArray(
                        ("name", CompactString("utf-8")),
                        ("value", CompactString("utf-8")),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("timeout_ms", Int32),
        ("validate_only", Boolean),
        ("tags", TaggedFields),
    )


class CreateTopicWithId(Request[CreateTopicsRequest_v7]):  # type: ignore[misc]
    API_KEY = 19

    def __init__(self, name: str, partitions: int) -> None:
        self._name = name
        self._partitions = partitions

    def build(self, request_struct_class: type[CreateTopicsRequest_v7]) -> CreateTopicsRequest_v7:
        return request_struct_class(
            [(self._name, self._partitions, 1, [], [], {})], 30_000, False, {}
        )


class NamedTopicMetadata(Request[MetadataRequest_v12]):  # type: ignore[misc]
    """Our v12 request naming one topic, creation forbidden: what the broker makes of the
    request's fields as we encode them."""

    API_KEY = 3

    def __init__(self, name: str) -> None:
        self._name = name

    def build(self, request_struct_class: type[MetadataRequest_v12]) -> MetadataRequest_v12:
        return request_struct_class([(ZERO_UUID, self._name, {})], False, False, {})


@contextlib.asynccontextmanager
async def kafka_client(broker: KafkaBroker) -> AsyncIterator[AIOKafkaClient]:
    client = AIOKafkaClient(bootstrap_servers=broker.bootstrap)
    await client.bootstrap()
    try:
        yield client
    finally:
        await client.close()


async def create_topic(broker: KafkaBroker, name: str, partitions: int) -> bytes:
    """Create the topic; the id Kafka reports it created it with."""
    async with kafka_client(broker) as client:
        node_id = client.get_random_node()
        response = await client.send(node_id, CreateTopicWithId(name, partitions))
    [(answered, topic_id, error_code, message, count, *_)] = response.topics
    assert (answered, error_code, count) == (name, 0, partitions), message
    assert topic_id != ZERO_UUID
    return bytes(topic_id)


async def delete_topic(broker: KafkaBroker, name: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([name])
    finally:
        await admin.close()


async def grow_topic(broker: KafkaBroker, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_partitions({name: NewPartitions(partitions)})
    finally:
        await admin.close()


async def topic_names(broker: KafkaBroker) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def reading(
    broker: KafkaBroker, **options: Any
) -> AsyncIterator[KafkaClusterTopics[ClusterTopicsSnapshot]]:
    options = {"request_timeout_ms": 5000, "refresh_interval_ms": 600_000, **options}
    source = KafkaClusterTopics(broker.bootstrap, ClusterTopicsSnapshot.of, **options)
    await source.start()
    try:
        await source.wait_ready(30)
        yield source
    finally:
        await source.stop()


async def eventually(
    refresh: Callable[[], Awaitable[None]], done: Callable[[], bool], timeout_s: float = 30
) -> None:
    """Refresh until `done()`: a broker's metadata follows its controller a moment later."""
    deadline = time.monotonic() + timeout_s
    while True:
        await refresh()
        if done():
            return
        assert time.monotonic() < deadline, "not seen in time"
        await asyncio.sleep(0.1)


def satisfies_the_protocol(
    source: KafkaClusterTopics[ClusterTopicsSnapshot],
) -> ClusterTopicsSource:
    return source


# -- against Apache Kafka -----------------------------------------------------------------


async def test_the_ids_are_the_ones_kafka_created_the_topics_with(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    topic_id = await create_topic(kafka_broker, unique_topic, 3)
    async with reading(kafka_broker, min_refresh_interval_ms=0) as source:
        satisfies_the_protocol(source)
        await eventually(
            source.refresh_now, lambda: source.snapshot().topic(unique_topic) is not None
        )
        first = source.snapshot()
        assert first.topic(unique_topic) == ClusterTopic(topic_id, 3, internal=False)
        assert first.topic_name(topic_id) == unique_topic
        assert unique_topic in first.topic_names(include_internal=False)
        assert source.reads >= 1
        assert source.failed_reads == 0

        # Read again, nothing changed: the same snapshot, the same version.
        await source.refresh_now()
        assert source.snapshot() is first
        assert source.snapshot().topic(unique_topic) == ClusterTopic(topic_id, 3)


async def test_a_topic_created_again_has_a_new_id_and_added_partitions_are_seen(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    old_id = await create_topic(kafka_broker, unique_topic, 2)
    async with reading(kafka_broker, min_refresh_interval_ms=0) as source:
        await eventually(
            source.refresh_now, lambda: source.snapshot().topic(unique_topic) is not None
        )
        before = source.snapshot()

        await grow_topic(kafka_broker, unique_topic, 5)
        await eventually(
            source.refresh_now,
            lambda: source.snapshot().topic(unique_topic) == ClusterTopic(old_id, 5),
        )
        grown = source.snapshot()
        assert grown.version > before.version

        await delete_topic(kafka_broker, unique_topic)
        await eventually(source.refresh_now, lambda: source.snapshot().topic(unique_topic) is None)
        assert source.snapshot().topic_name(old_id) is None
        assert source.snapshot().version > grown.version

        new_id = await create_topic(kafka_broker, unique_topic, 1)
        assert new_id != old_id
        await eventually(
            source.refresh_now,
            lambda: source.snapshot().topic(unique_topic) == ClusterTopic(new_id, 1),
        )
        assert source.snapshot().topic_name(new_id) == unique_topic
        assert source.snapshot().topic_name(old_id) is None


async def test_no_read_creates_a_topic(kafka_broker: KafkaBroker, unique_topic: str) -> None:
    """The broker creates topics on metadata requests by default; none of ours may."""
    before = await topic_names(kafka_broker)
    async with reading(kafka_broker, min_refresh_interval_ms=0) as source:
        for _ in range(3):
            await source.refresh_now()
        assert source.failed_reads == 0
        # The request's fields as we encode them, with a name: the broker reads the flag
        # that forbids the creation where we put it.
        async with kafka_client(kafka_broker) as client:
            response = await client.send(client.get_random_node(), NamedTopicMetadata(unique_topic))
        [(error_code, name, topic_id, *_)] = response.topics
        assert (error_code, name, topic_id) == (UNKNOWN_TOPIC_OR_PARTITION, unique_topic, ZERO_UUID)
        await asyncio.sleep(0.5)
        after = await topic_names(kafka_broker)
        assert unique_topic not in after
        assert after == before
        # All the cluster's topics are read, and only those.
        await source.refresh_now()
        assert set(source.snapshot().topic_names()) == after


async def test_internal_topics_are_kept_and_flagged(
    kafka_broker: KafkaBroker, unique_topic: str
) -> None:
    await create_topic(kafka_broker, unique_topic, 1)
    # A group coordinator looked up: the broker creates __consumer_offsets, if not yet.
    async with kafka_client(kafka_broker) as client:
        for _ in range(100):
            with contextlib.suppress(KafkaError):
                await client.coordinator_lookup(CoordinationType.GROUP, unique_topic)
                break
            await asyncio.sleep(0.2)
    async with reading(
        kafka_broker, min_refresh_interval_ms=0, internal_topics={unique_topic}
    ) as source:
        await eventually(
            source.refresh_now,
            lambda: (
                source.snapshot().topic("__consumer_offsets") is not None
                and source.snapshot().topic(unique_topic) is not None
            ),
        )
        snapshot = source.snapshot()
        offsets = snapshot.topic("__consumer_offsets")
        assert offsets is not None
        assert offsets.internal
        assert offsets.partition_count == 50
        topic = snapshot.topic(unique_topic)
        assert topic is not None
        assert topic.internal
        assert "__consumer_offsets" in snapshot.topic_names()
        assert "__consumer_offsets" not in snapshot.topic_names(include_internal=False)
        assert unique_topic not in snapshot.topic_names(include_internal=False)


async def test_beyond_max_topics_the_first_by_name_are_kept_with_one_warning(
    kafka_broker: KafkaBroker, unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    for suffix in ("a", "b", "c"):
        await create_topic(kafka_broker, f"{unique_topic}-{suffix}", 1)
    async with reading(kafka_broker, min_refresh_interval_ms=0) as everything:
        await eventually(
            everything.refresh_now,
            lambda: everything.snapshot().topic(f"{unique_topic}-c") is not None,
        )
        names = everything.snapshot().topic_names()
    limit = len(names) - 2
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        async with reading(kafka_broker, min_refresh_interval_ms=0, max_topics=limit) as source:
            await source.refresh_now()
            await source.refresh_now()
            kept = source.snapshot().topic_names()
    assert kept == names[:limit]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"more than the {limit} kept (max_topics)" in warnings[0]


async def test_refresh_now_is_shared_and_spaced(kafka_broker: KafkaBroker) -> None:
    async with reading(kafka_broker, min_refresh_interval_ms=300) as source:
        reads = source.reads
        started = time.monotonic()
        await asyncio.gather(*(source.refresh_now() for _ in range(50)))
        # The start's read, then one for all fifty callers, at least 300 ms later.
        assert source.reads == reads + 1
        await source.refresh_now()
        assert source.reads == reads + 2
        assert time.monotonic() - started >= 0.5


async def test_an_unreachable_cluster_keeps_the_last_snapshot_with_one_warning(
    fresh_kafka_broker: KafkaBroker, unique_topic: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic_id = await create_topic(fresh_kafka_broker, unique_topic, 2)
    async with reading(
        fresh_kafka_broker,
        min_refresh_interval_ms=0,
        request_timeout_ms=1000,
        retry_backoff_ms=100,
    ) as source:
        await eventually(
            source.refresh_now, lambda: source.snapshot().topic(unique_topic) is not None
        )
        last = source.snapshot()
        with caplog.at_level(logging.INFO, logger=LOGGER):
            # Paused: connections are held, nothing is answered.
            fresh_kafka_broker.pause()
            try:
                for _ in range(3):
                    await source.refresh_now()
                assert source.snapshot() is last
            finally:
                fresh_kafka_broker.resume()
            assert source.failed_reads >= 3
            reads = source.reads
            await eventually(source.refresh_now, lambda: source.reads > reads)
            assert source.snapshot() is last
            # Stopped: connections refused.
            failed = source.failed_reads
            fresh_kafka_broker.stop()
            for _ in range(3):
                await source.refresh_now()
            assert source.failed_reads >= failed + 3
            # The background task tries again on its own, after a back-off.
            await asyncio.sleep(1)
            assert source.snapshot() is last
            assert source.snapshot().topic(unique_topic) == ClusterTopic(topic_id, 2)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # One per streak of failures: the pause's, then the stop's.
    assert len(warnings) == 2, warnings
    assert all("topics cannot be read; the 1 read last are kept" in w for w in warnings)
    assert "read again, after" in caplog.text


async def test_a_start_without_a_broker_fails_and_wait_ready_says_why() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = KafkaClusterTopics(
        f"127.0.0.1:{port}", ClusterTopicsSnapshot.of, request_timeout_ms=1000
    )
    with pytest.raises((KafkaError, OSError, TimeoutError)):
        await source.start()
    with pytest.raises(TimeoutError, match=r"were not read in 0\.1 s"):
        await source.wait_ready(0.1)
    assert source.snapshot().version == 0
    await source.stop()


# -- the response's decoding, without a broker --------------------------------------------


def tagged(fields: dict[int, bytes]) -> bytes:
    """Tagged fields as Kafka writes them (count, then tag, size and bytes of each)."""
    out = UnsignedVarInt32.encode(len(fields))
    for tag, value in sorted(fields.items()):
        out += UnsignedVarInt32.encode(tag) + UnsignedVarInt32.encode(len(value)) + value
    return out


def compact_int32s(values: list[int]) -> bytes:
    return UnsignedVarInt32.encode(len(values) + 1) + b"".join(Int32.encode(v) for v in values)


def partition(index: int, replicas: list[int], extra_tags: dict[int, bytes]) -> bytes:
    return (
        Int16.encode(0)
        + Int32.encode(index)
        + Int32.encode(replicas[0] if replicas else -1)
        + Int32.encode(7)
        + compact_int32s(replicas)
        + compact_int32s(replicas[:1])
        + compact_int32s([])
        + tagged(extra_tags)
    )


def topic(
    error_code: int, name: str | None, topic_id: bytes, internal: bool, partitions: list[bytes]
) -> bytes:
    return (
        Int16.encode(error_code)
        + CompactString("utf-8").encode(name)
        + Uuid.encode(topic_id)
        + Boolean.encode(internal)
        + UnsignedVarInt32.encode(len(partitions) + 1)
        + b"".join(partitions)
        + Int32.encode(-2147483648)
        + tagged({})
    )


def response(topics: list[bytes], racks: dict[int, str | None] | None = None) -> bytes:
    """A MetadataResponse v12 naming `topics`, from brokers by node id with their racks
    (broker 1 without a rack by default)."""
    racks = {1: None} if racks is None else racks
    brokers = UnsignedVarInt32.encode(len(racks) + 1) + b"".join(
        Int32.encode(node)
        + CompactString("utf-8").encode("127.0.0.1")
        + Int32.encode(9092 + node)
        + CompactString("utf-8").encode(rack)
        + tagged({})
        for node, rack in racks.items()
    )
    return (
        Int32.encode(0)
        + brokers
        + CompactString("utf-8").encode("cluster")
        + Int32.encode(1)
        + UnsignedVarInt32.encode(len(topics) + 1)
        + b"".join(topics)
        + tagged({0: b"later field"})
    )


A, B, C = b"A" * 16, b"B" * 16, b"C" * 16


def test_a_response_is_read_with_its_partitions_counted() -> None:
    encoded = response(
        [
            topic(0, "a", A, False, [partition(i, [1, 2, 3], {}) for i in range(3)]),
            # Tagged fields a later version may add are skipped, whatever their size.
            topic(0, "b", B, True, [partition(0, [], {0: b"x" * 200, 5: b"y"})]),
        ]
    )
    decoded = MetadataResponse_v12.decode(encoded)

    assert decoded.cluster_id == "cluster"
    assert decoded.tags == {0: b"later field"}
    assert topics_of(decoded, internal_topics={"a"}) == {
        "a": DataTopic(A, 3, internal=True),
        "b": DataTopic(B, 1, internal=True),
    }
    # Cut anywhere before its last tagged fields (aiokafka reads short tagged fields as they
    # are), an answer is refused, never read as fewer topics or partitions.
    for cut in range(len(encoded) - len(tagged({0: b"later field"}))):
        with pytest.raises((ValueError, struct.error)):
            MetadataResponse_v12.decode(encoded[:cut])


def test_the_racks_of_each_partitions_replicas_are_read_from_the_brokers_racks() -> None:
    racks = {1: "r1", 2: "r2", 3: None, 4: "r1"}
    decoded = MetadataResponse_v12.decode(
        response(
            [
                topic(
                    0,
                    "a",
                    A,
                    False,
                    [
                        partition(0, [1, 2], {}),
                        partition(1, [2, 3], {}),
                        partition(2, [3], {}),
                        partition(3, [4, 1], {0: b"tag"}),
                        partition(4, [1, 2], {}),
                    ],
                ),
                # Partitions answered out of order: their racks are not guessed.
                topic(0, "b", B, False, [partition(1, [1], {}), partition(0, [2], {})]),
            ],
            racks,
        )
    )
    topics = topics_of(decoded)
    r1, r12, r2 = frozenset({"r1"}), frozenset({"r1", "r2"}), frozenset({"r2"})
    assert topics["a"] == DataTopic(A, 5, False, (r12, r2, frozenset(), r1, r12))
    assert topics["b"] == DataTopic(B, 2, False, ())
    # One object per distinct set of racks, however many partitions share it.
    assert topics["a"].partition_racks[0] is topics["a"].partition_racks[4]
    # Brokers without racks: none known, as before racks were read.
    no_racks = MetadataResponse_v12.decode(
        response([topic(0, "a", A, False, [partition(0, [1, 2], {})])], {1: None, 2: None})
    )
    assert topics_of(no_racks)["a"] == DataTopic(A, 1, False)
    # A broker moved to another rack changes the topic: the snapshot moves on.
    moved = MetadataResponse_v12.decode(
        response([topic(0, "a", A, False, [partition(0, [1, 2], {})])], {1: "r3", 2: "r2"})
    )
    assert topics_of(moved)["a"].partition_racks == (frozenset({"r2", "r3"}),)


def test_a_topic_answered_with_an_error_keeps_its_last_entry_and_a_missing_one_is_gone() -> None:
    previous = {
        "a": DataTopic(A, 3, False),
        "b": DataTopic(B, 2, False),
        "c": DataTopic(C, 1, False),
    }
    decoded = MetadataResponse_v12.decode(
        response(
            [
                topic(LEADER_NOT_AVAILABLE, "a", ZERO_UUID, False, []),
                topic(0, "b", B, False, [partition(i, [1], {}) for i in range(4)]),
                topic(0, "new", C, False, []),
                topic(0, None, A, False, []),
            ]
        )
    )

    assert topics_of(decoded, previous=previous) == {
        "a": DataTopic(A, 3, False),
        "b": DataTopic(B, 4, False),
    }


def test_the_request_asks_for_every_topic_and_forbids_creating_any() -> None:
    request = MetadataRequestWithTopicIds().prepare({3: (0, 13)})
    assert isinstance(request, MetadataRequest_v12)
    # A null compact array (0), creation false, authorized operations false, no tags.
    assert request.encode() == b"\x00\x00\x00\x00"
    with pytest.raises(NotImplementedError):
        MetadataRequestWithTopicIds().prepare({3: (0, 11)})


def test_reading_a_large_clusters_answer_takes_little_of_the_loop() -> None:
    """100 topics of 1,000 partitions, 3 replicas each on brokers in 3 racks: the decoding
    runs in the event loop."""
    encoded = response(
        [
            topic(
                0,
                f"t{t}",
                (t + 1).to_bytes(16, "big"),
                False,
                [
                    partition(p, [1 + p % 6, 1 + (p + 3) % 6, 1 + (p + 1) % 6], {})
                    for p in range(1000)
                ],
            )
            for t in range(100)
        ],
        {node: f"r{node % 3}" for node in range(1, 7)},
    )
    started = time.perf_counter()
    topics = topics_of(MetadataResponse_v12.decode(encoded))
    elapsed = time.perf_counter() - started
    assert sum(t.partition_count for t in topics.values()) == 100_000
    assert topics["t0"].partition_racks[0] == frozenset({"r1", "r2"})
    assert topics["t0"].partition_racks[1] == frozenset({"r0", "r2"})
    # About 0.1 s on a slow shared core (0.085 s before racks were read); aiokafka's generic
    # decoding takes several times it.
    assert elapsed < 2, elapsed
