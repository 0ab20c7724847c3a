"""Following partitions of the Kafka log as they grow: what warm standbys read.

One round reads every followed partition at once, as a consumer does: one Fetch request per
partition leader, each partition from its own position, the whole round at most `max_bytes`
(a partition at most its share of them, and a record batch larger than that still comes
whole, KIP-74). The broker holds a Fetch that finds fewer than `min_bytes` new for up to
`max_wait_ms` and answers as soon as that many have committed, so a standby that calls again
at once never spins, lags by at most `max_wait_ms`, and on a busy log reads in rounds of
`min_bytes` rather than one round per append (each round costs the broker and the standby's
node a Fetch: a round per append cost the broker about as much again as the appends). The
Fetch goes up to the high watermark (isolation READ_UNCOMMITTED, which for a consumer is the
high watermark): a standby never sees a record the log could still lose.

The rounds have a connection of their own (`connect`): a broker answers the requests of one
connection in order, so a Fetch it holds for `max_wait_ms` would delay the loads and the
producer-id requests of a takeover queued behind it, and a takeover is what a failover waits
on.

A partition that cannot be read now (its leader moving, its broker down, no answer in time)
is reported to be retried from the same position; one that cannot be read on from its
position (the log no longer holds the offset, ends below it, or a batch is corrupt) is
reported lost, for its follower to start again from the log's start. The leaders are looked
up once and again after any error.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest

from coordinator_server.storage.api import FollowResult, FollowSink, LoadError
from coordinator_server.storage.kafka.load import (
    EARLIEST_OFFSET,
    FETCH_MIN_BYTES,
    RETRIABLE_ERRORS,
    latest_records,
)
from coordinator_server.storage.kafka.metadata import TopicMetadata, TopicMetadataError

__all__ = ["KafkaFollower"]

READ_UNCOMMITTED = 0


class _Unreadable(Exception):
    """A partition that cannot be read now (`lost` False) or from its position (True)."""

    def __init__(self, why: str, *, lost: bool) -> None:
        super().__init__(why)
        self.lost = lost


class KafkaFollower:
    """The Kafka log's LogFollower."""

    def __init__(
        self,
        topic: str,
        *,
        new_client: Callable[[], Awaitable[AIOKafkaClient]],
        metadata: Callable[[], Awaitable[TopicMetadata]],
        stopped: Callable[[], str | None],
        request_timeout_ms: int,
    ) -> None:
        """`new_client` makes the rounds' own client, bootstrapped (once, and again after
        that failed); `metadata` reads the topic's metadata, checked (TopicLostError for a topic
        gone or resized, TopicMetadataError when it cannot be read now); `stopped` says why
        the log stopped for good, or None."""
        self._topic = topic
        self._new_client = new_client
        self._client: AIOKafkaClient | None = None
        self._connecting = asyncio.Lock()
        self._metadata = metadata
        self._stopped = stopped
        self._request_timeout_s = request_timeout_ms / 1000
        # Each partition's leader as last looked up (None: look them up again).
        self._leaders: dict[int, int] | None = None
        self.rounds = 0

    async def follow(
        self,
        positions: Mapping[int, int | None],
        sink: FollowSink,
        *,
        max_wait_ms: int,
        max_bytes: int,
        min_bytes: int = 1,
    ) -> FollowResult:
        stopped = self._stopped()
        if stopped is not None:
            raise LoadError(f"the log stopped: {stopped}")
        self.rounds += 1
        read: dict[int, int] = {}
        high_watermarks: dict[int, int] = {}
        retry: dict[int, str] = {}
        lost: dict[int, str] = {}
        try:
            client = await self._connect()
            by_leader = await self._by_leader(client, positions, retry)
        except (KafkaError, OSError, TimeoutError, TopicMetadataError) as error:
            self._leaders = None
            return FollowResult({}, {}, dict.fromkeys(positions, f"{error!r}"), {})
        starts = await self._starts(client, by_leader, positions, retry)
        share = max(max_bytes // max(len(starts), 1), FETCH_MIN_BYTES)
        # The broker fills a Fetch's partitions in the order asked, and returns a batch
        # larger than what is left of the budget only for the first partition with records:
        # each round starts at another one, so that no partition is always left over.
        fetches = {
            node: _rotated([(p, starts[p]) for p in partitions if p in starts], self.rounds)
            for node, partitions in by_leader.items()
        }
        answers = await asyncio.gather(
            *(
                self._fetch(client, node, wanted, max_wait_ms, min_bytes, max_bytes, share)
                for node, wanted in fetches.items()
                if wanted
            ),
            return_exceptions=True,
        )
        for wanted, answer in zip([w for w in fetches.values() if w], answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, KafkaError | OSError | TimeoutError):
                    raise answer
                self._leaders = None
                for partition, _ in wanted:
                    retry[partition] = f"{answer!r}"
                continue
            for partition, position in wanted:
                data = answer.get(partition)
                try:
                    if data is None:
                        raise _Unreadable("the Fetch response has no such partition", lost=False)
                    read[partition], high_watermarks[partition] = self._replay(
                        partition, position, data, sink
                    )
                except _Unreadable as unreadable:
                    if unreadable.lost:
                        lost[partition] = str(unreadable)
                    else:
                        self._leaders = None
                        retry[partition] = str(unreadable)
        return FollowResult(read, high_watermarks, retry, lost)

    async def close(self) -> None:
        async with self._connecting:
            client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), self._request_timeout_s)

    async def _connect(self) -> AIOKafkaClient:
        async with self._connecting:
            if self._client is None:
                self._client = await self._new_client()
            return self._client

    async def _by_leader(
        self,
        client: AIOKafkaClient,
        positions: Mapping[int, int | None],
        retry: dict[int, str],
    ) -> dict[int, list[int]]:
        """The partitions by the node id of their leader; those without one go to `retry`."""
        leaders = self._leaders
        if leaders is None or any(p not in leaders for p in positions):
            metadata = await self._metadata()
            leaders = {p: node for p, node in metadata.leaders.items() if node >= 0}
            cluster = client.cluster
            if any(cluster.broker_metadata(node) is None for node in leaders.values()):
                # Brokers aiokafka's client has not heard of: its own metadata lists them.
                await asyncio.wait_for(client.force_metadata_update(), self._request_timeout_s)
                leaders = {
                    p: node
                    for p, node in leaders.items()
                    if cluster.broker_metadata(node) is not None
                }
            self._leaders = leaders
        by_leader: dict[int, list[int]] = {}
        for partition in positions:
            node = leaders.get(partition)
            if node is None:
                retry[partition] = "the partition has no leader"
            else:
                by_leader.setdefault(node, []).append(partition)
        return by_leader

    async def _starts(
        self,
        client: AIOKafkaClient,
        by_leader: dict[int, list[int]],
        positions: Mapping[int, int | None],
        retry: dict[int, str],
    ) -> dict[int, int]:
        """Each partition's position, those to read from the start looked up (ListOffsets)."""
        starts = {
            p: position
            for partitions in by_leader.values()
            for p in partitions
            if (position := positions[p]) is not None
        }
        asks = {
            node: [p for p in partitions if positions[p] is None]
            for node, partitions in by_leader.items()
        }
        asks = {node: partitions for node, partitions in asks.items() if partitions}
        answers = await asyncio.gather(
            *(self._earliest(client, node, partitions) for node, partitions in asks.items()),
            return_exceptions=True,
        )
        for partitions, answer in zip(asks.values(), answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, KafkaError | OSError | TimeoutError):
                    raise answer
                self._leaders = None
                retry.update(dict.fromkeys(partitions, f"{answer!r}"))
                continue
            for partition in partitions:
                found = answer.get(partition)
                if isinstance(found, int):
                    starts[partition] = found
                else:
                    self._leaders = None
                    retry[partition] = found or "the ListOffsets response has no such partition"
        return starts

    async def _earliest(
        self, client: AIOKafkaClient, node: int, partitions: list[int]
    ) -> dict[int, int | str]:
        """Each partition's start offset, or why it could not be read."""
        request = OffsetRequest(-1, 0, [(self._topic, [(p, EARLIEST_OFFSET) for p in partitions])])
        response = await asyncio.wait_for(client.send(node, request), self._request_timeout_s)
        found: dict[int, int | str] = {}
        for _, answered in response.topics:
            for index, error_code, *info in answered:
                if error_code:
                    found[index] = f"error {error_code} finding the partition's start"
                elif response.API_VERSION == 0:
                    # v0 answers a list of offsets; later versions (timestamp, offset, ...).
                    found[index] = int(info[0][0]) if info[0] else 0
                else:
                    found[index] = int(info[1])
        return found

    async def _fetch(
        self,
        client: AIOKafkaClient,
        node: int,
        wanted: list[tuple[int, int]],
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        share: int,
    ) -> dict[int, Any]:
        """One Fetch of the partitions `node` leads: each partition's answer."""
        request = FetchRequest(
            max_wait_ms,
            min_bytes,
            max_bytes,
            READ_UNCOMMITTED,
            [(self._topic, [(p, position, share) for p, position in wanted])],
        )
        response = await asyncio.wait_for(
            client.send(node, request), self._request_timeout_s + max_wait_ms / 1000
        )
        return {data[0]: data for _, partitions in response.topics for data in partitions}

    @staticmethod
    def _replay(partition: int, position: int, data: Any, sink: FollowSink) -> tuple[int, int]:
        """Hand the records of one partition's answer to the sink: (the position after them,
        the high watermark)."""
        # Every version: (partition, error_code, high_watermark, ..., records).
        error_code, high_watermark, message_set = int(data[1]), int(data[2]), data[-1] or b""
        if error_code in RETRIABLE_ERRORS:
            raise _Unreadable(f"error {error_code}", lost=False)
        if error_code:
            raise _Unreadable(f"error {error_code} at offset {position}", lost=True)
        if high_watermark < position:
            raise _Unreadable(
                f"the partition ends at {high_watermark}, below the offset {position} read "
                "to already",
                lost=True,
            )
        try:
            after, latest = latest_records(message_set, partition, position, high_watermark)
        except LoadError as error:
            raise _Unreadable(str(error), lost=True) from error
        if after == position and message_set and position < high_watermark:
            raise _Unreadable(
                f"the record batch at offset {position} does not come whole", lost=False
            )
        if after > position:
            sink(partition, latest, after)
        return after, high_watermark


def _rotated(items: list[tuple[int, int]], by: int) -> list[tuple[int, int]]:
    if not items:
        return items
    cut = by % len(items)
    return items[cut:] + items[:cut]
