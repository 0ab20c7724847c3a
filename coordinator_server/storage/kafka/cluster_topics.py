"""The data cluster's topics with their topic ids, read from its metadata and kept current,
for the consumer group protocol (KIP-848), which names partitions by topic id.

aiokafka's MetadataRequest stops at version 5, which has no topic ids; they come in version
10. So this module defines MetadataRequest and MetadataResponse version 12 (Apache Kafka 3.1
and later answer it; a flexible version: compact strings and arrays, tagged fields) and
sends it through an aiokafka client made as the commit check's (`DataPartitionCatalog`):
`forbid_auto_topic_creation`, the cluster's security settings, a bootstrap with a timeout.
The request asks for every topic (a null list), so that a regular expression can be matched
against the cluster's whole list, and never lets the broker create one.

`KafkaClusterTopics` reads the list every `refresh_interval_ms` in one background task and
keeps the latest snapshot for `snapshot()`, which never waits on the network:

- a snapshot whose topics differ from the previous one's gets the next version;
- a failed read keeps the last snapshot and is logged at WARNING once per streak of failures
  (a broker away for an hour writes one line, and one more when it is back); reads are then
  tried again sooner, after a back-off that doubles up to the refresh interval;
- `refresh_now()` reads again at once, for a heartbeat that names a topic the snapshot lacks;
  at most one read is under way and one more waits behind it (every caller meanwhile shares
  the waiting one), and two reads start at least `min_refresh_interval_ms` apart, however
  many heartbeats ask;
- at most `max_topics` topics are kept: beyond it, the first ones by name, with one WARNING;
- internal topics are kept, flagged (the broker's `is_internal`, and the names given as
  `internal_topics`, the coordinator's own log topic), so that a caller may leave them out.

Each topic comes with the racks of each partition's replicas (the brokers' `broker.rack`,
through the replicas' node ids), for rack-aware assignment; none when no broker has a rack.
The partitions are read in place, each distinct replica list and set of racks made once:
100 topics x 1,000 partitions of 3 replicas decode in about 0.1 s (0.085 s when only their
number was read).

Consumer groups know the snapshot as `ClusterTopicsSnapshot`, a layer above this one: the
caller gives the function that builds it (`make_snapshot`, the snapshot class's `of`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import struct
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Generic, TypeVar

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import IncompatibleBrokerVersion, KafkaError
from aiokafka.protocol.abstract import AbstractType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = [
    "ClusterTopicsError",
    "DataTopic",
    "KafkaClusterTopics",
    "MetadataRequestWithTopicIds",
    "MetadataRequest_v12",
    "MetadataResponse_v12",
    "Uuid",
    "topics_of",
]

logger = logging.getLogger(__name__)

SnapshotT = TypeVar("SnapshotT")

UUID_SIZE = 16
ZERO_UUID = bytes(UUID_SIZE)
"""Kafka's `Uuid.ZERO_UUID`: the id a broker answers for a topic it has none for."""

_ERROR_NONE = 0
_METADATA_API_KEY = 3


