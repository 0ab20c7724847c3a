"""An in-memory coordinator log, for tests and the simulator.

It is Kafka's `InMemoryPartitionWriter` test fake in asyncio form: each partition is a list
of records with an end offset and a high watermark. With `auto_commit` an append commits at
once (the high watermark moves to the end and the listener hears of it before `append`
returns, as a durable writer does); without it the test moves the high watermark by hand
with `commit`, which is how runtime tests hold responses parked. Faults are injected per
partition: failed appends, appends held in flight, failed loads, and truncation of the
uncommitted tail (what a Kafka leader does after a failed replication); and the whole log can
stop for good (`stop_for_good`, what a Kafka log does when its topic is lost).

The loader reads committed records only, from offset 0 (or the offset it is given) up to the
high watermark; the follower reads them as they commit, for standbys, waiting for the high
watermark to move when there is nothing new (faults injected per partition there too).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Mapping, Sequence

from coordinator_server.storage.api import (
    AppendError,
    FollowResult,
    FollowSink,
    HighWatermarkListener,
    LatestRecords,
    LoadError,
    LoadSummary,
    LogFailureListener,
    RawRecord,
    ReadyListener,
    RecordSink,
)
from coordinator_server.storage.error_codes import UNKNOWN_TOPIC_OR_PARTITION

# The latest loads and follow rounds a test can look at.
RECENT_READS = 1000


class InMemoryPartitionWriter:
    """Appends to in-memory partitions; the high watermark moves by itself or by hand."""

    def __init__(self, num_partitions: int, *, auto_commit: bool = True) -> None:
        if num_partitions < 1:
            raise ValueError(f"num_partitions must be at least 1, got {num_partitions}")
        self._num_partitions = num_partitions
        self._auto_commit = auto_commit
        self._entries: list[list[RawRecord]] = [[] for _ in range(num_partitions)]
        self._high_watermarks = [0] * num_partitions
        # (base_offset, record count) of every stored append, per partition.
        self._batches: list[list[tuple[int, int]]] = [[] for _ in range(num_partitions)]
        self._failures: list[deque[tuple[int, str]]] = [deque() for _ in range(num_partitions)]
        self._listener: HighWatermarkListener | None = None
        # Set when appends may go on; an Event so that a cancelled append does not cancel
        # the others waiting with it.
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._append_calls = [0] * num_partitions
        self._backlogged = False
        self._ready_listener: ReadyListener | None = None
        # Why the log stopped for good (see InMemoryLog.stop_for_good).
        self.stopped: str | None = None
        # Set, and replaced by a new one, whenever a high watermark moves: what a follower
        # with nothing to read waits on.
        self.grown = asyncio.Event()

    @property
    def num_partitions(self) -> int:
        return self._num_partitions

    @property
    def auto_commit(self) -> bool:
        return self._auto_commit

    # PartitionWriter.

    def append(self, partition: int, records: Sequence[RawRecord]) -> asyncio.Future[int]:
        return asyncio.ensure_future(self._append(partition, records))

    def backlogged(self, partition: int) -> bool:
        return self._backlogged

    def register_ready_listener(self, listener: ReadyListener) -> None:
        self._ready_listener = listener

    async def _append(self, partition: int, records: Sequence[RawRecord]) -> int:
        if not 0 <= partition < self._num_partitions:
            raise AppendError(UNKNOWN_TOPIC_OR_PARTITION, f"no partition {partition}")
        self._append_calls[partition] += 1
        await self._resumed.wait()
        if self.stopped is not None:
            raise AppendError(UNKNOWN_TOPIC_OR_PARTITION, f"the log stopped: {self.stopped}")
        failures = self._failures[partition]
        if failures:
            error_code, message = failures.popleft()
            raise AppendError(error_code, message)
        entries = self._entries[partition]
        self._batches[partition].append((len(entries), len(records)))
        entries.extend(records)
        end_offset = len(entries)
        if self._auto_commit:
            self._set_high_watermark(partition, end_offset)
        return end_offset

    def register_listener(self, listener: HighWatermarkListener) -> None:
        self._listener = listener

    def high_watermark(self, partition: int) -> int:
        return self._high_watermarks[self._check(partition)]

    # Test controls.

    def commit(self, partition: int, offset: int | None = None) -> None:
        """Move the high watermark to `offset` (None: the end) and tell the listener."""
        self._check(partition)
        end_offset = len(self._entries[partition])
        target = end_offset if offset is None else offset
        if not self._high_watermarks[partition] <= target <= end_offset:
            raise ValueError(
                f"high watermark of partition {partition} cannot move to {target}: it is "
                f"{self._high_watermarks[partition]} and the end is {end_offset}"
            )
        self._set_high_watermark(partition, target)

    def set_backlogged(self, backlogged: bool) -> None:
        """Report every partition as backlogged or not; clearing it tells the ready
        listener, as a writer does when a request on the way comes back."""
        self._backlogged = backlogged
        if not backlogged and self._ready_listener is not None:
            self._ready_listener()

    def inject_append_failure(
        self, partition: int, error_code: int, message: str = "injected", count: int = 1
    ) -> None:
        """Make the next `count` appends to `partition` raise AppendError, storing nothing."""
        self._check(partition)
        self._failures[partition].extend((error_code, message) for _ in range(count))

    def pause_appends(self) -> None:
        """Hold every append (of every partition) in flight until `resume_appends`."""
        self._resumed.clear()

    def resume_appends(self) -> None:
        self._resumed.set()

    def truncate(self, partition: int, offset: int) -> None:
        """Drop the uncommitted entries at and above `offset`."""
        self._check(partition)
        if offset < self._high_watermarks[partition]:
            raise ValueError(
                f"cannot truncate partition {partition} to {offset} below its high watermark "
                f"{self._high_watermarks[partition]}"
            )
        del self._entries[partition][offset:]
        batches = self._batches[partition]
        kept = [(base, count) for base, count in batches if base < offset]
        if kept:
            base, count = kept[-1]
            kept[-1] = (base, min(count, offset - base))
        batches[:] = kept

    def entries(self, partition: int) -> list[RawRecord]:
        return list(self._entries[self._check(partition)])

    def entries_between(self, partition: int, start: int, stop: int) -> list[RawRecord]:
        """The entries at offsets start..stop-1 (fewer past the end)."""
        return self._entries[self._check(partition)][start:stop]

    def end_offset(self, partition: int) -> int:
        return len(self._entries[self._check(partition)])

    def batches(self, partition: int) -> list[tuple[int, int]]:
        """(base_offset, record count) of every append stored in `partition`, oldest first."""
        return list(self._batches[self._check(partition)])

    def append_calls(self, partition: int) -> int:
        """Appends attempted on `partition`, failed and in-flight ones included."""
        return self._append_calls[self._check(partition)]

    def _set_high_watermark(self, partition: int, offset: int) -> None:
        if offset == self._high_watermarks[partition]:
            return
        self._high_watermarks[partition] = offset
        grown, self.grown = self.grown, asyncio.Event()
        grown.set()
        if self._listener is not None:
            self._listener(partition, offset)

    def _check(self, partition: int) -> int:
        if not 0 <= partition < self._num_partitions:
            raise ValueError(f"no partition {partition} (the log has {self._num_partitions})")
        return partition


class InMemoryLoader:
    """Reads an InMemoryPartitionWriter's committed records back."""

    def __init__(self, writer: InMemoryPartitionWriter) -> None:
        self._writer = writer
        self._failures = [0] * writer.num_partitions
        self._resumed = asyncio.Event()
        self._resumed.set()
        # (partition, start offset, end offset) of the latest loads that read, for tests.
        self.loads: deque[tuple[int, int, int]] = deque(maxlen=RECENT_READS)

    async def load(
        self, partition: int, sink: RecordSink, *, start_offset: int | None = None
    ) -> LoadSummary:
        writer = self._writer
        if not 0 <= partition < writer.num_partitions:
            raise LoadError(f"no partition {partition}")
        await self._resumed.wait()
        if writer.stopped is not None:
            raise LoadError(f"the log stopped: {writer.stopped}")
        if self._failures[partition]:
            self._failures[partition] -= 1
            raise LoadError(f"injected load failure on partition {partition}")
        end_offset = writer.high_watermark(partition)
        start = start_offset or 0
        if start > end_offset:
            raise LoadError(
                f"partition {partition} ends at {end_offset}, below the offset {start} to load from"
            )
        self.loads.append((partition, start, end_offset))
        total_bytes = 0
        for offset, (key, value) in enumerate(
            writer.entries_between(partition, start, end_offset), start
        ):
            total_bytes += len(key) + (0 if value is None else len(value))
            sink(offset, key, value)
        return LoadSummary(
            start_offset=start,
            end_offset=end_offset,
            records=end_offset - start,
            bytes=total_bytes,
        )

    def inject_load_failure(self, partition: int, count: int = 1) -> None:
        """Make the next `count` loads of `partition` raise LoadError."""
        if not 0 <= partition < self._writer.num_partitions:
            raise ValueError(f"no partition {partition}")
        self._failures[partition] += count

    def pause_loads(self) -> None:
        """Hold every load before it reads anything, until `resume_loads`."""
        self._resumed.clear()

    def resume_loads(self) -> None:
        self._resumed.set()


