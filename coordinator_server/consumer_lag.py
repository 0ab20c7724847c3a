"""Consumer lag: how far each group's committed offset is behind its partition's log end
offset on the data Kafka cluster, refreshed on an interval.

The groups live here, not in the Kafka cluster's own coordinator, so Burrow and Kafka's lag
exporters (which ask the brokers for the groups' offsets) cannot see them: this is the only
place their lag can come from. `kafka-consumer-groups.sh`'s LAG is the same figure: the end
offset a ListOffsets(LATEST, read_uncommitted) answers, the high watermark, minus the
committed offset; here never below 0 (a committed offset past the end, as after a topic was
recreated, counts as no lag).

A refresh runs on its own task, off the partitions' queues: it reads the committed offsets
of the partitions this node serves in slices, the event loop free between them, and asks
the data cluster for the end offsets of what it read: one MetadataRequest that never
creates a topic, then one ListOffsets per leader and `MAX_PARTITIONS_PER_REQUEST`
partitions. Its work is bounded by `max_series`, the most (group, topic, partition) series
it reports: the committed offsets past it are left out, counted in
`ConsumerLagMetrics.series_dropped`, and said once in a WARNING. A topic the data cluster
does not know is left out of the report (its offsets may be a consumer's of another
cluster); a partition whose end offset could not be read is left out of that refresh's
report, which counts as a failed refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from itertools import islice

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.protocol.offset import OffsetRequest

from coordinator_client.kafka_metadata_request import (
    MetadataRequestWithoutAutoCreation,
    forbid_auto_topic_creation,
)
from coordinator_server.metrics import ConsumerLagMetrics
from coordinator_server.prometheus import LAG_HEADER, lag_samples
from coordinator_server.storage.error_codes import UNKNOWN_TOPIC_OR_PARTITION
from coordinator_server.storage.kafka.security import KafkaSecurity

__all__ = [
    "MAX_PARTITIONS_PER_REQUEST",
    "OFFSETS_PER_SLICE",
    "CommittedOffset",
    "ConsumerLag",
]

log = logging.getLogger(__name__)

CommittedOffset = tuple[str, str, int, int]
"""(group, topic, partition, committed offset)."""

OFFSETS_PER_SLICE = 2000
"""Committed offsets read between two turns of the event loop (a few milliseconds)."""
MAX_PARTITIONS_PER_REQUEST = 1000
"""Partitions one ListOffsets request asks for."""
_LATEST = -1
_READ_UNCOMMITTED = 0


class _EndOffsets:
    """What one refresh learnt of the data partitions' end offsets."""

    def __init__(self) -> None:
        self.ends: dict[tuple[str, int], int] = {}
        # Why some end offset could not be read (None: every one the refresh needed was).
        self.failure: str | None = None

    def failed(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason


class ConsumerLag:
    """Refreshes `metrics` every `interval_ms` from the committed offsets `committed()` gives
    (of the partitions this node serves) and the data cluster at `bootstrap_servers`.

    `committed()` must be safe to resume after the event loop ran (a commit may change the
    offsets between two slices); `total_offsets()` counts the offsets it would give.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        security: KafkaSecurity,
        committed: Callable[[], Iterator[CommittedOffset]],
        total_offsets: Callable[[], int],
        metrics: ConsumerLagMetrics,
        interval_ms: int,
        max_series: int,
        request_timeout_ms: int,
        client_id: str = "coordinator-server-lag",
    ) -> None:
        if interval_ms < 1:
            raise ValueError(f"interval_ms must be at least 1, got {interval_ms}")
        if max_series < 1:
            raise ValueError(f"max_series must be at least 1, got {max_series}")
        self._bootstrap_servers = bootstrap_servers
        self._security = security
        self._committed = committed
        self._total_offsets = total_offsets
        self.metrics = metrics
        self._interval_s = interval_ms / 1000
        self._max_series = max_series
        self._timeout_s = request_timeout_ms / 1000
        self._client_id = client_id
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._warned_dropped = False
        self._failing = False

    def start(self) -> None:
        """Refresh now and then every interval, on a task of its own. Connecting to the
        data cluster is part of each refresh: an unreachable cluster fails refreshes (with a
        WARNING), never the server."""
        if self._task is not None:
            raise RuntimeError("consumer lag starts once")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="consumer-lag")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._close_client()

    async def _run(self) -> None:
        while True:
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:
                # A bug must not end the refreshes for good: the next one tries again.
                log.exception("consumer lag: the refresh failed")
            await asyncio.sleep(self._interval_s)

    async def refresh(self) -> None:
        """One refresh: the committed offsets, their partitions' end offsets, the lag."""
        offsets, dropped = await self._read_committed()
        ends = _EndOffsets()
        topics = sorted({topic for _, topic, _, _ in offsets})
        if topics:
            client = await self._connected(ends)
            if client is not None:
                await self._read_end_offsets(client, topics, offsets, ends)
        lag: dict[tuple[str, str, int], int] = {}
        for group, topic, partition, committed in offsets:
            end = ends.ends.get((topic, partition))
            if end is not None:
                lag[(group, topic, partition)] = max(0, end - committed)
        exposition = await self._render(lag)
        metrics = self.metrics
        metrics.lag = lag
        metrics.exposition = exposition
        metrics.series_dropped += dropped
        if dropped and not self._warned_dropped:
            self._warned_dropped = True
            log.warning(
                "consumer lag: %d committed offsets left out of coordinator_consumer_group_lag,"
                " which reports at most --lag-max-series %d series (counted in "
                "coordinator_consumer_group_lag_series_dropped_total; said once)",
                dropped,
                self._max_series,
            )
        if ends.failure is not None:
            metrics.refresh_failures += 1
            if not self._failing:
                log.warning(
                    "consumer lag: end offsets not read from the Kafka cluster at %s (%s); "
                    "the partitions not read are left out until a refresh reads them",
                    self._bootstrap_servers,
                    ends.failure,
                )
            self._failing = True
        elif self._failing:
            self._failing = False
            log.info("consumer lag: end offsets read again from %s", self._bootstrap_servers)

    @staticmethod
    async def _render(lag: dict[tuple[str, str, int], int]) -> bytes:
        """The lag family's text, in slices with the event loop free between them."""
        parts = [LAG_HEADER]
        items = list(lag.items())
        for start in range(0, len(items), OFFSETS_PER_SLICE):
            parts.append(lag_samples(items[start : start + OFFSETS_PER_SLICE]))
            await asyncio.sleep(0)
        return "".join(parts).encode()

    async def _read_committed(self) -> tuple[list[CommittedOffset], int]:
        """Up to `max_series` committed offsets (negative ones are no position: skipped), in
        slices; and how many were left out."""
        kept: list[CommittedOffset] = []
        seen = 0
        source = self._committed()
        room = self._max_series
        while len(kept) < room:
            batch = list(islice(source, OFFSETS_PER_SLICE))
            if not batch:
                return kept, 0
            seen += len(batch)
            kept.extend(offset for offset in batch if offset[3] >= 0)
            await asyncio.sleep(0)
        seen -= len(kept) - room
        del kept[room:]
        # Whatever the rest of the iterator holds, without reading it.
        return kept, max(0, self._total_offsets() - seen)

    async def _connected(self, ends: _EndOffsets) -> AIOKafkaClient | None:
        if self._client is not None:
            return self._client
        client = forbid_auto_topic_creation(
            AIOKafkaClient(
                bootstrap_servers=self._bootstrap_servers,
                client_id=self._client_id,
                # Each request has a timeout of its own; aiokafka's, which closes the
                # connection, is only a backstop.
                request_timeout_ms=int(self._timeout_s * 2000),
                **self._security.aiokafka_options(),
            )
        )
        try:
            await asyncio.wait_for(client.bootstrap(), self._timeout_s)
        except (KafkaError, OSError, TimeoutError) as error:
            with contextlib.suppress(Exception):
                await client.close()
            ends.failed(f"no connection: {error!r}")
            return None
        self._client = client
        return client

    async def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    async def _read_end_offsets(
        self,
        client: AIOKafkaClient,
        topics: list[str],
        offsets: list[CommittedOffset],
        ends: _EndOffsets,
    ) -> None:
        leaders = await self._leaders(client, topics, ends)
        if leaders is None:
            return
        by_leader: dict[int, set[tuple[str, int]]] = {}
        for _, topic, partition, _ in offsets:
            leader = leaders.get((topic, partition))
            if leader is not None:
                by_leader.setdefault(leader, set()).add((topic, partition))
        await asyncio.gather(
            *(
                self._list_offsets(client, node, sorted(partitions), ends)
                for node, partitions in by_leader.items()
            )
        )

    async def _leaders(
        self, client: AIOKafkaClient, topics: list[str], ends: _EndOffsets
    ) -> dict[tuple[str, int], int] | None:
        """The leader of each partition of `topics` (those with one), from a metadata
        request that creates none of them; None when no broker answered."""
        node_id = client.get_random_node()
        if node_id is None:
            ends.failed("no broker is known")
            return None
        try:
            response = await asyncio.wait_for(
                client.send(node_id, MetadataRequestWithoutAutoCreation(topics)), self._timeout_s
            )
        except (KafkaError, OSError, TimeoutError, NotImplementedError) as error:
            ends.failed(f"no metadata from node {node_id}: {error!r}")
            return None
        known = {node.nodeId for node in client.cluster.brokers()}
        if not {int(broker[0]) for broker in response.brokers} <= known:
            # A broker the client has not met yet: its own metadata must name it first.
            client.force_metadata_update()
        leaders: dict[tuple[str, int], int] = {}
        for error_code, name, _internal, partitions in response.topics:
            if error_code == UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if error_code:
                ends.failed(f"topic {name}: error {error_code}")
                continue
            for partition in partitions:
                leader = int(partition[2])
                if leader < 0:
                    ends.failed(f"{name}-{partition[1]} has no leader")
                    continue
                leaders[(str(name), int(partition[1]))] = leader
        return leaders

    async def _list_offsets(
        self,
        client: AIOKafkaClient,
        node: int,
        partitions: list[tuple[str, int]],
        ends: _EndOffsets,
    ) -> None:
        """The end offsets of `partitions`, all led by `node`, in requests of at most
        `MAX_PARTITIONS_PER_REQUEST` partitions."""
        for start in range(0, len(partitions), MAX_PARTITIONS_PER_REQUEST):
            by_topic: dict[str, list[tuple[int, int]]] = {}
            for topic, partition in partitions[start : start + MAX_PARTITIONS_PER_REQUEST]:
                by_topic.setdefault(topic, []).append((partition, _LATEST))
            request = OffsetRequest(-1, _READ_UNCOMMITTED, list(by_topic.items()))
            try:
                response = await asyncio.wait_for(client.send(node, request), self._timeout_s)
            except (KafkaError, OSError, TimeoutError) as error:
                ends.failed(f"no ListOffsets answer from node {node}: {error!r}")
                return
            for topic, answered in response.topics:
                for partition, error_code, *info in answered:
                    if error_code:
                        ends.failed(f"{topic}-{partition}: ListOffsets error {error_code}")
                    elif response.API_VERSION == 0:
                        # v0 answers a list of offsets; later versions (timestamp, offset).
                        if info[0]:
                            ends.ends[(str(topic), int(partition))] = int(info[0][0])
                    else:
                        ends.ends[(str(topic), int(partition))] = int(info[1])