class Uuid(AbstractType[bytes]):  # type: ignore[misc]
    """Kafka's `uuid` type: 16 bytes, most significant first, as the bytes they are."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        if len(value) != UUID_SIZE:
            raise ValueError(f"a uuid is {UUID_SIZE} bytes, not {len(value)}")
        return bytes(value)

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        value = data.read(UUID_SIZE)
        if len(value) != UUID_SIZE:
            raise ValueError("Buffer underrun decoding a uuid")
        return value

    @classmethod
    def repr(cls, value: bytes) -> str:
        return value.hex()


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """A topic's partitions as read from a MetadataResponse: their number and each one's
    replicas, as an index into `replica_sets` (the distinct replica lists, few on any
    cluster), by partition index; `by_partition` is None when the partitions' indexes are
    not 0..count-1 (then nothing is known of their replicas)."""

    count: int
    replica_sets: tuple[tuple[int, ...], ...]
    by_partition: tuple[int, ...] | None


_INT32 = struct.Struct(">i").unpack_from


def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise ValueError("a varint of more than 5 bytes")


class PartitionsReplicas(AbstractType[PartitionReplicas]):  # type: ignore[misc]
    """A topic's partitions in MetadataResponse v9+ (compact array of error code, index,
    leader, leader epoch, replicas, in-sync replicas, offline replicas, tagged fields), read
    as their number and each one's replicas, the rest skipped. aiokafka's generic decoding
    builds a tuple per partition and a list per replica set, in the event loop, for every
    partition of the cluster: this reads the bytes in place, and keeps each distinct replica
    list once."""

    @classmethod
    def encode(cls, value: PartitionReplicas) -> bytes:
        raise NotImplementedError("partitions are only read")

    @classmethod
    def decode(cls, data: BytesIO) -> PartitionReplicas:
        start = data.tell()
        with data.getbuffer() as buf:
            try:
                result, pos = cls._read(buf, start)
            except IndexError:
                raise ValueError("Buffer underrun decoding partitions") from None
            if pos > len(buf):
                raise ValueError("Buffer underrun decoding partitions")
        data.seek(pos)
        return result

    @staticmethod
    def _read(buf: memoryview, pos: int) -> tuple[PartitionReplicas, int]:
        count, pos = _varint(buf, pos)
        count -= 1
        if count < 0:
            return PartitionReplicas(0, (), ()), pos
        set_of: dict[bytes, int] = {}
        sets: list[tuple[int, ...]] = []
        by_position: list[int] = []
        in_order = True
        for position in range(count):
            # Error code (2 bytes), then the index.
            if in_order and _INT32(buf, pos + 2)[0] != position:
                in_order = False
            # Index, leader and leader epoch.
            pos += 14
            replicas, pos = _varint(buf, pos)
            replicas = max(replicas - 1, 0)
            raw = bytes(buf[pos : pos + 4 * replicas])
            pos += 4 * replicas
            index = set_of.get(raw)
            if index is None:
                if len(raw) != 4 * replicas:
                    raise ValueError("Buffer underrun decoding partitions")
                index = set_of[raw] = len(sets)
                sets.append(struct.unpack(f">{replicas}i", raw))
            by_position.append(index)
            for _other_set in range(2):
                size, pos = _varint(buf, pos)
                if size > 1:
                    pos += 4 * (size - 1)
            tags, pos = _varint(buf, pos)
            for _tag in range(tags):
                _, pos = _varint(buf, pos)
                size, pos = _varint(buf, pos)
                pos += size
        return PartitionReplicas(count, tuple(sets), tuple(by_position) if in_order else None), pos


class MetadataResponse_v12(Response):  # type: ignore[misc]
    API_KEY = _METADATA_API_KEY
    API_VERSION = 12
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            CompactArray(
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("rack", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", Uuid),
                ("is_internal", Boolean),
                ("partitions", PartitionsReplicas),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class MetadataRequest_v12(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = _METADATA_API_KEY
    API_VERSION = 12
    RESPONSE_TYPE = MetadataResponse_v12
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic_id", Uuid),
                ("name", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("allow_auto_topic_creation", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class MetadataRequestWithTopicIds(Request[MetadataRequest_v12]):  # type: ignore[misc]
    """Every topic of the cluster, with its id (a null list of topics), never creating one.

    Only version 12: a broker that cannot answer it (before Apache Kafka 3.1) fails the
    request, as aiokafka fails a request no version of which the broker has."""

    API_KEY = _METADATA_API_KEY

    def build(self, request_struct_class: type[MetadataRequest_v12]) -> MetadataRequest_v12:
        return request_struct_class(None, False, False, {})


@dataclass(frozen=True, slots=True)
class DataTopic:
    """What the data cluster says of one topic. `partition_racks`: the racks of each
    partition's replicas (the brokers' `broker.rack`), by partition index; empty when no
    broker has a rack."""

    topic_id: bytes
    partition_count: int
    internal: bool
    partition_racks: tuple[frozenset[str], ...] = ()


class ClusterTopicsError(Exception):
    """The data cluster's topics could not be read now: try again later."""


def topics_of(
    response: MetadataResponse_v12,
    *,
    internal_topics: Collection[str] = (),
    previous: Mapping[str, DataTopic] | None = None,
) -> dict[str, DataTopic]:
    """The topics a MetadataResponse names, by name.

    A topic answered with an error of its own (one being created, or another the broker
    cannot describe now), without an id or without partitions keeps its entry of `previous`,
    if any: a passing error must not look like a deleted topic to the groups subscribed to it.
    A topic the answer leaves out (deleted, or one the principal may not describe) is gone."""
    previous = previous or {}
    broker_racks = {broker[0]: broker[3] for broker in response.brokers if broker[3]}
    # Each distinct replica list's racks, and each distinct set of racks, made once.
    racks_of_set: dict[tuple[int, ...], frozenset[str]] = {}
    rack_sets: dict[frozenset[str], frozenset[str]] = {}
    topics: dict[str, DataTopic] = {}
    for error_code, name, topic_id, is_internal, partitions, _ops, _tags in response.topics:
        if name is None:
            continue
        partition_count = partitions.count
        if error_code != _ERROR_NONE or topic_id == ZERO_UUID or partition_count < 1:
            kept = previous.get(name)
            if kept is not None:
                topics[name] = kept
            continue
        partition_racks: tuple[frozenset[str], ...] = ()
        if broker_racks and partitions.by_partition is not None:
            by_set = []
            for replicas in partitions.replica_sets:
                racks = racks_of_set.get(replicas)
                if racks is None:
                    found = frozenset(
                        rack for node in replicas if (rack := broker_racks.get(node)) is not None
                    )
                    racks = racks_of_set[replicas] = rack_sets.setdefault(found, found)
                by_set.append(racks)
            partition_racks = tuple([by_set[index] for index in partitions.by_partition])
        topics[name] = DataTopic(
            topic_id,
            partition_count,
            bool(is_internal) or name in internal_topics,
            partition_racks,
        )
    return topics