class InMemoryFollower:
    """Reads an InMemoryPartitionWriter's committed records as they commit (a LogFollower)."""

    def __init__(self, writer: InMemoryPartitionWriter) -> None:
        self._writer = writer
        # Per partition, the faults the next rounds answer: (why, lost) each.
        self._failures: list[deque[tuple[str, bool]]] = [
            deque() for _ in range(writer.num_partitions)
        ]
        # What the latest rounds asked for, for tests.
        self.rounds: deque[dict[int, int | None]] = deque(maxlen=RECENT_READS)

    async def follow(
        self,
        positions: Mapping[int, int | None],
        sink: FollowSink,
        *,
        max_wait_ms: int,
        max_bytes: int,
        min_bytes: int = 1,
    ) -> FollowResult:
        writer = self._writer
        if writer.stopped is not None:
            raise LoadError(f"the log stopped: {writer.stopped}")
        if not self._ready(positions):
            grown = writer.grown
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(grown.wait(), max_wait_ms / 1000)
        self.rounds.append(dict(positions))
        read: dict[int, int] = {}
        high_watermarks: dict[int, int] = {}
        retry: dict[int, str] = {}
        lost: dict[int, str] = {}
        budget = max_bytes
        for partition, position in positions.items():
            if not 0 <= partition < writer.num_partitions:
                lost[partition] = f"no partition {partition}"
                continue
            failures = self._failures[partition]
            if failures:
                why, is_lost = failures.popleft()
                (lost if is_lost else retry)[partition] = why
                continue
            start = position or 0
            high_watermark = writer.high_watermark(partition)
            if start > high_watermark:
                lost[partition] = f"the partition ends at {high_watermark}, below {start}"
                continue
            offset = start
            latest: LatestRecords = {}
            # At least one record a round, however large, as a Kafka fetch does.
            for key, value in writer.entries_between(partition, start, high_watermark):
                if budget <= 0 and offset > start:
                    break
                latest[key] = (offset, value)
                budget -= len(key) + (0 if value is None else len(value))
                offset += 1
            if offset > start:
                sink(partition, latest, offset)
            read[partition] = offset
            high_watermarks[partition] = high_watermark
        return FollowResult(read, high_watermarks, retry, lost)

    def _ready(self, positions: Mapping[int, int | None]) -> bool:
        """Whether a round would read or report something now."""
        writer = self._writer
        for partition, position in positions.items():
            if not 0 <= partition < writer.num_partitions or self._failures[partition]:
                return True
            if (position or 0) != writer.high_watermark(partition):
                return True
        return False

    def inject_follow_failure(
        self, partition: int, why: str = "injected", *, lost: bool = False, count: int = 1
    ) -> None:
        """Make the next `count` rounds report `partition` as to retry (or lost)."""
        if not 0 <= partition < self._writer.num_partitions:
            raise ValueError(f"no partition {partition}")
        self._failures[partition].extend((why, lost) for _ in range(count))


