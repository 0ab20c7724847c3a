"""The pending transactional offsets of one log partition: the store that TxnOffsetCommit's
records fill and the end of a transaction empties (see `offsets/transactional.py`).

Kafka's OffsetMetadataManager keeps them in `pendingTransactionalOffsets` (by producer id)
and `openTransactionsByGroup`; here by group and partition (what fetches, deletions,
expiration and plain commits ask about) and by producer (what the end of a transaction
asks about). Each entry remembers its record's log offset, to tell which of two pending
offsets of a partition came later, and whether a plain commit came after it (Kafka's rule
C11, without storing record offsets for plain commits).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from coordinator_server.records import OffsetCommitValue, TransactionalOffsetValue
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

TopicPartition = tuple[str, int]
GroupPartition = tuple[str, str, int]
"""(group, topic, partition)."""


class PendingOffset(msgspec.Struct, frozen=True, gc=False):
    """A producer's pending offset of one partition. `order` is its record's log offset:
    which of two pending offsets came later (compaction keeps the order of the records it
    keeps). `superseded`: a plain commit of the partition came after it."""

    producer_id: int
    producer_epoch: int
    order: int
    value: OffsetCommitValue
    superseded: bool = False


class PendingTransactionalOffsets:
    """The pending offsets of one log partition, by group and partition and by producer, in
    timeline collections (a failed append is undone; the outer dicts only index them and
    are pruned lazily). Changed only by the replay methods."""

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        # group -> (topic, partition) -> its pending offsets, one per producer, oldest first.
        self.by_group: dict[str, TimelineDict[TopicPartition, tuple[PendingOffset, ...]]] = {}
        # producer id -> the (group, topic, partition) of its pending offsets.
        self._by_producer: dict[int, TimelineDict[GroupPartition, bool]] = {}
        self._maybe_empty_groups: set[str] = set()
        self._maybe_empty_producers: set[int] = set()

    # Replay.

    def replay(
        self,
        order: int,
        group: str,
        topic: str,
        partition: int,
        producer_id: int,
        value: TransactionalOffsetValue | None,
    ) -> None:
        """The replay of a transactional offset record at log offset `order` (a tombstone
        when `value` is None)."""
        self._prune()
        key = (topic, partition)
        offsets = self.by_group.get(group)
        held = () if offsets is None else offsets.get(key, ())
        assert held is not None
        kept = tuple(entry for entry in held if entry.producer_id != producer_id)
        if value is None:
            if len(kept) == len(held):
                return
            assert offsets is not None
            if kept:
                offsets[key] = kept
            else:
                offsets.pop(key)
                self._maybe_empty_groups.add(group)
            producer = self._by_producer.get(producer_id)
            if producer is not None:
                producer.pop((group, topic, partition))
                self._maybe_empty_producers.add(producer_id)
            return
        if offsets is None:
            offsets = self.by_group[group] = TimelineDict(self._registry)
        entry = PendingOffset(
            producer_id,
            value.producer_epoch,
            order,
            OffsetCommitValue(
                value.offset, value.leader_epoch, value.metadata, value.commit_timestamp_ms
            ),
        )
        # Records replay in log order: the new one is the latest.
        offsets[key] = (*kept, entry)
        producer = self._by_producer.get(producer_id)
        if producer is None:
            producer = self._by_producer[producer_id] = TimelineDict(self._registry)
        producer[(group, topic, partition)] = True

    def supersede(self, group: str, keys: Iterable[TopicPartition]) -> None:
        """Plain commits of `keys` of the group were replayed: every pending offset of those
        partitions is superseded (the caller knows the group has pending offsets)."""
        offsets = self.by_group[group]
        for key in keys:
            held = offsets.get(key)
            if held and not all(entry.superseded for entry in held):
                offsets[key] = tuple(
                    entry if entry.superseded else msgspec.structs.replace(entry, superseded=True)
                    for entry in held
                )

    def _prune(self) -> None:
        if self._maybe_empty_groups:
            for group in list(self._maybe_empty_groups):
                offsets = self.by_group.get(group)
                if offsets is None or offsets.is_empty_everywhere():
                    self.by_group.pop(group, None)
                    self._maybe_empty_groups.discard(group)
                elif len(offsets):
                    self._maybe_empty_groups.discard(group)
        if self._maybe_empty_producers:
            for producer_id in list(self._maybe_empty_producers):
                producer = self._by_producer.get(producer_id)
                if producer is None or producer.is_empty_everywhere():
                    self._by_producer.pop(producer_id, None)
                    self._maybe_empty_producers.discard(producer_id)
                elif len(producer):
                    self._maybe_empty_producers.discard(producer_id)

    # Views (the latest state, unless said otherwise).

    def of_group(
        self, group: str
    ) -> TimelineDict[TopicPartition, tuple[PendingOffset, ...]] | None:
        """The group's pending offsets by partition; None when it has none."""
        offsets = self.by_group.get(group)
        return offsets if offsets else None

    def of_partition(self, group: str, topic: str, partition: int) -> tuple[PendingOffset, ...]:
        offsets = self.by_group.get(group)
        if not offsets:
            return ()
        return offsets.get((topic, partition)) or ()

    def has_pending(self, group: str, topic: str, partition: int) -> bool:
        """Kafka's hasPendingTransactionalOffsets: any producer's, superseded or not."""
        return bool(self.of_partition(group, topic, partition))

    def of_producer(self, producer_id: int) -> list[tuple[GroupPartition, PendingOffset]]:
        """The producer's pending offsets, oldest record first."""
        producer = self._by_producer.get(producer_id)
        if not producer:
            return []
        found = [
            ((group, topic, partition), entry)
            for group, topic, partition in producer
            for entry in self.of_partition(group, topic, partition)
            if entry.producer_id == producer_id
        ]
        found.sort(key=lambda item: item[1].order)
        return found

    def get(self, producer_id: int, group: str, topic: str, partition: int) -> PendingOffset | None:
        for entry in self.of_partition(group, topic, partition):
            if entry.producer_id == producer_id:
                return entry
        return None

    def has_producer(self, producer_id: int, committed_offset: int | None = None) -> bool:
        """Whether the producer has pending offsets, as of `committed_offset` (None: the
        latest state)."""
        producer = self._by_producer.get(producer_id)
        if producer is None:
            return False
        if committed_offset is None:
            return len(producer) > 0
        return any(True for _ in producer.items_at(committed_offset))

    def producers(self) -> list[int]:
        return sorted(pid for pid, producer in self._by_producer.items() if len(producer))

    def count(self) -> int:
        return sum(len(producer) for producer in self._by_producer.values())