class KafkaClusterTopics(Generic[SnapshotT]):
    """The data cluster's topics, read every `refresh_interval_ms` (the module's docstring
    says how). `make_snapshot(topics, version)` builds what `snapshot()` answers.

    `start()` bootstraps the client (raising the client's error when no broker answers in
    `request_timeout_ms`, for the caller's retries) and starts the background reads;
    `wait_ready(timeout_s)` waits for the first; `stop()` ends them and closes the client."""

    def __init__(
        self,
        bootstrap_servers: str,
        make_snapshot: Callable[[Mapping[str, DataTopic], int], SnapshotT],
        *,
        security: KafkaSecurity | None = None,
        request_timeout_ms: int = 5000,
        refresh_interval_ms: int = 30_000,
        min_refresh_interval_ms: int = 100,
        retry_backoff_ms: int = 1000,
        max_topics: int = 100_000,
        internal_topics: Collection[str] = (),
        client_id: str = "coordinator-server-topics",
    ) -> None:
        for name, value, least in (
            ("request_timeout_ms", request_timeout_ms, 1),
            ("refresh_interval_ms", refresh_interval_ms, 1),
            ("min_refresh_interval_ms", min_refresh_interval_ms, 0),
            ("retry_backoff_ms", retry_backoff_ms, 1),
            ("max_topics", max_topics, 1),
        ):
            if value < least:
                raise ValueError(f"{name} must be at least {least}, got {value}")
        self._bootstrap_servers = bootstrap_servers
        self._make_snapshot = make_snapshot
        self._security = security or KafkaSecurity()
        self._request_timeout_s = request_timeout_ms / 1000
        self._refresh_interval_s = refresh_interval_ms / 1000
        self._min_refresh_interval_s = min_refresh_interval_ms / 1000
        self._retry_backoff_s = min(retry_backoff_ms, refresh_interval_ms) / 1000
        self._max_topics = max_topics
        self._internal_topics = frozenset(internal_topics)
        self._client_id = client_id
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        # The read under way (its request sent or about to be) and the one waiting behind it.
        self._running: asyncio.Task[None] | None = None
        self._pending: asyncio.Task[None] | None = None
        self._last_started = float("-inf")
        self._last_finished = float("-inf")
        self._topics: dict[str, DataTopic] = {}
        self._version = 0
        self._snapshot = make_snapshot({}, 0)
        self._ready = asyncio.Event()
        self._failures = 0
        self._last_error: str | None = None
        self._over_limit = False
        self.reads = 0
        """Reads that succeeded."""
        self.failed_reads = 0

    def snapshot(self) -> SnapshotT:
        """The latest snapshot read (empty, version 0, before the first), at once."""
        return self._snapshot

    @property
    def version(self) -> int:
        return self._version

    async def start(self) -> None:
        if self._client is not None:
            raise RuntimeError("a KafkaClusterTopics starts once")
        client = forbid_auto_topic_creation(
            AIOKafkaClient(
                bootstrap_servers=self._bootstrap_servers,
                client_id=self._client_id,
                # Each read has a timeout of its own; aiokafka's, which closes the
                # connection, is only a backstop.
                request_timeout_ms=int(self._request_timeout_s * 2000),
                **self._security.aiokafka_options(),
            )
        )
        try:
            await asyncio.wait_for(client.bootstrap(), self._request_timeout_s)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        self._client = client
        self._task = asyncio.create_task(self._run(), name="cluster-topics")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._pending, self._running) if t is not None]
        self._task = self._pending = self._running = None
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._request_timeout_s)

    async def wait_ready(self, timeout_s: float) -> None:
        """Return once the first read succeeded; TimeoutError after `timeout_s`."""
        if self._ready.is_set():
            return
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"the data cluster's topics were not read in {timeout_s:g} s"
                + (f": {self._last_error}" if self._last_error else "")
            ) from None

    async def refresh_now(self) -> None:
        """Read the cluster's topics again, and return once a read that started after this
        call ended (successfully or not: a failure keeps the last snapshot). Several callers
        share one read; reads start `min_refresh_interval_ms` apart at least."""
        if self._client is None:
            return
        await asyncio.wait([self._refresh_task()])

    def _refresh_task(self) -> asyncio.Task[None]:
        pending = self._pending
        if pending is None or pending.done():
            pending = self._pending = asyncio.create_task(self._refresh_when_due(self._running))
        return pending

    async def _refresh_when_due(self, ahead: asyncio.Task[None] | None) -> None:
        loop = asyncio.get_running_loop()
        if ahead is not None and not ahead.done():
            await asyncio.wait([ahead])
        delay = self._last_started + self._min_refresh_interval_s - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        # Under way from here: a caller from now on waits for the next read.
        me = asyncio.current_task()
        if self._pending is me:
            self._pending = None
        self._running = me
        self._last_started = loop.time()
        try:
            await self._refresh_once()
        finally:
            self._last_finished = loop.time()
            if self._running is me:
                self._running = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.wait([self._refresh_task()])
            while True:
                if self._failures:
                    pause = min(
                        self._retry_backoff_s * 2 ** min(self._failures - 1, 30),
                        self._refresh_interval_s,
                    )
                else:
                    pause = self._refresh_interval_s
                # A read refresh_now asked for meanwhile moves the next one later.
                delay = self._last_finished + pause - loop.time()
                if delay <= 0:
                    break
                await asyncio.sleep(delay)

    async def _refresh_once(self) -> None:
        try:
            topics = await self._read()
        except asyncio.CancelledError:
            raise
        except ClusterTopicsError as error:
            self._failed(str(error), None)
            return
        except Exception as error:
            self._failed(repr(error), error)
            return
        self._succeeded(topics)

    async def _read(self) -> dict[str, DataTopic]:
        client = self._client
        if client is None:
            raise ClusterTopicsError("the reader is stopped")
        node_ids = [broker.nodeId for broker in client.cluster.brokers()]
        if not node_ids:
            raise ClusterTopicsError("no broker of the data cluster is known")
        random.shuffle(node_ids)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._request_timeout_s
        response: MetadataResponse_v12 | None = None
        failure: BaseException | None = None
        for node_id in node_ids:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                response = await asyncio.wait_for(
                    client.send(node_id, MetadataRequestWithTopicIds()), remaining
                )
                break
            except (NotImplementedError, IncompatibleBrokerVersion) as error:
                raise ClusterTopicsError(
                    f"broker {node_id} cannot name topic ids: MetadataRequest v12 (Apache "
                    f"Kafka 3.1 or later) is needed: {error}"
                ) from error
            except (KafkaError, OSError, TimeoutError) as error:
                failure = error
        if response is None:
            raise ClusterTopicsError(
                f"no broker answered in {self._request_timeout_s:g} s: {failure!r}"
            )
        known = {node.nodeId for node in client.cluster.brokers()}
        if any(broker[0] not in known for broker in response.brokers):
            # A broker the client has not met: its own metadata must name it before the
            # client can connect to it.
            client.force_metadata_update()
        return topics_of(response, internal_topics=self._internal_topics, previous=self._topics)

    def _succeeded(self, topics: dict[str, DataTopic]) -> None:
        self.reads += 1
        if self._failures:
            logger.info(
                "the data cluster's topics are read again, after %d failed attempts",
                self._failures,
            )
        self._failures = 0
        self._last_error = None
        topics = self._limited(topics)
        if topics != self._topics:
            self._topics = topics
            self._version += 1
            self._snapshot = self._make_snapshot(topics, self._version)
            logger.debug(
                "the data cluster's topics changed: %d topics, version %d",
                len(topics),
                self._version,
            )
        if not self._ready.is_set():
            logger.info("the data cluster has %d topics", len(topics))
            self._ready.set()

    def _limited(self, topics: dict[str, DataTopic]) -> dict[str, DataTopic]:
        limit = self._max_topics
        if len(topics) <= limit:
            self._over_limit = False
            return topics
        names = sorted(topics)
        if not self._over_limit:
            self._over_limit = True
            logger.warning(
                "the data cluster has %d topics, more than the %d kept (max_topics): the "
                "topics after %r by name are left out, and unknown to consumer groups",
                len(topics),
                limit,
                names[limit - 1],
            )
        return {name: topics[name] for name in names[:limit]}

    def _failed(self, error: str, unexpected: Exception | None) -> None:
        self.failed_reads += 1
        self._failures += 1
        self._last_error = error
        if self._failures == 1:
            logger.warning(
                "the data cluster's topics cannot be read; the %d read last are kept, and the "
                "read is tried again: %s",
                len(self._topics),
                error,
                exc_info=unexpected,
            )
        else:
            logger.debug("the data cluster's topics cannot be read (again): %s", error)