class InMemoryLog:
    """A CoordinatorLog kept in memory: its writer, and a loader and a follower over the same
    partitions."""

    def __init__(self, num_partitions: int, *, auto_commit: bool = True) -> None:
        self._writer = InMemoryPartitionWriter(num_partitions, auto_commit=auto_commit)
        self._loader = InMemoryLoader(self._writer)
        self._follower = InMemoryFollower(self._writer)
        self._failure_listener: LogFailureListener | None = None

    @property
    def num_partitions(self) -> int:
        return self._writer.num_partitions

    @property
    def writer(self) -> InMemoryPartitionWriter:
        return self._writer

    @property
    def loader(self) -> InMemoryLoader:
        return self._loader

    @property
    def follower(self) -> InMemoryFollower:
        return self._follower

    @property
    def failure(self) -> str | None:
        return self._writer.stopped

    def register_failure_listener(self, listener: LogFailureListener) -> None:
        self._failure_listener = listener

    def stop_for_good(self, reason: str) -> None:
        """Test control: the log stops as a Kafka log whose topic is lost does (appends
        fail with UNKNOWN_TOPIC_OR_PARTITION, loads fail, the failure listener hears it)."""
        if self._writer.stopped is not None:
            return
        self._writer.stopped = reason
        if self._failure_listener is not None:
            self._failure_listener(reason)

    async def start(self) -> None:
        """Nothing to connect to or create."""

    async def close(self) -> None:
        """Lets appends held by `pause_appends` go on, so nothing waits forever."""
        self._writer.resume_appends()
        self._loader.resume_loads()


__all__ = ["InMemoryFollower", "InMemoryLoader", "InMemoryLog", "InMemoryPartitionWriter"]
