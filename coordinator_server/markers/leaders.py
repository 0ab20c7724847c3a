"""Which broker leads each data partition a marker goes to: MetadataRequests that never
create a topic, and a bounded cache of their answers.

A marker for a topic the cluster does not know must not create it (a broker with
`auto.create.topics.enable` would, for any MetadataRequest that allows it): only versions 4
and later can say so, and every request here does (the log's own request for it,
`storage.kafka.metadata`). The cache keeps the leaders of up to `max_topics` topics for
`max_age_s`; an answer that a leader moved (or a lost connection) drops the topic's entry, so
the next attempt asks again (Kafka's coordinator reads its broker's metadata cache on every
attempt; we are not in a broker, so we ask one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError

from coordinator_client.kafka_metadata_request import MetadataRequestWithoutAutoCreation
from coordinator_protocol.errors import ErrorCode

__all__ = ["NO_LEADER", "LeaderCache", "LeaderLookupError", "TopicLeaders"]

NO_LEADER = -1
_UNKNOWN_TOPIC = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


class LeaderLookupError(Exception):
    """No metadata could be read now (no broker answered in time): try again later."""


@dataclass(frozen=True, slots=True)
class TopicLeaders:
    """What one MetadataResponse says of a topic."""

    error_code: int
    """0, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, or another (a topic
    being created, one not authorized...)."""
    leaders: dict[int, int]
    """Each partition's leader's node id (NO_LEADER while it has none)."""
    fetched_at: float

    @property
    def unknown(self) -> bool:
        return self.error_code == _UNKNOWN_TOPIC


class LeaderCache:
    """The leaders of recently used topics, asked for in one MetadataRequest per round."""

    def __init__(self, client: AIOKafkaClient, *, max_topics: int, max_age_s: float) -> None:
        if max_topics < 1:
            raise ValueError(f"max_topics must be at least 1, got {max_topics}")
        self._client = client
        self._max_topics = max_topics
        self._max_age_s = max_age_s
        # Insertion order is age order: the oldest entry is evicted first.
        self._topics: dict[str, TopicLeaders] = {}

    def get(self, topic: str) -> TopicLeaders | None:
        entry = self._topics.get(topic)
        if entry is None:
            return None
        if asyncio.get_running_loop().time() - entry.fetched_at > self._max_age_s:
            del self._topics[topic]
            return None
        return entry

    def forget(self, topic: str) -> None:
        self._topics.pop(topic, None)

    def __len__(self) -> int:
        return len(self._topics)

    async def refresh(self, topics: Iterable[str], timeout_s: float) -> dict[str, TopicLeaders]:
        """Fresh leaders of `topics` (one request), kept in the cache. Raises
        LeaderLookupError when no broker answers in `timeout_s`."""
        names = sorted(set(topics))
        client = self._client
        node_id = client.get_random_node()
        if node_id is None:
            raise LeaderLookupError("no broker is known")
        try:
            response = await asyncio.wait_for(
                client.send(node_id, MetadataRequestWithoutAutoCreation(names)), timeout_s
            )
        except NotImplementedError as error:
            raise LeaderLookupError(
                f"the broker cannot read metadata without creating topics: {error}"
            ) from error
        except (KafkaError, OSError, TimeoutError) as error:
            raise LeaderLookupError(f"no metadata from node {node_id}: {error!r}") from error
        now = asyncio.get_running_loop().time()
        known_nodes = {int(broker[0]) for broker in response.brokers}
        if not known_nodes.issubset(node.nodeId for node in client.cluster.brokers()):
            # A broker the client has not met yet: its own metadata must name it before
            # the client can connect to it.
            client.force_metadata_update()
        fresh: dict[str, TopicLeaders] = {}
        for error_code, name, _internal, partitions in response.topics:
            leaders = (
                {int(p[1]): int(p[2]) for p in partitions} if error_code == ErrorCode.NONE else {}
            )
            fresh[str(name)] = TopicLeaders(int(error_code), leaders, now)
        for name, entry in fresh.items():
            self._topics.pop(name, None)
            if entry.error_code == ErrorCode.NONE:
                # Only answers that name leaders are worth keeping; an unknown topic is
                # asked about again on its next attempt.
                self._topics[name] = entry
        while len(self._topics) > self._max_topics:
            del self._topics[next(iter(self._topics))]
        return fresh

    def unknown_partitions_now(
        self, topics: Sequence[tuple[str, Sequence[int]]]
    ) -> set[tuple[str, int]] | None:
        """Of `topics` (names and partition indexes), the partitions the cluster lacks, from
        the cache: an empty set when it has every one; None when a topic is not cached or a
        partition is past a cached topic's count (it may have grown since:
        `unknown_partitions` asks the cluster)."""
        for topic, partitions in topics:
            entry = self.get(topic)
            if entry is None:
                return None
            known = entry.leaders
            for partition in partitions:
                if partition not in known:
                    return None
        return set()

    async def unknown_partitions(
        self, topics: Sequence[tuple[str, Sequence[int]]], timeout_s: float
    ) -> set[tuple[str, int]]:
        """As `unknown_partitions_now`, asking the cluster (one MetadataRequest, which never
        creates a topic) about each topic the cache cannot vouch for. Raises
        LeaderLookupError when no broker answers in `timeout_s`."""
        missing = [
            topic
            for topic, partitions in topics
            if (entry := self.get(topic)) is None or any(p not in entry.leaders for p in partitions)
        ]
        fresh = await self.refresh(missing, timeout_s) if missing else {}
        unknown: set[tuple[str, int]] = set()
        for topic, partitions in topics:
            entry = fresh.get(topic) or self.get(topic)
            # A topic the answer does not name, or names with an error (unknown, being
            # created, not ours to describe), has none of its partitions.
            known = (
                entry.leaders if entry is not None and entry.error_code == ErrorCode.NONE else {}
            )
            unknown.update((topic, p) for p in partitions if p not in known)
        return unknown
