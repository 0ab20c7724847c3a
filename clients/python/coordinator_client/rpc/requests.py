"""Requests and answers of the RPC client's helpers in Kafka's terms, to and from Kafka's own
structures (`TopicPartition`, `OffsetAndMetadata`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from aiokafka.structs import OffsetAndMetadata, TopicPartition

from coordinator_protocol.errors import ApiError, ErrorCode, error_for_code
from coordinator_protocol.messages import (
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponseTopic,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponseTopic,
    OffsetFetchRequestTopic,
)

__all__ = ["commit_topics", "delete_topics", "fetch_topics", "partition_errors", "raise_for_code"]


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return by_topic


def commit_topics(
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
) -> list[OffsetCommitRequestTopic]:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for tp, value in sorted(offsets.items()):
        if isinstance(value, OffsetAndMetadata):
            offset, metadata = value.offset, value.metadata
        else:
            offset, metadata = value, ""
        if offset < 0:
            raise ValueError(f"offset for {tp.topic}-{tp.partition} must be >= 0, not {offset}")
        by_topic.setdefault(tp.topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=offset,
                committed_metadata=metadata,
            )
        )
    return [
        OffsetCommitRequestTopic(name=name, partitions=partitions)
        for name, partitions in by_topic.items()
    ]


def fetch_topics(partitions: Iterable[TopicPartition]) -> list[OffsetFetchRequestTopic]:
    return [
        OffsetFetchRequestTopic(name=name, partition_indexes=sorted(indexes))
        for name, indexes in _by_topic(partitions).items()
    ]


def delete_topics(partitions: Iterable[TopicPartition]) -> list[OffsetDeleteRequestTopic]:
    return [
        OffsetDeleteRequestTopic(
            name=name,
            partitions=[
                OffsetDeleteRequestPartition(partition_index=index) for index in sorted(indexes)
            ],
        )
        for name, indexes in _by_topic(partitions).items()
    ]


def partition_errors(
    topics: Sequence[OffsetCommitResponseTopic] | Sequence[OffsetDeleteResponseTopic],
) -> dict[TopicPartition, ApiError]:
    """The partitions an answer refused, each with its error."""
    return {
        TopicPartition(topic.name, partition.partition_index): error_for_code(partition.error_code)
        for topic in topics
        for partition in topic.partitions
        if partition.error_code != ErrorCode.NONE
    }


def raise_for_code(code: int, message: str | None = None) -> None:
    """Raise the error an answer carries, if any."""
    if code != ErrorCode.NONE:
        raise error_for_code(code, message)
