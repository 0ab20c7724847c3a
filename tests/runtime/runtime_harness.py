"""A runtime on an in-memory log and a manual clock, with a small key-value shard.

`KeyValueShard` stores key -> int in a TimelineDict; its writes emit OffsetCommit records
(group = the key, offset = the value; a tombstone deletes), as record objects or, with
`run=True`, as one KeyValueRun, which its `replay` sets in one go. The log does
not commit by itself (`auto_commit=False`): a test moves the high watermark with `commit`,
so responses stay parked until it does. `settle` lets the event loop run until the runtime
has nothing left to do that needs no clock or commit.

The default config is the server's (`RuntimeConfig()`): writes run at once on an idle
partition. Tests of the queue itself ask for `run_when_idle=False`; with `manual=True` the
partitions' queued events run only when the test polls `processor`, one at a time.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from coordinator_server.records import (
    CoordinatorRecord,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_record,
    new_offset_commit_record,
    new_offset_commit_tombstone_record,
)
from coordinator_server.runtime.api import (
    CoordinatorResult,
    DecodingReplay,
    RecordRun,
    ResponseHandle,
    ShardContext,
)
from coordinator_server.runtime.batch import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.event_processor import EventProcessor, ManualEventProcessor
from coordinator_server.runtime.events import WriteOutcome
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.storage.memory import InMemoryLog
from coordinator_server.timeline import TimelineDict

TOPIC = "t"


def put_record(key: str, value: int) -> CoordinatorRecord:
    return new_offset_commit_record(key, TOPIC, 0, value, 0, "", 0)


def delete_record(key: str) -> CoordinatorRecord:
    return new_offset_commit_tombstone_record(key, TOPIC, 0)


def record_bytes(record: CoordinatorRecord) -> int:
    """What a record counts for against max_batch_bytes."""
    key, value = encode_record(record)
    return len(key) + (0 if value is None else len(value)) + RECORD_OVERHEAD_BYTES


def batch_bytes_for(*records: CoordinatorRecord) -> int:
    """The smallest max_batch_bytes that holds exactly these records."""
    return BATCH_OVERHEAD_BYTES + sum(record_bytes(record) for record in records)


class KeyValueRun(RecordRun):
    """Records start..stop-1 of `records` as one run (they stay indexed as in the write that
    made them, so that a test sees which part of it each replay had)."""

    __slots__ = ("records", "start", "stop")

    def __init__(
        self, records: list[CoordinatorRecord], start: int = 0, stop: int | None = None
    ) -> None:
        self.records = records
        self.start = start
        self.stop = len(records) if stop is None else stop

    def __len__(self) -> int:
        return self.stop - self.start

    def encode(self) -> list[tuple[bytes, bytes | None]]:
        return [encode_record(record) for record in self.records[self.start : self.stop]]

    def slice(self, start: int, stop: int) -> KeyValueRun:
        assert 0 <= start <= stop <= len(self)
        return KeyValueRun(self.records, self.start + start, self.start + stop)


class KeyValueShard:
    """key -> int over a TimelineDict; each write emits one OffsetCommit record per key."""

    def __init__(self, context: ShardContext) -> None:
        self.context = context
        self.store: TimelineDict[str, int] = TimelineDict(context.snapshot_registry)
        self.replayed: list[tuple[int, str]] = []
        # (offset, start, stop, the registry's epoch) of each replay of a run: which records
        # of the write that made it (start..stop-1), from which offset on, under which epoch.
        self.run_replays: list[tuple[int, int, int, int]] = []
        self.fail_replay_of: set[str] = set()
        self.loaded = 0
        self.unloaded = 0
        self.on_loaded_hook: Callable[[KeyValueShard], None] | None = None

    def replay(self, offset: int, record: CoordinatorRecord | RecordRun) -> None:
        if isinstance(record, KeyValueRun):
            self._replay_run(offset, record)
            return
        assert isinstance(record, CoordinatorRecord)
        key = record.key
        assert isinstance(key, OffsetCommitKey)
        if key.group in self.fail_replay_of:
            raise RuntimeError(f"cannot replay {key.group}")
        self.replayed.append((offset, key.group))
        if record.value is None:
            self.store.pop(key.group)
        else:
            assert isinstance(record.value, OffsetCommitValue)
            self.store[key.group] = record.value.offset

    def _replay_run(self, offset: int, run: KeyValueRun) -> None:
        """A run sets each stretch of puts with one `set_all` (a tombstone pops its key)."""
        self.run_replays.append((offset, run.start, run.stop, self.context.snapshot_registry.epoch))
        puts: list[tuple[str, int]] = []
        for index, record in enumerate(run.records[run.start : run.stop]):
            key = record.key
            assert isinstance(key, OffsetCommitKey)
            if key.group in self.fail_replay_of:
                raise RuntimeError(f"cannot replay {key.group}")
            self.replayed.append((offset + index, key.group))
            if record.value is None:
                self.store.set_all(puts)
                puts = []
                self.store.pop(key.group)
            else:
                assert isinstance(record.value, OffsetCommitValue)
                puts.append((key.group, record.value.offset))
        self.store.set_all(puts)

    def apply(self, update: object) -> None:
        """In-memory updates: ("set", key, value) or ("del", key), never logged."""
        assert isinstance(update, tuple)
        if update[0] == "set":
            self.store[update[1]] = update[2]
        elif update[0] == "del":
            self.store.pop(update[1])
        else:
            raise ValueError(f"bad update {update!r}")

    def load_replay(self) -> DecodingReplay:
        return DecodingReplay(self)

    def on_loaded(self) -> None:
        self.loaded += 1
        if self.on_loaded_hook is not None:
            self.on_loaded_hook(self)

    def on_unloaded(self) -> None:
        self.unloaded += 1

    def committed(self, offset: int) -> dict[str, int]:
        return dict(self.store.items_at(offset))

    def latest(self) -> dict[str, int]:
        return dict(self.store.items())


def put(key: str, value: int, response: Any = None) -> Callable[[KeyValueShard], Any]:
    """A write operation storing key=value, answering `response` (default "put key=value")."""
    answer = f"put {key}={value}" if response is None else response

    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult([put_record(key, value)], answer)

    return op


def put_many(
    items: dict[str, int], *, atomic: bool = False, response: Any = "ok", run: bool = False
) -> Callable[[KeyValueShard], CoordinatorResult[Any]]:
    """A write operation storing every key=value, as record objects or as one run."""

    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        records = [put_record(k, v) for k, v in items.items()]
        if run:
            return CoordinatorResult(KeyValueRun(records), response, atomic=atomic)
        return CoordinatorResult(records, response, atomic=atomic)

    return op


def get_latest(key: str) -> Callable[[KeyValueShard], CoordinatorResult[int | None]]:
    """A write operation with no records: reads the latest state, answers after pending writes."""

    def op(shard: KeyValueShard) -> CoordinatorResult[int | None]:
        return CoordinatorResult((), shard.store.get(key))

    return op


def get_committed(key: str) -> Callable[[KeyValueShard, int], int | None]:
    def op(shard: KeyValueShard, offset: int) -> int | None:
        return shard.store.get_at(key, offset)

    return op


def as_future(outcome: WriteOutcome[Any]) -> asyncio.Future[Any]:
    """A write's outcome as a future (done already when the write is over)."""
    if outcome.future is not None:
        return outcome.future
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    if outcome.error is None:
        future.set_result(outcome.response)
    else:
        future.set_exception(outcome.error)
    return future


