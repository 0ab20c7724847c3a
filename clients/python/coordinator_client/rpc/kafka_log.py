"""What the consumer and the admin tool read from Kafka itself: partition counts, the
start and end of each partition's log, and the offset at a point in time.

The end of a log is the high watermark a Fetch response reports, not a ListOffsets(LATEST)
answer: the HW is what a consumer can read up to, and not every Kafka-protocol broker
answers ListOffsets(LATEST) exactly (the test broker's answer lags). For the same reason
the offset at a time is found by a binary search over the record timestamps that Fetch
returns, not by ListOffsets(timestamp); this assumes timestamps do not decrease along a
partition, which holds for LogAppendTime and for one producer's CreateTime.

The start of a log is ListOffsets(EARLIEST), which brokers answer correctly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Iterable, Mapping
from types import TracebackType
from typing import Any, Final

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from coordinator_client.kafka_metadata_request import (
    MetadataRequestWithoutAutoCreation,
    forbid_auto_topic_creation,
)
from coordinator_protocol.errors import ErrorCode

__all__ = ["KafkaLogReader", "stop_consumer"]

log = logging.getLogger(__name__)

# Small fetches: only the high watermark or one record's timestamp is wanted.
_FETCH_BYTES: Final = 64 * 1024
_FETCH_WAIT_MS: Final = 50
_POLL_MS: Final = 100
_STOP_TIMEOUT_S: Final = 10.0


def _idle(consumer: AIOKafkaConsumer) -> None:
    """Stop fetching between operations.

    Pausing rather than assigning nothing: aiokafka's fetcher loses a cancellation that
    arrives while it is handling an assignment change (aio-libs/aiokafka#983), so an
    `assign([])` just before `stop()` can make `stop()` wait forever.
    """
    consumer.pause(*consumer.assignment())


async def stop_consumer(consumer: AIOKafkaConsumer, timeout_s: float = _STOP_TIMEOUT_S) -> None:
    """`consumer.stop()`, bounded: if aiokafka's fetcher misses the cancellation (see
    `_idle`), a second one ends it and the stop is abandoned rather than hanging."""
    stopping = asyncio.ensure_future(consumer.stop())
    done, _ = await asyncio.wait({stopping}, timeout=timeout_s)
    if done:
        stopping.result()
        return
    log.warning("the Kafka consumer did not stop within %.0f s; abandoning it", timeout_s)
    stopping.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await stopping


class KafkaLogReader:
    """Reads log offsets from a Kafka cluster (a consumer without a group). Its metadata
    requests never create a topic (`kafka_metadata_request`): a topic that does not exist is
    missing from `partition_counts`, whatever the broker's `auto.create.topics.enable`.

    Args:
        bootstrap_servers: the Kafka cluster.
        timeout_ms: the bound of each operation.
        **kafka_options: passed to aiokafka's consumer (security settings and the like).
    """

    def __init__(
        self, bootstrap_servers: str, *, timeout_ms: int = 30_000, **kafka_options: Any
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_ms = timeout_ms
        self._options = kafka_options
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=_FETCH_BYTES,
            fetch_max_bytes=_FETCH_BYTES,
            fetch_max_wait_ms=_FETCH_WAIT_MS,
            request_timeout_ms=self.timeout_ms,
            **self._options,
        )
        forbid_auto_topic_creation(consumer._client)
        try:
            async with asyncio.timeout(self.timeout_ms / 1000):
                await consumer.start()
        except BaseException:
            await stop_consumer(consumer)
            raise
        self._consumer = consumer

    async def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            await stop_consumer(consumer)

    async def __aenter__(self) -> KafkaLogReader:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def _started(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            raise RuntimeError("KafkaLogReader is not started")
        return self._consumer

    async def partition_counts(self, topics: Collection[str]) -> dict[str, int]:
        """The partition count of each of `topics` that exists (one that does not is left
        out, and is not created)."""
        if not topics:
            return {}
        client = self._started()._client
        node_id = client.get_random_node()
        if node_id is None:
            raise KafkaError(f"no broker of {self.bootstrap_servers} is known")
        async with asyncio.timeout(self.timeout_ms / 1000):
            response = await client.send(
                node_id, MetadataRequestWithoutAutoCreation(sorted(set(topics)))
            )
        counts = {}
        for error_code, name, _internal, partitions in response.topics:
            if error_code == ErrorCode.NONE and partitions:
                counts[str(name)] = len(partitions)
        return counts

    async def partitions_of(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of `topics` (those that exist), sorted."""
        counts = await self.partition_counts(set(topics))
        return sorted(
            TopicPartition(topic, partition)
            for topic, count in counts.items()
            for partition in range(count)
        )

    async def beginning_offsets(
        self, partitions: Collection[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """The log start offset of each partition (ListOffsets EARLIEST)."""
        if not partitions:
            return {}
        consumer = self._started()
        async with asyncio.timeout(self.timeout_ms / 1000):
            offsets: dict[TopicPartition, int] = await consumer.beginning_offsets(list(partitions))
        return offsets

    async def end_offsets(
        self,
        partitions: Collection[TopicPartition],
        *,
        starting_offsets: Mapping[TopicPartition, int] | None = None,
    ) -> dict[TopicPartition, int]:
        """The high watermark of each partition, as a Fetch reports it.

        Args:
            starting_offsets: where to fetch from (any readable offset will do; the
                committed offset transfers the least); by default the log start.

        Raises:
            TimeoutError: some partition reported no high watermark in time.
        """
        if not partitions:
            return {}
        consumer = self._started()
        async with self._lock, asyncio.timeout(self.timeout_ms / 1000):
            starts = dict(starting_offsets or {})
            missing_starts = [tp for tp in partitions if tp not in starts]
            if missing_starts:
                starts.update(await consumer.beginning_offsets(missing_starts))
            consumer.assign(list(partitions))
            for tp in partitions:
                consumer.seek(tp, starts[tp])
            # A previous assignment's high watermark does not count: wait for a fresh one.
            highwater: dict[TopicPartition, int] = {}
            while len(highwater) < len(partitions):
                await consumer.getmany(timeout_ms=_POLL_MS, max_records=1)
                for tp in partitions:
                    value = consumer.highwater(tp)
                    if value is not None:
                        highwater[tp] = value
            _idle(consumer)
            return highwater

    async def offsets_for_time(
        self, partitions: Collection[TopicPartition], timestamp_ms: int
    ) -> dict[TopicPartition, int]:
        """For each partition, the first offset whose record timestamp is at or after
        `timestamp_ms`; the high watermark when no record is that recent (Kafka's reset
        tool does the same with ListOffsets' "no such offset")."""
        if not partitions:
            return {}
        starts = await self.beginning_offsets(partitions)
        ends = await self.end_offsets(partitions, starting_offsets=starts)
        consumer = self._started()
        result = {}
        async with self._lock, asyncio.timeout(self.timeout_ms / 1000):
            for tp in sorted(partitions):
                result[tp] = await self._search(consumer, tp, timestamp_ms, starts[tp], ends[tp])
            _idle(consumer)
        return result

    async def _search(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, timestamp_ms: int, low: int, high: int
    ) -> int:
        # Invariant: every record before `low` is older than timestamp_ms, and the answer
        # is at most `high`.
        consumer.assign([tp])
        while low < high:
            middle = (low + high) // 2
            record = await self._first_record_from(consumer, tp, middle, high)
            if record is None or record.timestamp >= timestamp_ms:
                high = middle
            else:
                low = record.offset + 1
        return low

    async def _first_record_from(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int, end: int
    ) -> ConsumerRecord[Any, Any] | None:
        consumer.seek(tp, offset)
        while True:
            fetched = await consumer.getmany(tp, timeout_ms=_POLL_MS, max_records=1)
            for record in fetched.get(tp, ()):
                if record.offset >= offset:
                    return record if record.offset < end else None
            highwater = consumer.highwater(tp)
            if highwater is not None and highwater <= offset:
                return None
