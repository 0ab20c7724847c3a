"""Producer ids of one log partition (Kafka's ProducerIdManager, with the controller's blocks
as records of the partition itself).

The configured range [start, end) is split into as many equal contiguous parts as the log
has partitions; partition p hands out ids from part p only, so no two partitions (and no
two owners of one partition, one after the other) ever hand out the same id. Ids are
reserved a block at a time with one ProducerIdBlock record (the partition's next block
start); ids inside the reserved block are handed out without a record, through an
in-memory update of the cursor (`ProducerIdUpdate`), which a failed append reverts with the
write that handed the id out. A load sets the cursor to the end of the last block: the
rest of a block reserved before a restart is never handed out, as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator_server.records import CoordinatorRecord, new_producer_id_block_record
from coordinator_server.timeline import SnapshotRegistry, TimelineDict

BLOCK_SIZE = 1000
"""Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE."""

_NEXT_BLOCK_START = "next_block_start"
_NEXT_ID = "next_id"


@dataclass(frozen=True, slots=True)
class ProducerIdUpdate:
    """The next id of the partition's current block to hand out (an in-memory update)."""

    next_id: int


class ProducerIdsExhaustedError(Exception):
    """The partition's part of the range has no id left (Kafka's controller answers
    UNKNOWN_SERVER_ERROR: "Exhausted all producerIds")."""


def partition_range(start: int, end: int, num_partitions: int, partition: int) -> tuple[int, int]:
    """Partition `partition`'s part [first, last + 1) of [start, end)."""
    assert 0 <= partition < num_partitions, "a partition of the log"
    size = (end - start) // num_partitions
    assert size > 0, "a range smaller than the log's partitions"
    first = start + partition * size
    return first, first + size


class ProducerIdManager:
    def __init__(
        self, registry: SnapshotRegistry, start: int, end: int, num_partitions: int, partition: int
    ) -> None:
        self.first, self.end = partition_range(start, end, num_partitions, partition)
        # next_block_start (from the records) and next_id (the cursor, from updates and
        # loads), both reverted with the write that changed them.
        self._state: TimelineDict[str, int] = TimelineDict(registry)

    @property
    def next_block_start(self) -> int:
        next_block_start = self._state.get(_NEXT_BLOCK_START)
        return self.first if next_block_start is None else next_block_start

    def generate_producer_id(
        self, records: list[CoordinatorRecord]
    ) -> tuple[int, ProducerIdUpdate]:
        """The next free id and the cursor after it (one id a write); a block record is
        added to `records` when the reserved block is used up."""
        block_end = self.next_block_start
        next_id = self._state.get(_NEXT_ID)
        if next_id is None:
            next_id = block_end
        if next_id >= block_end:
            if next_id >= self.end:
                raise ProducerIdsExhaustedError(
                    f"every producer id of [{self.first}, {self.end}) is handed out"
                )
            records.append(new_producer_id_block_record(min(next_id + BLOCK_SIZE, self.end)))
        return next_id, ProducerIdUpdate(next_id + 1)

    def replay_block(self, next_block_start: int) -> None:
        """A block record: everything below it is handed out or reserved; the cursor is at
        its end until an update (of the write that reserved it) moves it into the block."""
        self._state[_NEXT_BLOCK_START] = next_block_start
        self._state[_NEXT_ID] = next_block_start

    def apply(self, update: ProducerIdUpdate) -> None:
        self._state[_NEXT_ID] = update.next_id
