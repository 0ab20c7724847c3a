"""OffsetMetadataManager: committed offsets of the groups of one partition.

Pure, like Kafka's class of the same name: request handlers read the state and return
records plus a response; `replay` is the only method that changes the state. Offsets live in
timeline collections, so reads can be answered as of the committed offset and a failed
append is undone by the runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_server.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    new_offset_commit_record,
)
from coordinator_server.runtime.api import Clock, CoordinatorResult
from coordinator_server.timeline import SnapshotRegistry, TimelineDict
from protocol.errors import ApiError, ErrorCode, GroupIdNotFoundError, UnknownMemberIdError
from protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequestGroup,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetsConfig:
    offset_metadata_max_bytes: int = 4096


def _metadata_length(metadata: str) -> int:
    # Kafka compares offset.metadata.max.bytes with Java's String.length(), which counts
    # UTF-16 code units; count the same way so a limit means what it means in Kafka.
    if metadata.isascii():
        return len(metadata)
    return len(metadata.encode("utf-16-le")) // 2


class OffsetMetadataManager:
    def __init__(self, registry: SnapshotRegistry, clock: Clock, config: OffsetsConfig) -> None:
        self._registry = registry
        self._clock = clock
        self._config = config
        # group -> (topic, partition) -> committed offset. The inner dicts are timeline
        # collections; the outer dict only indexes them and is pruned lazily.
        self._offsets: dict[str, TimelineDict[TopicPartition, OffsetCommitValue]] = {}
        self._maybe_empty: set[str] = set()

    # Request handlers (read state, emit records).

    def commit_offset(
        self, request: OffsetCommitRequest
    ) -> CoordinatorResult[OffsetCommitResponse]:
        group_id = request.group_id
        assert group_id is not None, "the service answers a missing group id"
        error = self._validate_simple_commit(group_id, request)
        if error is not None:
            return CoordinatorResult(response=commit_error_response(request, error.code))

        now_ms = self._clock.now_ms()
        max_bytes = self._config.offset_metadata_max_bytes
        records: list[CoordinatorRecord] = []
        topics: list[OffsetCommitResponseTopic] = []
        for topic in request.topics:
            partitions: list[OffsetCommitResponsePartition] = []
            for partition in topic.partitions:
                metadata = partition.committed_metadata or ""
                if _metadata_length(metadata) > max_bytes:
                    code = ErrorCode.OFFSET_METADATA_TOO_LARGE
                else:
                    code = ErrorCode.NONE
                    records.append(
                        new_offset_commit_record(
                            group_id,
                            topic.name,
                            partition.partition_index,
                            partition.committed_offset,
                            partition.committed_leader_epoch,
                            metadata,
                            now_ms,
                        )
                    )
                partitions.append(
                    OffsetCommitResponsePartition(
                        partition_index=partition.partition_index, error_code=code
                    )
                )
            topics.append(OffsetCommitResponseTopic(name=topic.name, partitions=partitions))
        return CoordinatorResult(records, OffsetCommitResponse(topics=topics))

    def _validate_simple_commit(
        self, group_id: str, request: OffsetCommitRequest
    ) -> ApiError | None:
        """Kafka's checks for a commit to a group that has no members.

        Group membership is the group manager's (a later piece of work); until then every
        group is memberless. A generation below zero is a simple commit (an admin client or
        a consumer that assigns partitions itself) and creates the group if needed. A
        generation of zero or more claims membership: of an unknown group that is
        GROUP_ID_NOT_FOUND (OffsetCommit v9+ semantics), of a known memberless group
        UNKNOWN_MEMBER_ID.
        """
        if request.generation_id_or_member_epoch < 0:
            return None
        if not self.group_exists(group_id):
            return GroupIdNotFoundError(f"group {group_id!r} does not exist")
        return UnknownMemberIdError(f"member {request.member_id!r} is not in group {group_id!r}")

    def fetch_offsets(
        self, request: OffsetFetchRequestGroup, committed_offset: int | None
    ) -> OffsetFetchResponseGroup:
        """Offsets as of `committed_offset` (None: the latest state, for require_stable)."""
        group_id = request.group_id
        assert group_id is not None, "the service answers a missing group id"
        offsets = self._offsets.get(group_id)

        def lookup(key: TopicPartition) -> OffsetCommitValue | None:
            if offsets is None:
                return None
            if committed_offset is None:
                return offsets.get(key)
            return offsets.get_at(key, committed_offset)

        topics: list[OffsetFetchResponseTopic] = []
        if request.topics is None:
            by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
            if offsets is not None:
                items = (
                    offsets.items()
                    if committed_offset is None
                    else offsets.items_at(committed_offset)
                )
                for (topic, partition), value in sorted(items):
                    by_topic.setdefault(topic, []).append(_fetched(partition, value))
            topics = [
                OffsetFetchResponseTopic(name=name, partitions=parts)
                for name, parts in by_topic.items()
            ]
        else:
            for requested in request.topics:
                topics.append(
                    OffsetFetchResponseTopic(
                        name=requested.name,
                        partitions=[
                            _fetched(index, lookup((requested.name, index)))
                            for index in requested.partition_indexes
                        ],
                    )
                )
        return OffsetFetchResponseGroup(group_id=group_id, topics=topics)

    # Replay (the only place state changes).

    def replay(self, key: OffsetCommitKey, value: OffsetCommitValue | None) -> None:
        if self._maybe_empty:
            self._prune()
        offsets = self._offsets.get(key.group)
        if value is None:
            if offsets is not None:
                offsets.pop((key.topic, key.partition))
                self._maybe_empty.add(key.group)
            return
        if offsets is None:
            offsets = self._offsets[key.group] = TimelineDict(self._registry)
        offsets[(key.topic, key.partition)] = value

    def _prune(self) -> None:
        for group in list(self._maybe_empty):
            offsets = self._offsets.get(group)
            if offsets is None or offsets.is_empty_everywhere():
                self._offsets.pop(group, None)
                self._maybe_empty.discard(group)
            elif len(offsets):
                self._maybe_empty.discard(group)

    # Views for other parts of the shard and for tests.

    def committed_offset(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        offsets = self._offsets.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def group_exists(self, group: str) -> bool:
        offsets = self._offsets.get(group)
        return offsets is not None and len(offsets) > 0

    def groups(self) -> list[str]:
        return [group for group, offsets in self._offsets.items() if len(offsets)]

    def num_offsets(self) -> int:
        return sum(len(offsets) for offsets in self._offsets.values())


def _fetched(partition: int, value: OffsetCommitValue | None) -> OffsetFetchResponsePartition:
    if value is None:
        return OffsetFetchResponsePartition(
            partition_index=partition, committed_offset=-1, committed_leader_epoch=-1, metadata=""
        )
    return OffsetFetchResponsePartition(
        partition_index=partition,
        committed_offset=value.offset,
        committed_leader_epoch=value.leader_epoch,
        metadata=value.metadata,
    )


def commit_error_response(request: OffsetCommitRequest, code: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )
