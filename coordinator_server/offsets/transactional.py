"""Transactional offsets: what a TxnOffsetCommit stores, pending until its transaction ends.

Kafka's OffsetMetadataManager keeps them in `pendingTransactionalOffsets` (by producer id)
and `openTransactionsByGroup`, and the end of a transaction is a marker in its log. Here the
log is our own and has no markers: a TxnOffsetCommit writes transactional offset records
(type 6, one key per group, partition and producer), and the end of a transaction on a log
partition is one atomic write of their tombstones and, when it commits, plain offset commit
records with their values (`TransactionalOffsetManager.complete_transaction`). Replaying
those records is the whole effect, so a load after compaction gets the same state and a
repeated end is a no-op.

Kafka's rule of a transactional offset against a plain one (C11): at the commit, a pending
offset replaces the committed one only if its record is later than the committed one's.
Here a plain commit replayed after a pending offset of the same partition marks it
*superseded*; no record offsets are stored for plain commits. When the end of a transaction
commits an offset, the plain commit it writes is later than every other producer's pending
offset of the partition, but in Kafka it counts as the earlier record it came from: the
other producers' pending offsets that came after it are written again, after it, so that
they still win (and the log's order, which compaction keeps, still says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator_protocol.errors import ErrorCode
from coordinator_server.consumer_groups import offsets as consumer_group_offsets
from coordinator_server.groups.answer_sizes import str_bytes
from coordinator_server.groups.manager import GroupMetadataManager
from coordinator_server.offsets.manager import OffsetMetadataManager, OffsetsConfig
from coordinator_server.offsets.pending import (
    GroupPartition,
    PendingOffset,
    PendingTransactionalOffsets,
    TopicPartition,
)
from coordinator_server.records import (
    CoordinatorRecord,
    TransactionalOffsetValue,
    encode_record,
    new_offset_commit_record,
    new_transactional_offset_record,
    new_transactional_offset_tombstone_record,
)
from coordinator_server.runtime.api import Clock, CoordinatorResult

# The request and answer of TxnOffsetCommit, with the fields of Kafka's schema
# (TransactionalCommit/Response.json) in snake_case: what the service maps the wire
# messages to and from.


@dataclass(frozen=True, slots=True)
class TransactionalCommitPartition:
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int = -1
    committed_metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class TransactionalCommitTopic:
    name: str
    partitions: Sequence[TransactionalCommitPartition] = ()


@dataclass(frozen=True, slots=True)
class TransactionalCommit:
    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: Sequence[TransactionalCommitTopic] = ()


@dataclass(frozen=True, slots=True)
class TransactionalCommitPartitionAnswer:
    partition_index: int
    error_code: ErrorCode


@dataclass(frozen=True, slots=True)
class TransactionalCommitTopicAnswer:
    name: str
    partitions: list[TransactionalCommitPartitionAnswer] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TransactionalCommitAnswer:
    topics: list[TransactionalCommitTopicAnswer] = field(default_factory=list)


def txn_offset_commit_error_response(
    request: TransactionalCommit, code: ErrorCode
) -> TransactionalCommitAnswer:
    """Every partition of the request answered with `code`."""
    return TransactionalCommitAnswer(
        topics=[
            TransactionalCommitTopicAnswer(
                name=topic.name,
                partitions=[
                    TransactionalCommitPartitionAnswer(p.partition_index, code)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


# What the end of a transaction writes for one pending offset, at most, besides the group
# id, topic name (each twice) and metadata: the tombstone's key and the offset commit
# record's key and value (array headers, type, versions, integers at their widest, the nil
# expire timestamp).
_COMPLETION_RECORD_BYTES = 80


class TransactionalOffsetManager:
    """TxnOffsetCommit and the end of a transaction, over the pending store and the
    committed offsets (Kafka's OffsetMetadataManager's commitTransactionalOffset and
    replayEndTransactionMarker). Pure: handlers return records and a response."""

    def __init__(
        self,
        store: PendingTransactionalOffsets,
        clock: Clock,
        groups: GroupMetadataManager,
        committed: OffsetMetadataManager,
        config: OffsetsConfig,
    ) -> None:
        self._store = store
        self._clock = clock
        self._groups = groups
        self._committed = committed
        self._config = config

    def commit_transactional_offset(
        self, request: TransactionalCommit
    ) -> CoordinatorResult[TransactionalCommitAnswer]:
        """Kafka's TxnOffsetCommit (validateTransactionalOffsetCommit, then
        commitTransactionalOffset): the offsets become the producer's pending ones. That the
        producer's transaction is ongoing is the caller's to check. A consumer group checks
        the member as Kafka's `ConsumerGroup.validateOffsetCommit` does for a transactional
        commit; a classic group, or no group, as before.

        The limits, as OffsetCommit's: a topic name longer than `max_id_length` is
        INVALID_REQUEST and metadata over `offset_metadata_max_bytes`
        OFFSET_METADATA_TOO_LARGE for their partitions; a partition that would take the
        group's partitions (committed or pending) past `max_committed_offsets_per_group`,
        the partition's pending offsets past `max_pending_transactional_offsets`, or what
        the end of the producer's transaction writes past half a batch, is
        INVALID_COMMIT_OFFSET_SIZE (the others are stored); records that cannot fit one
        batch are INVALID_COMMIT_OFFSET_SIZE for every partition.
        """
        group_id = request.group_id
        if not group_id:
            return _error(request, ErrorCode.INVALID_GROUP_ID)
        consumer_group = self._committed.consumer_group(group_id)
        if consumer_group is not None:
            error = consumer_group_offsets.validate_transactional_offset_commit(
                consumer_group, request.member_id, request.group_instance_id, request.generation_id
            )
        else:
            error = self._groups.validate_transactional_offset_commit(
                group_id, request.member_id, request.group_instance_id, request.generation_id
            )
        if error is not None:
            return _error(request, error.code)
        store = self._store
        producer_id = request.producer_id
        held = store.of_producer(producer_id)
        if any(entry.producer_epoch > request.producer_epoch for _, entry in held):
            # A later transaction of the producer stored these: this one is fenced.
            return _error(request, ErrorCode.INVALID_PRODUCER_EPOCH)

        config = self._config
        committed = self._committed.group_offsets(group_id)
        pending = store.of_group(group_id)
        group_partitions = (0 if committed is None else len(committed)) + (
            0
            if pending is None
            else sum(1 for key in pending if committed is None or key not in committed)
        )
        pending_count = store.count()
        completion_bytes = sum(
            _completion_bytes(group, topic, entry.value.metadata)
            for (group, topic, _), entry in held
        )
        completion_limit = config.max_records_bytes // 2
        now_ms = self._clock.now_ms()
        records: list[CoordinatorRecord] = []
        admitted: dict[TopicPartition, int] = {}
        topics: list[TransactionalCommitTopicAnswer] = []
        for topic in request.topics:
            name = topic.name
            answers: list[TransactionalCommitPartitionAnswer] = []
            for partition in topic.partitions:
                index = partition.partition_index
                key = (name, index)
                metadata = partition.committed_metadata or ""
                if len(name) > config.max_id_length:
                    code = ErrorCode.INVALID_REQUEST
                elif _metadata_length(metadata) > config.offset_metadata_max_bytes:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    new_to_group = (
                        (committed is None or key not in committed)
                        and (pending is None or key not in pending)
                        and key not in admitted
                    )
                    previous = admitted.get(key)
                    if previous is None:
                        entry = store.get(producer_id, group_id, name, index)
                        previous = (
                            0
                            if entry is None
                            else _completion_bytes(group_id, name, entry.value.metadata)
                        )
                    size = _completion_bytes(group_id, name, metadata)
                    new_to_store = previous == 0
                    if (
                        (
                            new_to_group
                            and group_partitions >= config.max_committed_offsets_per_group
                        )
                        or (
                            new_to_store
                            and pending_count >= config.max_pending_transactional_offsets
                        )
                        or completion_bytes - previous + size > completion_limit
                    ):
                        code = ErrorCode.INVALID_COMMIT_OFFSET_SIZE
                    else:
                        code = ErrorCode.NONE
                        group_partitions += new_to_group
                        pending_count += new_to_store
                        completion_bytes += size - previous
                        admitted[key] = size
                        records.append(
                            new_transactional_offset_record(
                                group_id,
                                name,
                                index,
                                producer_id,
                                TransactionalOffsetValue(
                                    request.producer_epoch,
                                    partition.committed_offset,
                                    partition.committed_leader_epoch,
                                    metadata,
                                    now_ms,
                                ),
                            )
                        )
                answers.append(TransactionalCommitPartitionAnswer(index, code))
            topics.append(TransactionalCommitTopicAnswer(name=name, partitions=answers))
        if records and self._records_bytes(records) > config.max_records_bytes:
            return _error(request, ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
        self._groups.metrics.offset_commits += len(records)
        # Kafka appends them as one transactional batch.
        return CoordinatorResult(records, TransactionalCommitAnswer(topics=topics), atomic=True)

    def _records_bytes(self, records: list[CoordinatorRecord]) -> int:
        overhead = self._config.record_overhead_bytes
        size = 0
        for record in records:
            key, value = encode_record(record)
            size += overhead + len(key) + (0 if value is None else len(value))
        return size

    def complete_transaction(
        self, producer_id: int, producer_epoch: int, committed: bool
    ) -> CoordinatorResult[ErrorCode]:
        """The end of the producer's transaction on this log partition (our WriteTxnMarkers
        for our own log), as one atomic write: the tombstone of every pending offset of the
        producer here (all groups) and, when it commits, an offset commit record for each
        that no later plain commit superseded, followed by the other producers' pending
        offsets that must still win over those (see the module's docstring).

        NONE, writing nothing, when the producer has no pending offsets here (a repeated
        end); INVALID_PRODUCER_EPOCH, writing nothing, when a later epoch of the producer
        stored some (Kafka's log refuses a marker of an older epoch).
        """
        store = self._store
        held = store.of_producer(producer_id)
        if not held:
            return CoordinatorResult(response=ErrorCode.NONE)
        if any(entry.producer_epoch > producer_epoch for _, entry in held):
            return CoordinatorResult(response=ErrorCode.INVALID_PRODUCER_EPOCH)
        records = [
            new_transactional_offset_tombstone_record(group, topic, partition, producer_id)
            for (group, topic, partition), _ in held
        ]
        if committed:
            again: list[tuple[GroupPartition, PendingOffset]] = []
            for (group, topic, partition), entry in held:
                if entry.superseded:
                    continue
                value = entry.value
                records.append(
                    new_offset_commit_record(
                        group,
                        topic,
                        partition,
                        value.offset,
                        value.leader_epoch,
                        value.metadata,
                        value.commit_timestamp_ms,
                    )
                )
                again.extend(
                    ((group, topic, partition), other)
                    for other in store.of_partition(group, topic, partition)
                    if other.producer_id != producer_id
                    and not other.superseded
                    and other.order > entry.order
                )
            again.sort(key=lambda item: item[1].order)
            for (group, topic, partition), other in again:
                value = other.value
                records.append(
                    new_transactional_offset_record(
                        group,
                        topic,
                        partition,
                        other.producer_id,
                        TransactionalOffsetValue(
                            other.producer_epoch,
                            value.offset,
                            value.leader_epoch,
                            value.metadata,
                            value.commit_timestamp_ms,
                        ),
                    )
                )
        return CoordinatorResult(records, ErrorCode.NONE, atomic=True)


def _completion_bytes(group: str, topic: str, metadata: str) -> int:
    return (
        _COMPLETION_RECORD_BYTES + 2 * (str_bytes(group) + str_bytes(topic)) + str_bytes(metadata)
    )


def _metadata_length(metadata: str) -> int:
    # Java's String.length(), as Kafka counts offset.metadata.max.bytes: UTF-16 code units.
    if metadata.isascii():
        return len(metadata)
    return len(metadata.encode("utf-16-le")) // 2


def _error(
    request: TransactionalCommit, code: ErrorCode
) -> CoordinatorResult[TransactionalCommitAnswer]:
    return CoordinatorResult(response=txn_offset_commit_error_response(request, code))
