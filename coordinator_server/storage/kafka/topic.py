"""The log's topic: created compacted when it does not exist, and its real partition count
once every partition has a leader (Kafka's coordinator creates `__consumer_offsets` the same
way, with the configs of `GroupCoordinatorService.groupMetadataTopicConfigs`). A topic created
here is also waited on until every partition can be read: metadata names a partition's
leader a moment before that broker serves it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from coordinator_client.kafka_metadata_request import forbid_auto_topic_creation
from coordinator_protocol.errors import ErrorCode
from coordinator_server.storage.error_codes import TOPIC_ALREADY_EXISTS
from coordinator_server.storage.kafka.metadata import TopicMetadata, TopicMetadataError

log = logging.getLogger("coordinator_server.storage.kafka.log")

# As Kafka configures __consumer_offsets (GroupCoordinatorService.groupMetadataTopicConfigs).
OFFSETS_TOPIC_SEGMENT_BYTES = 104_857_600


class KafkaLogError(Exception):
    """The topic cannot be created or described."""


def offsets_topic_configs() -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "compression.type": "producer",
        "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES),
    }


@dataclass(frozen=True, slots=True)
class OffsetsTopic:
    """The topic the log wants, and how to reach the cluster that holds it."""

    name: str
    partitions: int
    replication_factor: int
    bootstrap_servers: str
    client_id: str
    request_timeout_ms: int
    client_options: Mapping[str, Any] = field(default_factory=dict)
    # How long a topic just created may take to show a leader for every partition.
    ready_timeout_s: float = 30.0


# How often a topic not ready yet is asked again.
READY_POLL_S = 0.02

# The partitions, of those `leaders` (partition to node id) names, that their leader cannot
# serve a read of yet.
UnreadableProbe = Callable[[dict[int, int]], Awaitable[set[int]]]


async def ensure_topic(
    topic: OffsetsTopic,
    fetch_metadata: Callable[[], Awaitable[TopicMetadata]],
    unreadable: UnreadableProbe | None = None,
) -> int:
    """Create the topic when it does not exist; return its real partition count (the count
    decides where groups live, whatever was configured). When it was created here and
    `unreadable` is given (the partitions that cannot be read yet), wait until none is."""
    metadata = await fetch_metadata()
    if metadata.exists:
        # A topic that was there has been served: its loads read it at once.
        unreadable = None
    else:
        await create_topic(topic)
    partitions = await _await_partition_count(topic, fetch_metadata, unreadable)
    if partitions != topic.partitions:
        log.warning(
            "topic %s has %d partitions, not the %d configured; the real count decides "
            "group placement",
            topic.name,
            partitions,
            topic.partitions,
        )
    return partitions


async def create_topic(topic: OffsetsTopic) -> None:
    """Create the log's topic with the log's settings (compacted, its partitions and
    replicas); a topic that exists already is no error."""
    new_topic = NewTopic(
        topic.name,
        topic.partitions,
        topic.replication_factor,
        topic_configs=offsets_topic_configs(),
    )
    admin = AIOKafkaAdminClient(
        bootstrap_servers=topic.bootstrap_servers,
        client_id=topic.client_id,
        request_timeout_ms=topic.request_timeout_ms,
        **topic.client_options,
    )
    forbid_auto_topic_creation(admin._client)
    try:
        await admin.start()
        response = await admin.create_topics([new_topic])
    finally:
        await admin.close()
    for topic_error in response.topic_errors:
        error_code = topic_error[1]
        if error_code == ErrorCode.NONE:
            log.info("created topic %s with %d partitions", topic.name, topic.partitions)
        elif error_code == TOPIC_ALREADY_EXISTS:
            # Another server created it between our look and our request.
            log.info("topic %s was created concurrently", topic.name)
        else:
            message = topic_error[2] if len(topic_error) > 2 else ""
            raise KafkaLogError(f"cannot create topic {topic.name}: error {error_code} {message}")


async def _await_partition_count(
    topic: OffsetsTopic,
    fetch_metadata: Callable[[], Awaitable[TopicMetadata]],
    unreadable: UnreadableProbe | None,
) -> int:
    """The topic's partition count, once every partition has a leader (a topic just created
    may take a moment to show them) and, with `unreadable`, once every leader serves its
    partitions: metadata names a new partition's leader a moment before that broker serves
    it, and each load meeting NOT_LEADER backed off with a warning. Leaders that do not serve
    by the deadline are left to the loads, which wait for them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + topic.ready_timeout_s
    while True:
        try:
            metadata: TopicMetadata | None = await fetch_metadata()
        except TopicMetadataError as error:
            metadata = None
            problem = str(error)
            unanswered: TopicMetadataError | None = error
        else:
            unanswered = None
        if metadata is not None:
            leaders = metadata.leaders
            if metadata.error_code == ErrorCode.NONE and leaders and min(leaders.values()) >= 0:
                problem = await _unreadable_now(unreadable, leaders)
                if not problem:
                    return len(leaders)
                if loop.time() > deadline:
                    log.info(
                        "topic %s: not every partition could be read within %.0f s (%s); "
                        "the loads wait for them",
                        topic.name,
                        topic.ready_timeout_s,
                        problem,
                    )
                    return len(leaders)
            else:
                problem = f"error {metadata.error_code}, {len(leaders)} partitions"
        if loop.time() > deadline:
            if unanswered is not None:
                # A broker that does not answer: the caller may wait for it longer.
                raise TopicMetadataError(f"topic {topic.name} is not ready: {problem}")
            raise KafkaLogError(f"topic {topic.name} is not ready: {problem}")
        await asyncio.sleep(READY_POLL_S)


async def _unreadable_now(unreadable: UnreadableProbe | None, leaders: dict[int, int]) -> str:
    """What keeps the partitions from being read now ("" when nothing does)."""
    if unreadable is None:
        return ""
    try:
        waiting = await unreadable(leaders)
    except (KafkaError, OSError, TimeoutError) as error:
        return repr(error)
    return f"partitions {sorted(waiting)}" if waiting else ""


__all__ = [
    "OFFSETS_TOPIC_SEGMENT_BYTES",
    "KafkaLogError",
    "OffsetsTopic",
    "ensure_topic",
    "offsets_topic_configs",
]
