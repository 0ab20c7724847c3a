"""DescribeProducers (api key 61) as aiokafka structs, so that aiokafka's client negotiates,
frames and answers it like its own requests (aiokafka has none for it).

Kafka serves version 0 only, flexible (compact strings and arrays, tagged fields). A
partition's leader answers with the producers its log keeps state for: each one's epoch,
last sequence and timestamp, the epoch of the coordinator that last wrote it a marker, and
where its open transaction starts (-1: none open).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)
from aiokafka.structs import TopicPartition

__all__ = [
    "DESCRIBE_PRODUCERS_API_KEY",
    "ActiveProducer",
    "KafkaDescribeProducersRequest",
    "PartitionProducerStates",
    "read_producer_states",
]

DESCRIBE_PRODUCERS_API_KEY = 61


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer a partition's log keeps state for (Kafka's admin `ProducerState`)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    """-1 while no coordinator has written this producer a marker on the partition."""
    current_txn_start_offset: int
    """The offset of its open transaction's first batch; -1 when none is open."""

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_start_offset >= 0


@dataclass(frozen=True, slots=True)
class PartitionProducerStates:
    """A partition's answer: an error, or its active producers."""

    error_code: int
    error_message: str | None
    producers: tuple[ActiveProducer, ...]


class DescribeProducersResponse_v0(Response):  # type: ignore[misc]
    API_KEY = DESCRIBE_PRODUCERS_API_KEY
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                (
                    "partitions",
                    CompactArray(
                        ("partition_index", Int32),
                        ("error_code", Int16),
                        ("error_message", CompactString("utf-8")),
                        (
                            "active_producers",
                            CompactArray(
                                ("producer_id", Int64),
                                ("producer_epoch", Int32),
                                ("last_sequence", Int32),
                                ("last_timestamp", Int64),
                                ("coordinator_epoch", Int32),
                                ("current_txn_start_offset", Int64),
                                ("tags", TaggedFields),
                            ),
                        ),
                        ("tags", TaggedFields),
                    ),
                ),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


class DescribeProducersRequest_v0(RequestStruct):  # type: ignore[misc]
    FLEXIBLE_VERSION = True
    API_KEY = DESCRIBE_PRODUCERS_API_KEY
    API_VERSION = 0
    RESPONSE_TYPE = DescribeProducersResponse_v0
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("name", CompactString("utf-8")),
                ("partition_indexes", CompactArray(Int32)),
                ("tags", TaggedFields),
            ),
        ),
        ("tags", TaggedFields),
    )


DescribeProducersRequestStruct: TypeAlias = DescribeProducersRequest_v0


class KafkaDescribeProducersRequest(Request[DescribeProducersRequestStruct]):  # type: ignore[misc]
    """The producers of some partitions, asked of one broker (their leader, or a replica)."""

    API_KEY = DESCRIBE_PRODUCERS_API_KEY

    def __init__(self, partitions: list[TopicPartition]) -> None:
        self.partitions = partitions

    def build(
        self, request_struct_class: type[DescribeProducersRequestStruct]
    ) -> DescribeProducersRequestStruct:
        by_topic: dict[str, list[int]] = {}
        for tp in self.partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return request_struct_class(
            [(topic, sorted(indexes), {}) for topic, indexes in sorted(by_topic.items())], {}
        )


def read_producer_states(response: Any) -> dict[TopicPartition, PartitionProducerStates]:
    """Every partition a DescribeProducersResponse answers.

    Raises ValueError on an answer that is not one."""
    answered: dict[TopicPartition, PartitionProducerStates] = {}
    try:
        for name, partitions, _topic_tags in response.topics:
            for index, error_code, error_message, producers, _tags in partitions:
                answered[TopicPartition(str(name), int(index))] = PartitionProducerStates(
                    int(error_code),
                    None if error_message is None else str(error_message),
                    tuple(
                        ActiveProducer(
                            int(producer_id),
                            int(epoch),
                            int(last_sequence),
                            int(last_timestamp),
                            int(coordinator_epoch),
                            int(txn_start_offset),
                        )
                        for (
                            producer_id,
                            epoch,
                            last_sequence,
                            last_timestamp,
                            coordinator_epoch,
                            txn_start_offset,
                            _producer_tags,
                        ) in producers
                    ),
                )
    except (AttributeError, TypeError, ValueError) as error:
        raise ValueError(f"not a DescribeProducersResponse: {error!r}") from error
    return answered
