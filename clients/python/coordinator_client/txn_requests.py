"""The transactional producer's requests to coordinator-server, in the wire contract's
messages, and the per-partition errors of their answers: kept apart from the sender so
that its steps read as Kafka's client's and the contract's shapes live in one place."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator, Mapping

from aiokafka.structs import OffsetAndMetadata, TopicPartition

from coordinator_protocol.transactions import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnRequestTopic,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    InitProducerIdRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)

__all__ = [
    "add_offsets_to_txn",
    "add_partitions_errors",
    "add_partitions_to_txn",
    "end_txn",
    "init_producer_id",
    "txn_offset_commit",
    "txn_offset_commit_errors",
]


def init_producer_id(transactional_id: str, transaction_timeout_ms: int) -> InitProducerIdRequest:
    return InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms
    )


def add_partitions_to_txn(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
) -> AddPartitionsToTxnRequest:
    return AddPartitionsToTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        topics=[
            AddPartitionsToTxnRequestTopic(name=topic, partitions=indexes)
            for topic, indexes in _by_topic(partitions).items()
        ],
    )


def add_partitions_errors(
    response: AddPartitionsToTxnResponse, partitions: Iterable[TopicPartition]
) -> Iterator[tuple[TopicPartition, int]]:
    """(partition, error code) for each partition of the request: a top-level error (a
    request refused as a whole) applies to every one."""
    if response.error_code:
        for tp in partitions:
            yield tp, response.error_code
        return
    for topic in response.results_by_topic:
        for partition in topic.results_by_partition:
            yield (
                TopicPartition(topic.name, partition.partition_index),
                partition.partition_error_code,
            )


def add_offsets_to_txn(
    transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
) -> AddOffsetsToTxnRequest:
    return AddOffsetsToTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        group_id=group_id,
    )


def txn_offset_commit(
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    generation_id: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
) -> TxnOffsetCommitRequest:
    by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = collections.defaultdict(list)
    for tp, value in sorted(offsets.items()):
        by_topic[tp.topic].append(
            TxnOffsetCommitRequestPartition(
                partition_index=tp.partition,
                committed_offset=value.offset,
                committed_metadata=value.metadata,
            )
        )
    return TxnOffsetCommitRequest(
        transactional_id=transactional_id,
        group_id=group_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        generation_id_or_member_epoch=generation_id,
        member_id=member_id,
        group_instance_id=group_instance_id,
        topics=[
            TxnOffsetCommitRequestTopic(name=topic, partitions=partitions)
            for topic, partitions in by_topic.items()
        ],
    )


def txn_offset_commit_errors(
    response: TxnOffsetCommitResponse,
) -> Iterator[tuple[TopicPartition, int]]:
    for topic in response.topics:
        for partition in topic.partitions:
            yield TopicPartition(topic.name, partition.partition_index), partition.error_code


def end_txn(
    transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
) -> EndTxnRequest:
    return EndTxnRequest(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        committed=committed,
    )


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = collections.defaultdict(list)
    for tp in sorted(partitions):
        by_topic[tp.topic].append(tp.partition)
    return dict(by_topic)
