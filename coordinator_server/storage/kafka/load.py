"""One load of a partition of the Kafka log: Fetch requests from the partition's start to the
high watermark the first response reports, that keep going from where they are whatever the
broker's speed.

A load used to give up when a Fetch took longer than the request timeout, and the partition
was then loaded again from its start: on a slow broker with a long history, every attempt
timed out somewhere in the middle, and the partition never became ACTIVE. Here a Fetch that
times out is sent again from the same offset with twice the timeout (up to
`MAX_TIMEOUT_FACTOR` times the request timeout) and a quarter of the bytes (down to
`FETCH_MIN_BYTES`; a batch larger than that still comes whole), and a lost connection, a
broker that does not answer or a partition without a leader are waited out, the leader looked
up again. Each is logged as a WARNING, fewer the longer it lasts (the 1st, 2nd, 4th, 8th...
time in a load). A broker that answers a fetch empty below the high watermark (tansu does
when the fetch may wait only a moment) is given longer waits, and shorter ones again once it
answers in less. A load gives up only on what waiting cannot mend: the topic gone or resized
(`TopicLostError`), a high watermark below one this server saw before (records lost), an
offset out of range, a corrupt batch, or any other error code a broker answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError, RequestTimedOutError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.memory_records import MemoryRecords

from coordinator_server.storage.api import LatestRecords, LoadError, LoadSummary, RecordSink
from coordinator_server.storage.error_codes import (
    FENCED_LEADER_EPOCH,
    KAFKA_STORAGE_ERROR,
    LEADER_NOT_AVAILABLE,
    NOT_LEADER_OR_FOLLOWER,
    OFFSET_NOT_AVAILABLE,
    REPLICA_NOT_AVAILABLE,
    REQUEST_TIMED_OUT,
    UNKNOWN_LEADER_EPOCH,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from coordinator_server.storage.kafka.metadata import (
    TopicLostError,
    TopicMetadata,
    TopicMetadataError,
)

__all__ = [
    "FETCH_LONGEST_WAIT_MS",
    "FETCH_MAX_BYTES",
    "FETCH_MAX_WAIT_MS",
    "MAX_TIMEOUT_FACTOR",
    "PartitionLoad",
    "latest_records",
    "replay_batches",
    "unreadable_partitions",
]

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 16 * 1024 * 1024
# The smallest fetch a slow broker is asked for. A record batch is never split: a broker
# answers the first batch at the fetch offset whole, whatever the limit (KIP-74).
FETCH_MIN_BYTES = 64 * 1024
# A fetch that ends inside a batch larger than it (a broker without KIP-74) is sent again
# twice as large, up to this.
FETCH_LARGEST_BYTES = 4 * FETCH_MAX_BYTES
# A load reads only below the high watermark, where the records are there already, so the
# broker need not hold a fetch. A held fetch also holds every request behind it: a broker
# answers a connection's requests one at a time, and the loads share one connection. At
# 20 ms, 50 empty partitions took 1.15 s to load, one after the other; at 1 ms, 0.14 s. (Not
# 0: tansu answers a fetch that may not wait without its partitions.)
FETCH_MAX_WAIT_MS = 1
# A broker may answer a fetch that waits that little without records although they are
# there (tansu does: it reads its storage within the wait): each such empty answer below the
# high watermark doubles the wait, up to this, and each answer with records halves it again.
FETCH_LONGEST_WAIT_MS = 1_000
# How far a slow broker stretches a fetch's timeout, in request timeouts.
MAX_TIMEOUT_FACTOR = 8
# The wait before trying again after an error, by how many there were in a row.
RETRY_BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0)
# ListOffsets' "earliest" timestamp.
EARLIEST_OFFSET = -2

# Errors of a Fetch or a ListOffsets after which the same request can succeed, once the
# partition's leader is looked up again (a metadata read, which also checks the topic).
RETRIABLE_ERRORS = frozenset(
    {
        UNKNOWN_TOPIC_OR_PARTITION,  # a broker that does not host it (yet, or any more)
        LEADER_NOT_AVAILABLE,
        NOT_LEADER_OR_FOLLOWER,
        REQUEST_TIMED_OUT,
        REPLICA_NOT_AVAILABLE,
        KAFKA_STORAGE_ERROR,
        FENCED_LEADER_EPOCH,
        UNKNOWN_LEADER_EPOCH,
        OFFSET_NOT_AVAILABLE,
    }
)


class _Retry(Exception):
    """Something waiting mends: wait, look the leader up again, and go on."""


class PartitionLoad:
    """Replays one partition into a sink; `run()` once."""

    def __init__(
        self,
        client: AIOKafkaClient,
        topic: str,
        partition: int,
        *,
        metadata: Callable[[], Awaitable[TopicMetadata]],
        report_lost: Callable[[str], None],
        request_timeout_ms: int,
        known_high_watermark: int,
    ) -> None:
        """`metadata` reads the topic's metadata, checked (it raises TopicLostError for a
        topic gone or resized, TopicMetadataError when it cannot be read now);
        `report_lost` stops the log for a loss this load finds itself;
        `known_high_watermark` is the highest this server saw the partition reach."""
        self._client = client
        self._topic = topic
        self._partition = partition
        self._metadata = metadata
        self._report_lost = report_lost
        self._request_timeout_s = request_timeout_ms / 1000
        self._known_high_watermark = known_high_watermark
        self._timeout_s = self._request_timeout_s
        self._max_timeout_s = self._request_timeout_s * MAX_TIMEOUT_FACTOR
        self._fetch_bytes = FETCH_MAX_BYTES
        self._fetch_wait_ms = FETCH_MAX_WAIT_MS
        self._node_id: int | None = None
        self.position = 0
        self.records = 0
        self.payload_bytes = 0
        # Errors waited out in this load, and how many since the last fetch that worked.
        self.retries = 0
        self._in_a_row = 0
        self.timeouts = 0

    async def run(self, sink: RecordSink, start_offset: int | None = None) -> LoadSummary:
        """Load from `start_offset` (None: the partition's start, as ListOffsets says)."""
        if start_offset is None:
            start_offset = await self._until_done(self._start_offset)
        self.position = start_offset
        target: int | None = None
        loop = asyncio.get_running_loop()
        while target is None or self.position < target:
            sent = loop.time()
            try:
                high_watermark, message_set = await self._fetch()
            except _Retry as retry:
                await self._wait_out(retry)
                continue
            except (TimeoutError, RequestTimedOutError):
                self._fetch_timed_out(target)
                continue
            if target is None:
                target = self._check_high_watermark(high_watermark)
            before = self.position
            self._replay(message_set, target, sink)
            if self.position > before:
                self._in_a_row = 0
                if loop.time() - sent < self._fetch_wait_ms / 2000:
                    # Answered well within its wait: the broker needs no longer now.
                    self._fetch_wait_ms = max(self._fetch_wait_ms // 2, FETCH_MAX_WAIT_MS)
                if loop.time() - sent < self._timeout_s / 4 and self._fetch_bytes < FETCH_MAX_BYTES:
                    # The broker keeps up again: larger fetches, fewer round trips.
                    self._fetch_bytes = min(self._fetch_bytes * 2, FETCH_MAX_BYTES)
            elif self.position < target:
                self._no_progress(message_set, target)
                if not message_set:
                    if self._fetch_wait_ms < FETCH_LONGEST_WAIT_MS:
                        # The records are there: the broker wants longer to read them.
                        self._fetch_wait_ms = min(self._fetch_wait_ms * 2, FETCH_LONGEST_WAIT_MS)
                        continue
                    await self._wait_out(
                        _Retry(f"an empty fetch below the high watermark {target}")
                    )
        return LoadSummary(
            start_offset=start_offset,
            end_offset=target,
            records=self.records,
            bytes=self.payload_bytes,
        )

    # The requests.

    async def _until_done(self, step: Callable[[], Awaitable[int]]) -> int:
        while True:
            try:
                return await step()
            except _Retry as retry:
                await self._wait_out(retry)
            except (TimeoutError, RequestTimedOutError):
                await self._wait_out(_Retry(f"no answer within {self._timeout_s * 1000:.0f} ms"))

    async def _leader(self) -> int:
        node_id = self._node_id
        if node_id is not None:
            return node_id
        try:
            metadata = await self._metadata()
        except TopicMetadataError as error:
            raise _Retry(str(error)) from error
        node_id = metadata.leaders.get(self._partition, -1)
        if node_id < 0:
            raise _Retry("the partition has no leader")
        client = self._client
        if client.cluster.broker_metadata(node_id) is None:
            # A broker aiokafka's client has not heard of: its own metadata (every topic, so
            # that nothing is created) lists it.
            try:
                await asyncio.wait_for(client.force_metadata_update(), self._request_timeout_s)
            except (KafkaError, OSError, TimeoutError) as error:
                raise _Retry(f"cannot learn where node {node_id} is: {error!r}") from error
            if client.cluster.broker_metadata(node_id) is None:
                raise _Retry(f"the leader, node {node_id}, is not among the brokers")
        self._node_id = node_id
        return node_id

    async def _send(self, request: Any, timeout_s: float) -> Any:
        node_id = await self._leader()
        try:
            return await asyncio.wait_for(self._client.send(node_id, request), timeout_s)
        except (TimeoutError, RequestTimedOutError):
            raise
        except (KafkaError, OSError) as error:
            self._node_id = None
            raise _Retry(f"{error!r} from node {node_id}") from error

    async def _start_offset(self) -> int:
        response = await self._send(
            OffsetRequest(-1, 0, [(self._topic, [(self._partition, EARLIEST_OFFSET)])]),
            self._request_timeout_s,
        )
        for _, partitions in response.topics:
            for index, error_code, *info in partitions:
                if index != self._partition:
                    continue
                self._check_error_code(error_code, "find the start of")
                # v0 answers a list of offsets; later versions (timestamp, offset, ...).
                if response.API_VERSION == 0:
                    return int(info[0][0]) if info[0] else 0
                return int(info[1])
        raise LoadError(f"the ListOffsets response has no partition {self._partition}")

    async def _fetch(self) -> tuple[int, bytes]:
        """(high watermark, record bytes) of a Fetch at the current position."""
        request = FetchRequest(
            self._fetch_wait_ms,
            1,
            self._fetch_bytes,
            0,
            [(self._topic, [(self._partition, self.position, self._fetch_bytes)])],
        )
        response = await self._send(request, self._timeout_s + self._fetch_wait_ms / 1000)
        for _, partitions in response.topics:
            for data in partitions:
                if data[0] != self._partition:
                    continue
                self._check_error_code(data[1], "read")
                # Every version: (partition, error_code, high_watermark, ..., records).
                return int(data[2]), data[-1] or b""
        raise LoadError(f"the Fetch response has no partition {self._partition}")

    def _check_error_code(self, error_code: int, doing: str) -> None:
        if not error_code:
            return
        if error_code in RETRIABLE_ERRORS:
            self._node_id = None
            raise _Retry(f"error {error_code}")
        raise LoadError(
            f"cannot {doing} partition {self._partition} at offset {self.position}: "
            f"error {error_code}"
        )

    # What the answers mean.

    def _check_high_watermark(self, high_watermark: int) -> int:
        """The high watermark when the load started (records appended later are not part
        of it), unless it shows records lost."""
        if high_watermark < self._known_high_watermark:
            reason = (
                f"partition {self._partition} of topic {self._topic} ends at offset "
                f"{high_watermark}, below the {self._known_high_watermark} this server saw: "
                "the topic lost records (deleted and created again?)"
            )
            self._report_lost(reason)
            raise TopicLostError(reason)
        return high_watermark

    def _replay(self, message_set: bytes, target: int, sink: RecordSink) -> None:
        self.position, records, payload_bytes = replay_batches(
            message_set, self._partition, self.position, target, sink
        )
        self.records += records
        self.payload_bytes += payload_bytes

    # Slow brokers and errors.

    def _fetch_timed_out(self, target: int | None) -> None:
        """A fetch with no answer in time: the same fetch again, smaller and given longer."""
        self.timeouts += 1
        timed_out_ms = self._timeout_s * 1000
        adapted = self._timeout_s < self._max_timeout_s or self._fetch_bytes > FETCH_MIN_BYTES
        self._timeout_s = min(self._timeout_s * 2, self._max_timeout_s)
        self._fetch_bytes = max(self._fetch_bytes // 4, FETCH_MIN_BYTES)
        if adapted or _seldom(self.timeouts):
            log.warning(
                "partition=%d a fetch at offset %d%s got no answer within %.0f ms; the load "
                "goes on from there with a timeout of %.0f ms and at most %d bytes a fetch "
                "(%d records loaded; %d timeouts in this load)",
                self._partition,
                self.position,
                "" if target is None else f" of {target}",
                timed_out_ms,
                self._timeout_s * 1000,
                self._fetch_bytes,
                self.records,
                self.timeouts,
            )

    def _no_progress(self, message_set: bytes, target: int) -> None:
        if not message_set:
            return
        # Bytes came, but no whole batch past the position: the next batch is larger than
        # the fetch (a broker that cuts batches).
        if self._fetch_bytes >= FETCH_LARGEST_BYTES:
            raise LoadError(
                f"partition {self._partition}: the record batch at offset {self.position} "
                f"does not come whole in a fetch of {self._fetch_bytes} bytes"
            )
        self._fetch_bytes = min(max(self._fetch_bytes, len(message_set)) * 2, FETCH_LARGEST_BYTES)

    async def _wait_out(self, retry: _Retry) -> None:
        self.retries += 1
        backoff_s = RETRY_BACKOFF_S[min(self._in_a_row, len(RETRY_BACKOFF_S) - 1)]
        self._in_a_row += 1
        if _seldom(self.retries):
            log.warning(
                "partition=%d cannot read the log at offset %d: %s; trying again from there "
                "in %.2f s (%d records loaded; %d retries in this load)",
                self._partition,
                self.position,
                retry,
                backoff_s,
                self.records,
                self.retries,
            )
        await asyncio.sleep(backoff_s)


async def unreadable_partitions(
    client: AIOKafkaClient, topic: str, leaders: dict[int, int], timeout_s: float
) -> set[int]:
    """The partitions of `topic` that their leader (`leaders`: partition to node id, as
    metadata says) cannot serve a read of yet: one ListOffsets to each leader, as a load's
    first request would be. An error no wait mends counts as readable: the load that meets
    it says what it is."""
    by_leader: dict[int, list[int]] = {}
    for partition, node_id in leaders.items():
        by_leader.setdefault(node_id, []).append(partition)
    waiting: set[int] = set()
    for node_id, partitions in by_leader.items():
        request = OffsetRequest(-1, 0, [(topic, [(p, EARLIEST_OFFSET) for p in partitions])])
        response = await asyncio.wait_for(client.send(node_id, request), timeout_s)
        answered: set[int] = set()
        for _, results in response.topics:
            for index, error_code, *_ in results:
                answered.add(index)
                if error_code in RETRIABLE_ERRORS:
                    waiting.add(index)
        waiting.update(set(partitions) - answered)
    return waiting


def replay_batches(
    message_set: bytes, partition: int, position: int, target: int, sink: RecordSink
) -> tuple[int, int, int]:
    """Hand `sink` the records of a Fetch response's record bytes from `position` up to
    `target` (records without a key are not ours, control batches neither); (the position
    after them, records handed, their key and value bytes). Raises LoadError for a corrupt
    batch."""
    records = 0
    payload_bytes = 0
    reader = MemoryRecords(message_set) if message_set else None
    while reader is not None and position < target:
        batch = reader.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise LoadError(
                f"a record batch of partition {partition} at offset {batch.base_offset} is corrupt"
            )
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
        position = max(position, min(batch.next_offset, target))
    return position, records, payload_bytes


def latest_records(
    message_set: bytes, partition: int, position: int, target: int
) -> tuple[int, LatestRecords]:
    """The latest record of each key in a Fetch response's record bytes from `position` up
    to `target` (records without a key are not ours, control batches neither), and the
    position after them. Raises LoadError for a corrupt batch.

    What a standby reads: most records it reads are overwritten by a later one of the same
    key, so this keeps to a loop that builds no more than each record's dict entry (about
    half of what `replay_batches` with a sink spends a record)."""
    latest: dict[Any, tuple[int, bytes | None]] = {}
    reader = MemoryRecords(message_set) if message_set else None
    while reader is not None and position < target:
        batch = reader.next_batch()
        if batch is None:
            break
        if not batch.validate_crc():
            raise LoadError(
                f"a record batch of partition {partition} at offset {batch.base_offset} is corrupt"
            )
        next_offset = batch.next_offset
        if not getattr(batch, "is_control_batch", False):
            if batch.base_offset >= position and next_offset <= target:
                for record in batch:
                    latest[record.key] = (record.offset, record.value)
            else:
                for record in batch:
                    offset = record.offset
                    if position <= offset < target:
                        latest[record.key] = (offset, record.value)
        position = max(position, min(next_offset, target))
    # Keyless records went in under None, one entry however many: out with them at once.
    latest.pop(None, None)
    return position, latest


def _seldom(count: int) -> bool:
    """True for the 1st, 2nd, 4th, 8th... time: a log line for a condition that lasts."""
    return count & (count - 1) == 0
