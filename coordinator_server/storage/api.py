"""The storage interfaces the runtime writes and loads through.

A coordinator log has `num_partitions` partitions, each an ordered sequence of records
(key bytes, value bytes or None for a tombstone) at consecutive offsets starting from the
partition's start offset. The runtime is the only writer of a partition it owns.

Offsets follow Kafka's conventions: `append` returns the log end offset after the batch (the
offset the next record will get), and the high watermark is the offset below which every
record is committed (durable: acknowledged by all in-sync replicas, or in a committed
SQLite transaction).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

RawRecord = tuple[bytes, bytes | None]
"""A record as stored: key bytes and value bytes, or None for a tombstone."""

HighWatermarkListener = Callable[[int, int], None]
"""Called with (partition, high_watermark) whenever a partition's high watermark advances."""

ReadyListener = Callable[[], None]
"""Called when appends that would have waited (see `PartitionWriter.backlogged`) can go."""

RecordSink = Callable[[int, bytes, bytes | None], None]
"""Called by a loader with (offset, key, value) for each record, in offset order."""

LatestRecords = dict[bytes, tuple[int, bytes | None]]
"""Records as compaction leaves them: each key's latest (offset, value)."""

FollowSink = Callable[[int, LatestRecords, int], None]
"""Called by a follower once for each partition a round read, with (partition, the latest
record of each key it read, the position after them). Only each key's latest record comes
(a standby replays them as a load of the compacted log would), in no particular order: their
offsets give it. It must not raise: what it does with them is its own business."""

LogFailureListener = Callable[[str], None]
"""Called once, with the reason, when a log stops for good (see `CoordinatorLog.failure`)."""


class AppendError(Exception):
    """An append that did not become durable.

    `error_code` is the Kafka error code that describes the failure, one of `error_codes`
    (e.g. 19 NOT_ENOUGH_REPLICAS, 7 REQUEST_TIMED_OUT, 10 MESSAGE_TOO_LARGE, 6
    NOT_LEADER_OR_FOLLOWER, -1 for anything unknown); the service maps it to what the client
    sees.

    `stops_partition`: the log takes no more appends of the partition from this writer until
    it is acquired again (a log that fences partitions to their owner: another node took the
    partition over, or an append's fate stayed unknown). The partition must stop serving at
    once: its state may already be behind the new owner's.
    """

    def __init__(self, error_code: int, message: str, *, stops_partition: bool = False) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.stops_partition = stops_partition


class LoadError(Exception):
    """A partition that could not be read back."""


@dataclass(frozen=True, slots=True)
class LoadSummary:
    start_offset: int
    end_offset: int
    records: int
    bytes: int


class PartitionWriter(Protocol):
    """Appends batches to a partition of the log and reports its high watermark."""

    def append(self, partition: int, records: Sequence[RawRecord]) -> asyncio.Future[int]:
        """Start appending `records` as one batch, in order; the future gets the log end
        offset after it.

        A future rather than a coroutine, so that the runtime needs no task per append.
        Durable implementations complete it only once the batch is committed, after
        reporting the new high watermark to the listener. It fails with AppendError when
        the append fails, in which case none of the batch is visible to a later load (and
        with AppendError or ValueError for a call that cannot be made: an unknown
        partition, no records).
        """
        ...

    def backlogged(self, partition: int) -> bool:
        """True while an append of `partition` started now would only wait behind others
        on the way to the same place. The runtime then keeps the partition's batch open,
        taking more records, until the ready listener is called: batches that waited leave
        together, and larger (group commit across partitions)."""
        ...

    def register_ready_listener(self, listener: ReadyListener) -> None:
        """Set the one callback told when backlogged appends can go (replaces any earlier
        one)."""
        ...

    def register_listener(self, listener: HighWatermarkListener) -> None:
        """Set the one callback told of high-watermark advances (replaces any earlier one)."""
        ...

    def high_watermark(self, partition: int) -> int:
        """The committed end of the partition as this writer last saw it."""
        ...


class CoordinatorLoader(Protocol):
    """Reads a partition of the log back, from its start to its high watermark."""

    async def load(
        self, partition: int, sink: RecordSink, *, start_offset: int | None = None
    ) -> LoadSummary:
        """Call `sink(offset, key, value)` for every committed record, in order, from the
        partition's start (or from `start_offset`: the rest of a partition whose records
        below it were read already, by a standby).

        Reads up to the high watermark as the log reports it when the load starts (for
        Kafka, the high watermark a Fetch response carries). Raises LoadError on failure.
        """
        ...


@dataclass(frozen=True, slots=True)
class FollowResult:
    """What one round of `LogFollower.follow` read, partition by partition.

    Every partition asked for is in exactly one of `positions`, `retry` and `lost`."""

    positions: Mapping[int, int]
    """The next offset to read of each partition read: every committed record below it
    was handed to the sink."""
    high_watermarks: Mapping[int, int]
    """The high watermark each partition read reported (its lag is this minus its
    position)."""
    retry: Mapping[int, str]
    """Partitions that could not be read now, and why, for reasons a wait mends (a leader
    moving, a broker down): read them again later from the same position."""
    lost: Mapping[int, str]
    """Partitions that cannot be read on from their position (the log no longer holds it,
    or ends below it): whoever follows them starts again from the log's start."""


class LogFollower(Protocol):
    """Keeps reading partitions of the log as they grow: what a warm standby tails, and what
    every node reads the security partition's ACLs and SCRAM credentials with."""

    async def follow(
        self,
        positions: Mapping[int, int | None],
        sink: FollowSink,
        *,
        max_wait_ms: int,
        max_bytes: int,
        min_bytes: int = 1,
    ) -> FollowResult:
        """One round: hand `sink` the committed records of each partition from its position
        (None: from the partition's start) on, the latest of each key, up to at most about
        `max_bytes` in all (a record batch larger than that still comes whole).

        When the partitions have fewer than `min_bytes` of committed records past their
        positions, wait up to `max_wait_ms` for more (a long poll), so that a caller that
        calls again at once never spins, and a busy log is read in large rounds rather
        than a round per append (a log may answer as soon as it has any record). Errors of
        single partitions are in the result; it raises LoadError only when nothing could be
        asked at all (the log is not running or stopped).
        """
        ...


class CoordinatorLog(Protocol):
    """One log implementation: its writer, its loader and its life cycle."""

    @property
    def num_partitions(self) -> int: ...

    @property
    def writer(self) -> PartitionWriter: ...

    @property
    def loader(self) -> CoordinatorLoader: ...

    @property
    def follower(self) -> LogFollower | None:
        """What tails the log: for standbys, and for the node's image of the security
        partition (the embedded SQLite file's own server follows it for that alone); None
        for a log that cannot be followed."""
        ...

    @property
    def failure(self) -> str | None:
        """Why the log stopped for good, or None while it works.

        A log stops for good when what it holds can no longer be trusted to be the state it
        wrote (a Kafka topic that disappeared or changed its partition count): appends and
        loads fail from then on, and only a restart, after an operator has looked, starts
        it again. Errors that waiting mends (a broker down) never stop it.
        """
        ...

    def register_failure_listener(self, listener: LogFailureListener) -> None:
        """Set the one callback told when the log stops for good (replaces any earlier one)."""
        ...

    async def start(self) -> None:
        """Connect, and create the log (topic, file, tables) when it does not exist."""
        ...

    async def close(self) -> None: ...