async def settle(rounds: int = 50) -> None:
    """Let the loop run the runtime's tasks (drain, append, load) to quiescence."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class SharedLog:
    """One in-memory log for several runtimes, as the nodes of a cluster share a Kafka log:
    each runtime gets a view of the writer (`writer_view`) on which it registers its own
    listeners, and every one of them hears every high watermark."""

    def __init__(self, log: InMemoryLog) -> None:
        self.log = log
        self._listeners: list[Callable[[int, int], None]] = []
        self._ready_listeners: list[Callable[[], None]] = []
        log.writer.register_listener(self._high_watermark)
        log.writer.register_ready_listener(self._ready)

    def _high_watermark(self, partition: int, offset: int) -> None:
        for listener in self._listeners:
            listener(partition, offset)

    def _ready(self) -> None:
        for listener in self._ready_listeners:
            listener()

    def writer_view(self) -> _WriterView:
        return _WriterView(self)


class _WriterView:
    def __init__(self, shared: SharedLog) -> None:
        self._shared = shared
        self._writer = shared.log.writer

    def append(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> asyncio.Future[int]:
        return self._writer.append(partition, records)

    def backlogged(self, partition: int) -> bool:
        return self._writer.backlogged(partition)

    def register_ready_listener(self, listener: Callable[[], None]) -> None:
        self._shared._ready_listeners.append(listener)

    def register_listener(self, listener: Callable[[int, int], None]) -> None:
        self._shared._listeners.append(listener)

    def high_watermark(self, partition: int) -> int:
        return self._writer.high_watermark(partition)


class Harness:
    def __init__(
        self,
        *,
        num_partitions: int = 3,
        config: RuntimeConfig | None = None,
        auto_commit: bool = False,
        manual: bool = False,
        shared: SharedLog | None = None,
        may_serve: Callable[[], bool] | None = None,
    ) -> None:
        """`shared`: run on that log, beside the runtimes of other harnesses on it (its
        partition count and auto commit are the log's)."""
        self.log = (
            InMemoryLog(num_partitions, auto_commit=auto_commit) if shared is None else shared.log
        )
        self.writer = self.log.writer
        self.loader = self.log.loader
        self.follower = self.log.follower
        self.clock = ManualClock(start_ms=1_000)
        self.config = config or RuntimeConfig()
        self.shards: dict[int, list[KeyValueShard]] = defaultdict(list)
        # Run by the shards of a partition when they become active.
        self.on_loaded_hooks: dict[int, Callable[[KeyValueShard], None]] = {}
        self._written: list[asyncio.Future[Any]] = []
        self.runtime: CoordinatorRuntime[KeyValueShard] = CoordinatorRuntime(
            shard_builder=self._build,
            writer=self.writer if shared is None else shared.writer_view(),
            loader=self.loader,
            follower=self.follower,
            clock=self.clock,
            config=self.config,
            event_processor=ManualEventProcessor if manual else EventProcessor,
            may_serve=may_serve,
        )
        # With `manual`, queued events run only when the test polls this processor.
        self.processor = self.runtime.event_processor

    def _build(self, context: ShardContext) -> KeyValueShard:
        shard = KeyValueShard(context)
        shard.on_loaded_hook = self.on_loaded_hooks.get(context.partition)
        self.shards[context.partition].append(shard)
        return shard

    def shard(self, partition: int = 0) -> KeyValueShard:
        """The newest shard built for `partition`."""
        return self.shards[partition][-1]

    async def load(self, partition: int = 0, epoch: int = 0) -> KeyValueShard:
        self.runtime.schedule_load(partition, epoch)
        await self.runtime.wait_loaded(partition)
        return self.shard(partition)

    def write(
        self, partition: int, op: Callable[[KeyValueShard], Any], **kwargs: Any
    ) -> asyncio.Future[Any]:
        future = self.runtime.schedule_write("test-write", partition, op, **kwargs)
        self._written.append(future)
        return future

    def put(self, partition: int, key: str, value: int, **kwargs: Any) -> asyncio.Future[Any]:
        return self.write(partition, put(key, value), **kwargs)

    def parkable_write(
        self, name: str, partition: int, op: Callable[[KeyValueShard, ResponseHandle], Any]
    ) -> asyncio.Future[Any]:
        """A write that may park its caller, answered as a future."""
        future = as_future(self.runtime.parkable_write(name, partition, op))
        self._written.append(future)
        return future

    async def read(self, partition: int, key: str) -> int | None:
        value: int | None = await self.runtime.schedule_read(
            "test-read", partition, get_committed(key)
        )
        return value

    def commit(self, partition: int = 0, offset: int | None = None) -> None:
        self.writer.commit(partition, offset)

    def committed_state(self, partition: int = 0) -> dict[str, int]:
        offset = self.runtime.last_committed_offset(partition)
        assert offset is not None
        return self.shard(partition).committed(offset)

    async def close(self) -> None:
        self.runtime.close()
        self.writer.resume_appends()
        self.loader.resume_loads()
        await settle()
        # Writes a test left waiting fail at close; their errors are expected, not news.
        for future in self._written:
            if future.done() and not future.cancelled():
                future.exception()
