"""The coordinator log in a compacted Kafka topic.

This is the production deployment and Kafka's own design: the topic plays the part of
`__consumer_offsets`, one coordinator partition per topic partition. An append is one
record batch produced with acks=all (by `kafka_produce.ProduceSender`, which puts the
batches of many partitions in one ProduceRequest); the log end offset it returns is the
batch's base offset plus its record count. A load replays a partition from its start to the
high watermark the first Fetch response reports. Topic administration, metadata and loads
go through aiokafka.

Limits to know about:
- Without an idempotent producer, a produce request that timed out on our side may still
  have been written. The log then ends somewhere other than where the caller expects; the
  runtime detects that from the offset the next append returns (Kafka's log/state
  divergence check) and reloads.
- `high_watermark(partition)` is what this process last learned: from its own appends,
  or from the Fetch responses of a load. It is 0 for a partition it has not touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

from coordinator_server.storage.api import (
    AppendError,
    HighWatermarkListener,
    LoadError,
    LoadSummary,
    RawRecord,
    ReadyListener,
    RecordSink,
)
from coordinator_server.storage.kafka_produce import Leader, ProduceSender

__all__ = ["KafkaLog", "KafkaLogError", "offsets_topic_configs"]

log = logging.getLogger(__name__)

UNKNOWN_SERVER_ERROR = -1
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
TOPIC_ALREADY_EXISTS = 36

# As Kafka configures __consumer_offsets (GroupCoordinatorService.groupMetadataTopicConfigs).
OFFSETS_TOPIC_SEGMENT_BYTES = 104_857_600

LOAD_FETCH_MAX_BYTES = 16 * 1024 * 1024
# A load stops as soon as it reaches the high watermark, so the broker need not hold an
# empty fetch for long: this bounds how long an empty partition takes to load.
LOAD_FETCH_MAX_WAIT_MS = 20
# ListOffsets' "earliest" timestamp.
EARLIEST_OFFSET = -2
# Room for the request and batch headers around a batch of max_batch_bytes.
PRODUCE_REQUEST_OVERHEAD_BYTES = 64 * 1024
# Record batches as a producer without idempotence writes them: magic 2, no compression,
# not transactional, no producer id, epoch or sequence.
BATCH_MAGIC = 2
NO_COMPRESSION = 0
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1


def _ignore_outcome(task: asyncio.Future[Any]) -> None:
    """A warm-up's failure is the first load's to report (it tries again)."""
    if not task.cancelled():
        task.exception()


class KafkaLogError(Exception):
    """The topic cannot be created or described."""


def offsets_topic_configs() -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES),
    }


class KafkaLog:
    """A CoordinatorLog (and its PartitionWriter and CoordinatorLoader) in a Kafka topic."""

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        num_partitions: int,
        replication_factor: int,
        *,
        request_timeout_ms: int = 5000,
        client_id: str = "coordinator-server",
        max_batch_bytes: int = 1_048_576,
        max_concurrent_loads: int = 16,
        max_inflight_produce_requests: int = 1,
    ) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        if replication_factor < 1:
            raise ValueError(f"replication_factor must be at least 1, got {replication_factor}")
        if max_concurrent_loads < 1:
            raise ValueError(f"max_concurrent_loads must be at least 1, got {max_concurrent_loads}")
        if max_inflight_produce_requests < 1:
            raise ValueError(
                "max_inflight_produce_requests must be at least 1, "
                f"got {max_inflight_produce_requests}"
            )
        if request_timeout_ms <= LOAD_FETCH_MAX_WAIT_MS:
            raise ValueError(f"request_timeout_ms must exceed {LOAD_FETCH_MAX_WAIT_MS}")
        self._bootstrap_servers = bootstrap_servers
        self._topic = topic
        self._configured_partitions = num_partitions
        self._num_partitions = num_partitions
        self._replication_factor = replication_factor
        self._request_timeout_ms = request_timeout_ms
        self._client_id = client_id
        self._max_batch_bytes = max_batch_bytes
        self._max_inflight_produce_requests = max_inflight_produce_requests
        self._sender: ProduceSender | None = None
        self._started = False
        self._closed = False
        self._listener: HighWatermarkListener | None = None
        self._ready_listener: ReadyListener | None = None
        self._high_watermarks: dict[int, int] = {}
        self._load_slots = asyncio.Semaphore(max_concurrent_loads)
        self._loader_lock = asyncio.Lock()
        self._load_client: AIOKafkaClient | None = None
        self._loader_warmup: asyncio.Future[AIOKafkaClient] | None = None
        # Loads in progress now, and the most there have been at once (for tests).
        self.loads_running = 0
        self.most_loads_running = 0

    # CoordinatorLog

    @property
    def num_partitions(self) -> int:
        """The topic's real partition count once started (the configured one before)."""
        return self._num_partitions

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def writer(self) -> KafkaLog:
        return self

    @property
    def loader(self) -> KafkaLog:
        return self

    async def start(self) -> None:
        if self._started or self._closed:
            raise RuntimeError("a KafkaLog starts once")
        self._started = True
        try:
            self._num_partitions = await self._ensure_topic()
            # Metadata for the appends and the loads that follow a start come from one client.
            self._loader_warmup = asyncio.ensure_future(self._loader())
            self._loader_warmup.add_done_callback(_ignore_outcome)
            sender = ProduceSender(
                self._topic,
                self._leaders,
                client_id=self._client_id,
                request_timeout_ms=self._request_timeout_ms,
                max_inflight_requests=self._max_inflight_produce_requests,
                max_request_bytes=self._max_batch_bytes + PRODUCE_REQUEST_OVERHEAD_BYTES,
            )
            sender.ready_listener = self._ready_listener
            await sender.start()
            self._sender = sender
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        sender, self._sender = self._sender, None
        if sender is not None:
            await sender.close()
        warmup, self._loader_warmup = self._loader_warmup, None
        if warmup is not None and not warmup.done():
            # Let it finish rather than cancel it: aiokafka leaves the connection of a
            # bootstrap cancelled midway open. It ends by itself within the request timeout.
            await asyncio.wait({warmup}, timeout=self._request_timeout_ms / 1000)
            if not warmup.done():
                warmup.cancel()
                with contextlib.suppress(BaseException):
                    await warmup
        client, self._load_client = self._load_client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._request_timeout_ms / 1000)

    # PartitionWriter

    def register_listener(self, listener: HighWatermarkListener) -> None:
        self._listener = listener

    def high_watermark(self, partition: int) -> int:
        self._check_partition(partition)
        return self._high_watermarks.get(partition, 0)

    def append(self, partition: int, records: Sequence[RawRecord]) -> asyncio.Future[int]:
        try:
            if not 0 <= partition < self._num_partitions:
                raise AppendError(UNKNOWN_TOPIC_OR_PARTITION, f"no partition {partition}")
            if not records:
                raise ValueError("cannot append an empty batch")
            sender = self._sender
            if sender is None:
                raise AppendError(UNKNOWN_SERVER_ERROR, "the Kafka log is not running")
            batch = self._batch(records)
        except (AppendError, ValueError) as error:
            refused: asyncio.Future[int] = asyncio.get_running_loop().create_future()
            refused.set_exception(error)
            return refused
        future = sender.submit(partition, batch, len(records))
        # Added before the caller's own callbacks, so the high watermark is reported
        # before the caller hears of the append.
        future.add_done_callback(functools.partial(self._appended, partition))
        return future

    def backlogged(self, partition: int) -> bool:
        sender = self._sender
        return sender is not None and sender.backlogged(partition)

    def register_ready_listener(self, listener: ReadyListener) -> None:
        self._ready_listener = listener
        if self._sender is not None:
            self._sender.ready_listener = listener

    def _appended(self, partition: int, done: asyncio.Future[int]) -> None:
        if not done.cancelled() and done.exception() is None:
            self._advance_high_watermark(partition, done.result(), notify=True)

    def _batch(self, records: Sequence[RawRecord]) -> bytes:
        """The records as one record batch, offsets relative to its start."""
        max_bytes = self._max_batch_bytes
        builder = DefaultRecordBatchBuilder(
            BATCH_MAGIC,
            NO_COMPRESSION,
            0,
            NO_PRODUCER_ID,
            NO_PRODUCER_EPOCH,
            NO_SEQUENCE,
            max_bytes,
        )
        timestamp_ms = int(time.time() * 1000)
        for relative_offset, (key, value) in enumerate(records):
            if builder.append(relative_offset, timestamp_ms, key, value, []) is None:
                raise AppendError(
                    MESSAGE_TOO_LARGE,
                    f"a batch of {len(records)} records exceeds {max_bytes} bytes",
                )
        batch = bytes(builder.build())
        if len(batch) > max_bytes:
            # The builder always takes the first record, however large.
            raise AppendError(
                MESSAGE_TOO_LARGE, f"a batch of {len(batch)} bytes exceeds {max_bytes} bytes"
            )
        return batch

    async def _leaders(self) -> dict[int, Leader]:
        """The leader of each partition that has one, from fresh metadata."""
        client = await self._loader()
        await client.add_topic(self._topic)
        await client.force_metadata_update()
        cluster = client.cluster
        leaders: dict[int, Leader] = {}
        for partition in cluster.partitions_for_topic(self._topic) or ():
            node_id = cluster.leader_for_partition(TopicPartition(self._topic, partition))
            if node_id is None or node_id < 0:
                continue
            broker = cluster.broker_metadata(node_id)
            if broker is None:
                continue
            leaders[partition] = Leader(int(node_id), str(broker.host), int(broker.port))
        return leaders

    # CoordinatorLoader

    async def load(self, partition: int, sink: RecordSink) -> LoadSummary:
        """Replay the partition into `sink`, up to the high watermark of the first Fetch
        response. Records without a key are skipped (they are not ours). Exceptions raised
        by `sink` propagate unchanged.

        Loads send Fetch requests themselves through one client of their own, and up to
        `max_concurrent_loads` run in parallel. A consumer per load (what this did first)
        builds a ConsumerRecord per record and bootstraps a client per partition: a third of
        the time of loading a million records. Here each record batch is read as it comes,
        its records handed to `sink` straight from aiokafka's batch reader.
        """
        if not 0 <= partition < self._num_partitions:
            raise LoadError(f"no partition {partition}")
        if not self._started or self._closed:
            raise LoadError("the Kafka log is not running")
        async with self._load_slots:
            self.loads_running += 1
            self.most_loads_running = max(self.most_loads_running, self.loads_running)
            try:
                summary = await self._load_partition(partition, sink)
            finally:
                self.loads_running -= 1
        self._advance_high_watermark(partition, summary.end_offset, notify=False)
        return summary

    async def _loader(self) -> AIOKafkaClient:
        async with self._loader_lock:
            client = self._load_client
            if client is None:
                client = AIOKafkaClient(
                    bootstrap_servers=self._bootstrap_servers,
                    client_id=f"{self._client_id}-loader",
                    request_timeout_ms=self._request_timeout_ms,
                )
                try:
                    await asyncio.wait_for(client.bootstrap(), self._request_timeout_ms / 1000)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await client.close()
                    raise
                self._load_client = client
            return client

    async def _leader(self, client: AIOKafkaClient, partition: int) -> int:
        tp = TopicPartition(self._topic, partition)
        for _ in range(2):
            await client.add_topic(self._topic)
            leader = client.cluster.leader_for_partition(tp)
            if leader is not None and leader >= 0:
                return int(leader)
            await client.force_metadata_update()
        raise LoadError(f"partition {partition} has no leader")

    async def _request(self, client: AIOKafkaClient, node_id: int, request: Any) -> Any:
        return await asyncio.wait_for(
            client.send(node_id, request), self._request_timeout_ms / 1000
        )

    async def _start_offset(self, client: AIOKafkaClient, node_id: int, partition: int) -> int:
        response = await self._request(
            client,
            node_id,
            OffsetRequest(-1, 0, [(self._topic, [(partition, EARLIEST_OFFSET)])]),
        )
        for _, partitions in response.topics:
            for index, error_code, *info in partitions:
                if index != partition:
                    continue
                if error_code:
                    raise LoadError(
                        f"cannot find the start of partition {partition}: error {error_code}"
                    )
                # v0 answers a list of offsets; later versions (timestamp, offset, ...).
                if response.API_VERSION == 0:
                    return int(info[0][0]) if info[0] else 0
                return int(info[1])
        raise LoadError(f"no start offset for partition {partition}")

    async def _load_partition(self, partition: int, sink: RecordSink) -> LoadSummary:
        loop = asyncio.get_running_loop()
        timeout_s = self._request_timeout_ms / 1000
        try:
            client = await self._loader()
            node_id = await self._leader(client, partition)
            start_offset = await self._start_offset(client, node_id, partition)
        except (KafkaError, TimeoutError, OSError) as error:
            raise LoadError(f"cannot find the start of partition {partition}: {error!r}") from error
        target: int | None = None
        position = start_offset
        records = 0
        payload_bytes = 0
        progress_deadline = loop.time() + timeout_s
        while target is None or position < target:
            request = FetchRequest(
                LOAD_FETCH_MAX_WAIT_MS,
                1,
                LOAD_FETCH_MAX_BYTES,
                0,
                [(self._topic, [(partition, position, LOAD_FETCH_MAX_BYTES)])],
            )
            try:
                response = await self._request(client, node_id, request)
            except (KafkaError, TimeoutError, OSError) as error:
                raise LoadError(f"cannot read partition {partition}: {error!r}") from error
            high_watermark, message_set = self._fetched(response, partition)
            if target is None:
                # The high watermark when the load started: records appended later are
                # not part of this load.
                target = high_watermark
            before = position
            reader = MemoryRecords(message_set) if message_set else None
            while reader is not None and position < target:
                batch = reader.next_batch()
                if batch is None:
                    break
                if not batch.validate_crc():
                    raise LoadError(f"a record batch of partition {partition} is corrupt")
                if not getattr(batch, "is_control_batch", False):
                    for record in batch:
                        offset = record.offset
                        if offset < position:
                            continue
                        if offset >= target:
                            break
                        key = record.key
                        if key is None:
                            continue
                        value = record.value
                        sink(offset, key, value)
                        records += 1
                        payload_bytes += len(key) + (len(value) if value is not None else 0)
                position = max(position, batch.next_offset)
            if position > before:
                progress_deadline = loop.time() + timeout_s
            elif loop.time() > progress_deadline:
                raise LoadError(
                    f"partition {partition} made no progress for {self._request_timeout_ms} ms "
                    f"(at offset {position}, high watermark {target})"
                )
        return LoadSummary(
            start_offset=start_offset, end_offset=target, records=records, bytes=payload_bytes
        )

    def _fetched(self, response: Any, partition: int) -> tuple[int, bytes]:
        """(high watermark, record bytes) of `partition` in a Fetch response."""
        for _, partitions in response.topics:
            for data in partitions:
                if data[0] != partition:
                    continue
                error_code = data[1]
                if error_code:
                    raise LoadError(f"cannot read partition {partition}: error {error_code}")
                # Every version: (partition, error_code, high_watermark, ..., records).
                return int(data[2]), data[-1] or b""
        raise LoadError(f"the Fetch response has no partition {partition}")

    # Internals

    async def _ensure_topic(self) -> int:
        """Create the topic when it does not exist; return its real partition count."""
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self._bootstrap_servers,
            client_id=self._client_id,
            request_timeout_ms=self._request_timeout_ms,
        )
        try:
            await admin.start()
            # Listing first, because asking for the metadata of one missing topic creates
            # it on brokers that auto-create topics, with the wrong configuration.
            if self._topic not in await admin.list_topics():
                await self._create_topic(admin)
            partitions = await self._describe_partition_count(admin)
        finally:
            await admin.close()
        if partitions != self._configured_partitions:
            log.warning(
                "topic %s has %d partitions, not the %d configured; the real count decides "
                "group placement",
                self._topic,
                partitions,
                self._configured_partitions,
            )
        return partitions

    async def _create_topic(self, admin: AIOKafkaAdminClient) -> None:
        new_topic = NewTopic(
            self._topic,
            self._configured_partitions,
            self._replication_factor,
            topic_configs=offsets_topic_configs(),
        )
        response = await admin.create_topics([new_topic])
        for topic_error in response.topic_errors:
            error_code = topic_error[1]
            if error_code == 0:
                log.info(
                    "created topic %s with %d partitions",
                    self._topic,
                    self._configured_partitions,
                )
            elif error_code == TOPIC_ALREADY_EXISTS:
                # Another server created it between our listing and our request.
                log.info("topic %s was created concurrently", self._topic)
            else:
                message = topic_error[2] if len(topic_error) > 2 else ""
                raise KafkaLogError(
                    f"cannot create topic {self._topic}: error {error_code} {message}"
                )

    async def _describe_partition_count(self, admin: AIOKafkaAdminClient) -> int:
        # A topic just created may take a moment to show its partitions and leaders.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._request_timeout_ms / 1000
        while True:
            (description,) = await admin.describe_topics([self._topic])
            partitions = description.get("partitions") or []
            ready = description.get("error_code") == 0 and all(
                p.get("error_code") == 0 and p.get("leader", -1) >= 0 for p in partitions
            )
            if ready and partitions:
                return len(partitions)
            if loop.time() > deadline:
                raise KafkaLogError(
                    f"topic {self._topic} is not ready: error {description.get('error_code')}, "
                    f"{len(partitions)} partitions"
                )
            await asyncio.sleep(0.05)

    def _advance_high_watermark(self, partition: int, offset: int, *, notify: bool) -> None:
        if offset <= self._high_watermarks.get(partition, 0):
            return
        self._high_watermarks[partition] = offset
        listener = self._listener
        if notify and listener is not None:
            try:
                listener(partition, offset)
            except Exception:
                # The batch is committed whatever the listener does; failing the append
                # would tell the caller the opposite.
                log.exception("high-watermark listener failed for partition %d", partition)

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._num_partitions:
            raise ValueError(
                f"partition {partition} is outside the log's {self._num_partitions} partitions"
            )
