"""OffsetMetadataManager: committed offsets of the groups of one partition.

Pure, like Kafka's class of the same name: request handlers read the state and return
records plus a response; `replay` is the only method that changes the state. Offsets live in
timeline collections, so reads can be answered as of the committed offset and a failed
append is undone by the runtime. Group membership is the groups': a group id names either a
consumer group (KIP-848, the ConsumerGroupManager's, asked first) or a classic one (the
GroupMetadataManager's); the group validates commits and fetches of its members and says
which topics it subscribes to.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.messages import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    OffsetFetchRequestGroup,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from coordinator_server import defaults
from coordinator_server.consumer_groups import offsets as consumer_group_offsets
from coordinator_server.consumer_groups.group import ConsumerGroup
from coordinator_server.consumer_groups.manager import ConsumerGroupManager
from coordinator_server.groups.answer_sizes import (
    FETCHED_PARTITION_BYTES,
    fetched_partition_bytes,
    fetched_topic_bytes,
    str_bytes,
)
from coordinator_server.groups.classic import ClassicGroupState
from coordinator_server.groups.manager import GroupMetadataManager
from coordinator_server.offsets.commit_answers import all_committed_answer, answer_per_partition
from coordinator_server.offsets.pending import PendingTransactionalOffsets
from coordinator_server.records import (
    CoordinatorRecord,
    OffsetCommitValue,
    TransactionalOffsetValue,
    encode_offset_commits,
    new_offset_commit_tombstone_record,
    new_transactional_offset_tombstone_record,
)
from coordinator_server.runtime.api import (
    Clock,
    CoordinatorResult,
    EncodedRecord,
    RecordRun,
    RequestContext,
)
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class OffsetsConfig:
    """The offsets' settings, with the server's defaults (`defaults.py`); the record sizes
    come from the log the server is given."""

    offset_metadata_max_bytes: int = defaults.OFFSET_METADATA_MAX_BYTES
    max_committed_offsets_per_group: int = defaults.MAX_COMMITTED_OFFSETS_PER_GROUP
    max_pending_transactional_offsets: int = defaults.MAX_PENDING_TRANSACTIONAL_OFFSETS
    # Longest topic name, in characters.
    max_id_length: int = defaults.MAX_ID_LENGTH
    # The bytes of records one write may append (the largest batch less its header), and
    # what each record adds to its key and value there: a commit must fit.
    max_records_bytes: int = 2147483647
    record_overhead_bytes: int = 0


class OffsetCommitRun(RecordRun):
    """Offset commit records of one group at consecutive offsets, each a ((topic, partition),
    value) pair: what one OffsetCommit writes, and what a load reads back as one run of
    them. The shard replays it with one `replay_commits`, which changes the offsets as its
    records replayed one by one would. Topic names are the manager's `topic_name`s."""

    __slots__ = ("commits", "group")

    def __init__(self, group: str, commits: list[tuple[TopicPartition, OffsetCommitValue]]) -> None:
        self.group = group
        self.commits = commits

    def __len__(self) -> int:
        return len(self.commits)

    def __bool__(self) -> bool:
        # Spelled out: a class compiled by mypyc does not fall back to __len__ for truth.
        return bool(self.commits)

    def encode(self) -> list[EncodedRecord]:
        return encode_offset_commits(self.group, self.commits)

    def slice(self, start: int, stop: int) -> OffsetCommitRun:
        return OffsetCommitRun(self.group, self.commits[start:stop])

    def __repr__(self) -> str:
        return f"OffsetCommitRun({self.group!r}, {len(self.commits)} commits)"


# An offset commit record's key and value besides the group id, topic name and metadata:
# array headers, type, versions and the integers at their widest (partition, offset, leader
# epoch, commit timestamp), and the nil expire timestamp.
_COMMIT_RECORD_BYTES: Final = 34


def _metadata_length(metadata: str) -> int:
    # Kafka compares offset.metadata.max.bytes with Java's String.length(), which counts
    # UTF-16 code units; count the same way so a limit means what it means in Kafka.
    if metadata.isascii():
        return len(metadata)
    return len(metadata.encode("utf-16-le")) // 2


class OffsetMetadataManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        clock: Clock,
        config: OffsetsConfig,
        groups: GroupMetadataManager,
        consumer_groups: ConsumerGroupManager | None = None,
    ) -> None:
        """`consumer_groups`: the partition's consumer groups (None: classic groups only)."""
        self._registry = registry
        self._clock = clock
        self._config = config
        self._groups = groups
        self._consumer_groups = consumer_groups
        # group -> (topic, partition) -> committed offset. The inner dicts are timeline
        # collections; the outer dict only indexes them and is pruned lazily.
        self._offsets: dict[str, TimelineDict[TopicPartition, OffsetCommitValue]] = {}
        self._maybe_empty: set[str] = set()
        self._topic_names: dict[str, str] = {}
        # TxnOffsetCommit's offsets until their transactions end (offsets/transactional.py
        # writes them); its index by group, read by every plain commit's replay.
        self.pending = PendingTransactionalOffsets(registry)
        self._pending_by_group = self.pending.by_group
        # An offset commit record at its largest (group id, topic name and metadata at their
        # longest, in UTF-8 at its widest, with their headers): commits of few enough
        # partitions fit a batch without counting.
        self._widest_record = (
            config.record_overhead_bytes
            + _COMMIT_RECORD_BYTES
            + 2 * (4 * config.max_id_length + 5)
            + 3 * config.offset_metadata_max_bytes
            + 5
        )

    # Request handlers (read state, emit records).

    def commit_offset(
        self, request: OffsetCommitRequest, ctx: RequestContext | None = None
    ) -> CoordinatorResult[OffsetCommitResponse]:
        """Kafka's OffsetCommit (v9+ semantics): a member of a group must be the group's at
        its generation (a consumer group's: at its member epoch); a negative generation is a
        simple commit, allowed while the group has no members and creating a classic group
        when none exists (when its records are replayed). `ctx` is the caller's, as for the
        group handlers; a commit does not need it.

        The limits: a topic name longer than `max_id_length` is INVALID_REQUEST and metadata
        over `offset_metadata_max_bytes` OFFSET_METADATA_TOO_LARGE, for their partitions;
        new partitions beyond `max_committed_offsets_per_group` are INVALID_COMMIT_OFFSET_SIZE
        (the others are committed); a commit whose records cannot fit one batch is
        INVALID_COMMIT_OFFSET_SIZE for every partition, found before any record is made; a
        commit that would create a group beyond `max_groups` is POLICY_VIOLATION.
        """
        group_id = request.group_id
        assert group_id is not None, "the service answers a missing group id"
        # Inlined `consumer_group`: every commit asks.
        consumer_groups = self._consumer_groups
        consumer_group = None if consumer_groups is None else consumer_groups.group(group_id)
        if consumer_group is not None:
            # A consumer group's member keeps its session by heartbeats only.
            error = consumer_group_offsets.validate_offset_commit(
                consumer_group, request.member_id, request.generation_id_or_member_epoch
            )
        else:
            error = self._groups.validate_offset_commit(
                group_id,
                request.member_id,
                request.group_instance_id,
                request.generation_id_or_member_epoch,
            )
            if error is None:
                self._groups.rearm_heartbeat_on_commit(group_id, request.member_id)
        if error is not None:
            return CoordinatorResult(response=request.error_response(error.code))

        config = self._config
        now_ms = self._clock.now_ms()
        max_bytes = config.offset_metadata_max_bytes
        max_id_length = config.max_id_length
        # A string of n code points is at most 2n UTF-16 units long: metadata this short is
        # within the limit without counting.
        short_enough = max_bytes // 2
        topic_names = self._topic_names
        commits: list[tuple[TopicPartition, OffsetCommitValue]] = []
        shape: list[tuple[str, tuple[int, ...]]] = []
        refusing = False
        for topic in request.topics:
            # Offsets of many groups name the same few topics: one str per topic name
            # instead of one per offset (a million loaded offsets take tens of MB less).
            name = topic_names.get(topic.name, topic.name)
            if len(name) > max_id_length:
                refusing = True
                continue
            accepted = len(commits)
            indexes: list[int] = []
            for partition in topic.partitions:
                index = partition.partition_index
                indexes.append(index)
                metadata = partition.committed_metadata or ""
                if len(metadata) > short_enough and _metadata_length(metadata) > max_bytes:
                    refusing = True
                    continue
                commits.append(
                    (
                        (name, index),
                        OffsetCommitValue(
                            partition.committed_offset,
                            partition.committed_leader_epoch,
                            metadata,
                            now_ms,
                        ),
                    )
                )
            if len(commits) > accepted:
                # Only names that offsets will hold are kept.
                topic_names.setdefault(name, name)
            shape.append((name, tuple(indexes)))

        admitted: set[TopicPartition] | None = None
        offsets = self._offsets.get(group_id)
        held = 0 if offsets is None else len(offsets)
        if held + len(commits) > config.max_committed_offsets_per_group:
            admitted, commits = self._admit_new_partitions(offsets, commits)
            refusing = refusing or admitted is not None
        if len(
            commits
        ) * self._widest_record > config.max_records_bytes and self._records_too_large(
            group_id, commits
        ):
            return CoordinatorResult(
                response=request.error_response(ErrorCode.INVALID_COMMIT_OFFSET_SIZE)
            )
        response = (
            self._answer_with_refusals(request, offsets, admitted)
            if refusing
            else all_committed_answer(tuple(shape))
        )
        if not commits:
            return CoordinatorResult(response=response)
        self._groups.metrics.offset_commits += len(commits)

        return CoordinatorResult(
            OffsetCommitRun(group_id, commits),
            response,
            # Kafka appends the records of a commit together: none of them may be left in a
            # batch of their own that fails while the others are committed.
            atomic=True,
        )

    def _admit_new_partitions(
        self,
        offsets: TimelineDict[TopicPartition, OffsetCommitValue] | None,
        commits: list[tuple[TopicPartition, OffsetCommitValue]],
    ) -> tuple[set[TopicPartition] | None, list[tuple[TopicPartition, OffsetCommitValue]]]:
        """The partitions of `commits` the group holds no offset for that fit under
        `max_committed_offsets_per_group`, first come first served (None: all of them),
        and the commits left once the others are refused."""
        room = self._config.max_committed_offsets_per_group - (
            0 if offsets is None else len(offsets)
        )
        admitted: set[TopicPartition] = set()
        refused = False
        kept: list[tuple[TopicPartition, OffsetCommitValue]] = []
        for commit in commits:
            key = commit[0]
            if (offsets is None or key not in offsets) and key not in admitted:
                if len(admitted) >= room:
                    refused = True
                    continue
                admitted.add(key)
            kept.append(commit)
        return (admitted if refused else None), kept

    def _records_too_large(
        self, group_id: str, commits: list[tuple[TopicPartition, OffsetCommitValue]]
    ) -> bool:
        """Whether the records of `commits` would not fit one batch, counted from the group
        id, topic names and metadata before any record is made (the caller asks only when
        `_widest_record` each could not fit)."""
        config = self._config
        per_record = config.record_overhead_bytes + _COMMIT_RECORD_BYTES + str_bytes(group_id)
        size = per_record * len(commits)
        topic = None
        topic_bytes = 0
        for (name, _), value in commits:
            if name is not topic:
                topic = name
                topic_bytes = str_bytes(name)
            size += topic_bytes + str_bytes(value.metadata)
        return size > config.max_records_bytes

    def _answer_with_refusals(
        self,
        request: OffsetCommitRequest,
        offsets: TimelineDict[TopicPartition, OffsetCommitValue] | None,
        admitted: set[TopicPartition] | None,
    ) -> OffsetCommitResponse:
        """The answer to a commit some of whose partitions are refused, each for the same
        reason every time the request names it."""
        config = self._config
        max_bytes = config.offset_metadata_max_bytes
        max_id_length = config.max_id_length

        def code_of(name: str, partition: OffsetCommitRequestPartition) -> ErrorCode:
            if len(name) > max_id_length:
                return ErrorCode.INVALID_REQUEST
            if _metadata_too_large(partition.committed_metadata, max_bytes):
                return ErrorCode.OFFSET_METADATA_TOO_LARGE
            if admitted is not None:
                key = (name, partition.partition_index)
                if key not in admitted and (offsets is None or key not in offsets):
                    return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
            return ErrorCode.NONE

        return answer_per_partition(request, code_of)

    def fetch_offsets(
        self, request: OffsetFetchRequestGroup, committed_offset: int | None
    ) -> OffsetFetchResponseGroup:
        """Offsets as of `committed_offset` (None: the latest state, for require_stable); a
        consumer group's refusal of the member is the group's error code."""
        group_id = request.group_id
        assert group_id is not None, "the service answers a missing group id"
        member_id, member_epoch = request.member_id, request.member_epoch
        try:
            if request.topics is None:
                fetched = self.fetch_all_offsets(
                    group_id, committed_offset, member_id=member_id, member_epoch=member_epoch
                )
            else:
                fetched = self.fetch_partition_offsets(
                    group_id,
                    [(t.name, t.partition_indexes) for t in request.topics],
                    committed_offset,
                    member_id=member_id,
                    member_epoch=member_epoch,
                )
        except ApiError as error:
            return OffsetFetchResponseGroup(group_id=group_id, error_code=error.code, topics=[])
        assert fetched is not None, "no limit, no refusal"
        return OffsetFetchResponseGroup(group_id=group_id, topics=fetched[0])

    def _visible_offsets(
        self, group_id: str, committed_offset: int | None, member_id: str | None, member_epoch: int
    ) -> TimelineDict[TopicPartition, OffsetCommitValue] | None:
        consumer_groups = self._consumer_groups
        if consumer_groups is not None:
            consumer_group = consumer_groups.group(group_id, committed_offset)
            if consumer_group is not None:
                error = consumer_group_offsets.validate_offset_fetch(
                    consumer_group, member_id, member_epoch, committed_offset
                )
                if error is not None:
                    raise error
                return self._offsets.get(group_id)
        group = self._groups.group(group_id, committed_offset)
        # An unknown or Dead group has no offsets to show.
        if group is None or group.state is ClassicGroupState.DEAD:
            return None
        return self._offsets.get(group_id)

    def fetch_partition_offsets(
        self,
        group_id: str,
        topics: Sequence[tuple[str, Sequence[int]]],
        committed_offset: int | None,
        max_bytes: int | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[list[OffsetFetchResponseTopic], int] | None:
        """The offsets of the partitions of `topics` ((name, partition indexes), in the
        request's order; -1 where there is none) as of `committed_offset` (None: the latest
        state), and the bytes they take in the answer; None once they would take more than
        `max_bytes`. `member_id` and `member_epoch` are the request's: a consumer group refuses
        a member it does not have at that epoch by raising the error (Kafka's
        `validateOffsetFetch`; none and -1 are an admin's fetch); classic groups ignore
        them."""
        offsets = self._visible_offsets(group_id, committed_offset, member_id, member_epoch)
        # A fetch of the latest state is a require_stable one: a partition with a pending
        # transactional offset is unstable (Kafka's C8), committed offset or not. (A group
        # with pending offsets exists: deleting it deletes them.)
        pending = (
            self.pending.of_group(group_id)
            if committed_offset is None and self._pending_by_group
            else None
        )

        fetched: list[OffsetFetchResponseTopic] = []
        size = 0
        for name, indexes in topics:
            if max_bytes is not None:
                # Partitions without metadata first: nothing is built past the limit.
                size += fetched_topic_bytes(name) + len(indexes) * FETCHED_PARTITION_BYTES
                if size > max_bytes:
                    return None
            # A partition named again gets the same answer, looked up once.
            answers: dict[int, tuple[OffsetFetchResponsePartition, int]] = {}
            partitions = []
            for index in indexes:
                answer = answers.get(index)
                if answer is None:
                    key = (name, index)
                    if pending is not None and pending.get(key):
                        answer = answers[index] = (_unstable(index), 0)
                    else:
                        if offsets is None:
                            value = None
                        elif committed_offset is None:
                            value = offsets.get(key)
                        else:
                            value = offsets.get_at(key, committed_offset)
                        metadata = (
                            0
                            if value is None or not value.metadata
                            else str_bytes(value.metadata) - 1
                        )
                        answer = answers[index] = (_fetched(index, value), metadata)
                if answer[1] and max_bytes is not None:
                    size += answer[1]
                    if size > max_bytes:
                        return None
                partitions.append(answer[0])
            fetched.append(OffsetFetchResponseTopic(name=name, partitions=partitions))
        return fetched, size

    def fetch_all_offsets(
        self,
        group_id: str,
        committed_offset: int | None,
        max_bytes: int | None = None,
        *,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> tuple[list[OffsetFetchResponseTopic], int] | None:
        """Every offset of the group as of `committed_offset` (None: the latest state), by
        topic and partition, and the bytes they take in the answer; None once they would
        take more than `max_bytes`. `member_id` and `member_epoch` as for
        `fetch_partition_offsets`."""
        offsets = self._visible_offsets(group_id, committed_offset, member_id, member_epoch)
        if offsets is None:
            return [], 0
        if max_bytes is not None and len(offsets) * FETCHED_PARTITION_BYTES > max_bytes:
            return None
        items = offsets.items() if committed_offset is None else offsets.items_at(committed_offset)
        pending = (
            self.pending.of_group(group_id)
            if committed_offset is None and self._pending_by_group
            else None
        )
        by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
        size = 0
        for (topic, partition), value in sorted(items):
            parts = by_topic.get(topic)
            if parts is None:
                parts = by_topic[topic] = []
                size += fetched_topic_bytes(topic)
            if pending is not None and pending.get((topic, partition)):
                size += FETCHED_PARTITION_BYTES
                if max_bytes is not None and size > max_bytes:
                    return None
                parts.append(_unstable(partition))
                continue
            size += fetched_partition_bytes(value.metadata)
            if max_bytes is not None and size > max_bytes:
                return None
            parts.append(_fetched(partition, value))
        return [
            OffsetFetchResponseTopic(name=name, partitions=parts)
            for name, parts in by_topic.items()
        ], size

    # Replay (the only place state changes; the shard's `replay` dispatches here).

    def replay_commit(
        self, group: str, topic: str, partition: int, value: OffsetCommitValue | None
    ) -> None:
        """The replay of one offset commit record (a tombstone when `value` is None)."""
        if self._maybe_empty:
            self._prune()
        offsets = self._offsets.get(group)
        if value is None:
            if offsets is not None:
                offsets.pop((topic, partition))
                self._maybe_empty.add(group)
            return
        self._ensure_group(group)
        if offsets is None:
            offsets = self._offsets[group] = TimelineDict(self._registry)
        offsets[(self.topic_name(topic), partition)] = value
        pending = self._pending_by_group
        if pending and pending.get(group):
            self.pending.supersede(group, ((topic, partition),))

    def topic_name(self, topic: str) -> str:
        """The str the offsets hold for a topic name equal to `topic`: offsets of many
        groups name the same few topics, so one str per topic name instead of one per
        offset (a million loaded offsets take tens of MB less). What the keys given to
        `replay_commits` are made of."""
        return self._topic_names.setdefault(topic, topic)

    def replay_commits(
        self, group: str, commits: list[tuple[TopicPartition, OffsetCommitValue]]
    ) -> None:
        """`replay_commit` of each of a group's commits, in order, in one go: the replay of
        an OffsetCommitRun, live or loaded. Topic names are `topic_name`'s."""
        if self._maybe_empty:
            self._prune()
        self._ensure_group(group)
        offsets = self._offsets.get(group)
        if offsets is None:
            offsets = self._offsets[group] = TimelineDict(self._registry)
        offsets.set_all(commits)
        pending = self._pending_by_group
        if pending and pending.get(group):
            self.pending.supersede(group, (key for key, _ in commits))

    def replay_transactional(
        self,
        offset: int,
        group: str,
        topic: str,
        partition: int,
        producer_id: int,
        value: TransactionalOffsetValue | None,
    ) -> None:
        """The replay of a transactional offset record at log offset `offset` (a tombstone
        when `value` is None): the producer's pending offset of the partition. Like a
        commit, it creates the group it names."""
        if value is not None:
            self._ensure_group(group)
        self.pending.replay(offset, group, self.topic_name(topic), partition, producer_id, value)

    def _ensure_group(self, group: str) -> None:
        # Offsets of a group that does not exist are a consumer's that only stores them: a
        # simple classic group holds them (a consumer group's are its own).
        consumer_groups = self._consumer_groups
        if consumer_groups is None or consumer_groups.group(group) is None:
            self._groups.ensure_simple_group(group)

    def _prune(self) -> None:
        for group in list(self._maybe_empty):
            offsets = self._offsets.get(group)
            if offsets is None or offsets.is_empty_everywhere():
                self._offsets.pop(group, None)
                self._maybe_empty.discard(group)
            elif len(offsets):
                self._maybe_empty.discard(group)

    def delete_offsets(
        self, request: OffsetDeleteRequest
    ) -> CoordinatorResult[OffsetDeleteResponse]:
        """Kafka's OffsetDelete: the group must exist; a classic group with members only if
        it uses the "consumer" protocol (a consumer group whatever its members), and never
        for a topic it subscribes to."""
        group_id = request.group_id
        assert group_id, "the service answers a missing or empty group id"
        is_subscribed = self._subscription_check(group_id)
        if isinstance(is_subscribed, ErrorCode):
            return CoordinatorResult(response=OffsetDeleteResponse(error_code=is_subscribed))
        offsets = self._offsets.get(group_id)
        records: list[CoordinatorRecord] = []
        topics: list[OffsetDeleteResponseTopic] = []
        # A partition named again is answered again (as Kafka does) but deleted once.
        deleted: set[TopicPartition] = set()
        for topic in request.topics:
            subscribed = is_subscribed(topic.name)
            partitions: list[OffsetDeleteResponsePartition] = []
            for partition in topic.partitions:
                index = partition.partition_index
                if subscribed:
                    code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    code = ErrorCode.NONE
                    key = (topic.name, index)
                    if key not in deleted:
                        deleted.add(key)
                        if offsets is not None and key in offsets:
                            records.append(
                                new_offset_commit_tombstone_record(group_id, topic.name, index)
                            )
                        # Kafka's tombstone deletes the partition's pending offsets too;
                        # here they have keys of their own.
                        records.extend(
                            new_transactional_offset_tombstone_record(
                                group_id, topic.name, index, entry.producer_id
                            )
                            for entry in self.pending.of_partition(group_id, topic.name, index)
                        )
                partitions.append(
                    OffsetDeleteResponsePartition(partition_index=index, error_code=code)
                )
            topics.append(OffsetDeleteResponseTopic(name=topic.name, partitions=partitions))
        return CoordinatorResult(
            records, OffsetDeleteResponse(error_code=ErrorCode.NONE, topics=topics)
        )

    def _subscription_check(self, group_id: str) -> Callable[[str], bool] | ErrorCode:
        """Whether the group subscribes to a topic, or why OffsetDelete may not delete its
        offsets at all."""
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            return consumer_group_offsets.subscription_check(consumer_group)
        group = self._groups.group(group_id)
        if group is None or group.state is ClassicGroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        error = group.validate_offset_delete()
        if error is not None:
            return error.code
        return group.is_subscribed_to_topic

    def delete_all_offsets(self, group_id: str, records: list[CoordinatorRecord]) -> int:
        """Tombstones for every committed offset and every pending transactional offset of
        the group (DeleteGroups)."""
        offsets = self._offsets.get(group_id)
        before = len(records)
        if offsets is not None:
            records.extend(
                new_offset_commit_tombstone_record(group_id, topic, partition)
                for topic, partition in sorted(offsets.keys())
            )
        pending = self.pending.of_group(group_id)
        if pending is not None:
            records.extend(
                new_transactional_offset_tombstone_record(
                    group_id, topic, partition, entry.producer_id
                )
                for (topic, partition), entries in sorted(pending.items())
                for entry in entries
            )
        return len(records) - before

    def cleanup_expired_offsets(
        self, group_id: str, offsets_retention_ms: int, records: list[CoordinatorRecord]
    ) -> bool:
        """Tombstones for the group's expired offsets, by Kafka's rules: only offsets of
        topics the group does not subscribe to, when the group's expiration condition says
        so (a consumer group's: `offsets_retention_ms` after the commit), and never an offset
        with a pending transactional offset. True when the group has no offset left
        afterwards and no pending one."""
        offsets = self._offsets.get(group_id)
        pending = self.pending.of_group(group_id)
        if offsets is None or not len(offsets):
            return pending is None
        is_subscribed: Callable[[str], bool]
        is_expired: Callable[[OffsetCommitValue, int, int], bool]
        consumer_group = self.consumer_group(group_id)
        if consumer_group is not None:
            is_subscribed = consumer_group_offsets.subscription_check(consumer_group)
            is_expired = consumer_group_offsets.is_offset_expired
        else:
            group = self._groups.group(group_id)
            condition = None if group is None else group.offset_expiration_condition()
            if group is None or condition is None:
                return False
            is_subscribed = group.is_subscribed_to_topic
            is_expired = condition.is_offset_expired
        now_ms = self._clock.now_ms()
        before = len(records)
        all_expired = True
        for (topic, partition), value in sorted(offsets.items()):
            if (
                not is_subscribed(topic)
                and is_expired(value, now_ms, offsets_retention_ms)
                and (pending is None or not pending.get((topic, partition)))
            ):
                records.append(new_offset_commit_tombstone_record(group_id, topic, partition))
            else:
                all_expired = False
        self._groups.metrics.offsets_expired += len(records) - before
        return all_expired and pending is None

    # Views for other parts of the shard and for tests.

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group of that id (the latest state), None when the id is a classic
        group's or no group's."""
        consumer_groups = self._consumer_groups
        return None if consumer_groups is None else consumer_groups.group(group_id)

    def committed_offset(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        offsets = self._offsets.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def group_offsets(self, group: str) -> TimelineDict[TopicPartition, OffsetCommitValue] | None:
        """The group's committed offsets (the latest state)."""
        return self._offsets.get(group)

    def group_exists(self, group: str) -> bool:
        offsets = self._offsets.get(group)
        return offsets is not None and len(offsets) > 0

    def groups(self) -> list[str]:
        return [group for group, offsets in self._offsets.items() if len(offsets)]

    def num_offsets(self) -> int:
        return sum(len(offsets) for offsets in self._offsets.values())

    def committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        """Every committed offset as (group, topic, partition, offset), the latest state.
        It may be resumed after the state changed (the consumer lag reads it in slices):
        each group's offsets are copied before the first of them is given."""
        for group in list(self._offsets):
            offsets = self._offsets.get(group)
            if offsets is None:
                continue
            for (topic, partition), value in list(offsets.items()):
                yield group, topic, partition, value.offset


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


def _unstable(partition: int) -> OffsetFetchResponsePartition:
    return OffsetFetchResponsePartition(
        partition_index=partition,
        committed_offset=-1,
        committed_leader_epoch=-1,
        metadata="",
        error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT,
    )


def _metadata_too_large(metadata: str | None, max_bytes: int) -> bool:
    return _metadata_length(metadata or "") > max_bytes
