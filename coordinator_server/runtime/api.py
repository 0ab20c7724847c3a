"""Types shared by the runtime and the pure state machines.

This module holds only types and protocols (no asyncio): it is the one runtime module the
pure layers (`groups/`, `offsets/`, `shard.py`) may import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from coordinator_server.records import CoordinatorRecord, decode_record
from coordinator_server.timeline import SnapshotRegistry

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class ResponseHandle:
    """A caller whose response comes later, from another operation.

    A parkable write operation (JoinGroup waiting for the join phase to end, a follower's
    SyncGroup waiting for the leader) gets the handle of its own caller, may keep it in the
    shard's state and answer with `park=True`; a later operation's result completes it
    through `completions`. The pure layers only store and pass handles around; whoever
    created one (the runtime, or a test context) knows how to complete it.
    """

    __slots__ = ("sink",)

    def __init__(self, sink: object) -> None:
        self.sink = sink

    def __repr__(self) -> str:
        return f"ResponseHandle({id(self):#x})"


EncodedRecord = tuple[bytes, bytes | None]
"""A record as the log holds it: key bytes and value bytes, or None for a tombstone."""

EncodedReplay = Callable[[int, int, int], None]
"""`replay(offset, start, stop)`: replay records start..stop-1, the first at `offset`."""


class EncodedRecords:
    """Records a write operation encoded itself, with the replay of any run of them.

    A write that emits many records of one kind (an OffsetCommit, one record per partition)
    can encode them in one tight loop and replay them in one call, instead of building a
    record object each for the runtime to encode and dispatch one at a time. The operation
    owes the runtime two things:

    - `records[i]` are the exact bytes the log holds for the i-th record (the documented
      format: a load decodes them like any other record);
    - `replay(offset, start, stop)` changes the shard exactly as `CoordinatorShard.replay`
      of records start..stop-1, decoded from those bytes, at offsets `offset`,
      `offset + 1`, ... would, one after the other. So a load of the log rebuilds the
      state the live path built.

    The runtime calls `replay` right after the operation returns, under the snapshot epoch of
    the batch the records land in: once for all of them, or once per batch, in order, when
    a write that is not atomic spills into a new batch. Each record is replayed once. The
    changes are then tracked like any replay's: reverted with the batch when its append
    fails, invisible to reads until the batch is committed.
    """

    __slots__ = ("records", "replay")

    def __init__(self, records: Sequence[EncodedRecord], replay: EncodedReplay) -> None:
        self.records = records
        self.replay = replay

    def __repr__(self) -> str:
        return f"EncodedRecords({len(self.records)} records)"


@dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    """What a write operation returns: records to append and the response to give once
    they are committed.

    The operation itself changes nothing: the runtime replays `records` into the shard
    (the only place state changes), appends them, and completes the caller's future with
    `response` once the log's high watermark has passed them. `atomic` asks for all the
    records to land in one batch.

    - `encoded`: the records already encoded, with their replay (see EncodedRecords),
      instead of `records`; a result carries one or the other. Everything said of
      `records` here holds for them.
    - `updates`: in-memory state changes that are not logged (a classic group's members
      and their parked requests between two GroupMetadata records). The runtime applies
      them through `shard.apply` right after the records, under the same snapshot epoch,
      so a failed append reverts them with the records.
    - `replay_records=False`: the records are only appended; `updates` already carry the
      state they describe.
    - `park`: the caller's response comes later through a completion of its handle
      (parkable writes only); `response` is ignored.
    - `completions`: (handle, response or ApiError) pairs delivered once this result's
      records (or, with none, every pending write) are committed; a failed append fails
      them with its error instead.
    - `on_append_failure`: a write operation the runtime runs after reverting, when the
      append of these records fails (a SyncGroup whose assignment could not be persisted
      starts a new rebalance).
    """

    records: Sequence[CoordinatorRecord] = ()
    response: T | None = None
    atomic: bool = False
    updates: Sequence[object] = ()
    replay_records: bool = True
    park: bool = False
    completions: Sequence[tuple[ResponseHandle, object]] = ()
    on_append_failure: Callable[[], CoordinatorResult[Any]] | None = None
    encoded: EncodedRecords | None = None


class Clock(Protocol):
    """Time as the pure layers see it."""

    def now_ms(self) -> int: ...


TimeoutOperation = Callable[[], CoordinatorResult[Any]]
"""What a timer runs when it fires: a write operation on the timer's partition."""


class CoordinatorTimer(Protocol):
    """Per-partition timers keyed by name; each fires as a write operation."""

    def schedule(
        self,
        key: str,
        delay_ms: int,
        operation: TimeoutOperation,
        *,
        retry: bool = False,
        retry_backoff_ms: int | None = None,
    ) -> None:
        """Arm `key` to run `operation` after `delay_ms`, replacing any timer of that key.

        With `retry`, an operation that fails is run again after the back-off.
        """
        ...

    def schedule_if_absent(
        self,
        key: str,
        delay_ms: int,
        operation: TimeoutOperation,
        *,
        retry: bool = False,
        retry_backoff_ms: int | None = None,
    ) -> None:
        """Like `schedule`, but leaves an armed timer of the same key alone."""
        ...

    def reschedule(self, key: str, delay_ms: int) -> bool:
        """Move the armed timer of `key` to fire `delay_ms` from now, keeping its operation
        and retry settings. False, with nothing changed, when no timer of `key` is armed
        (none, or it has fired and its operation is queued): then `schedule` is needed.

        A session timer is pushed back on every heartbeat; this spares building an
        operation that would be the same as the one the timer holds.
        """
        ...

    def cancel(self, key: str) -> None: ...

    def is_scheduled(self, key: str) -> bool: ...

    def size(self) -> int: ...


@dataclass(slots=True)
class ShardContext:
    """What a shard is built with."""

    partition: int
    clock: Clock
    timer: CoordinatorTimer
    snapshot_registry: SnapshotRegistry = field(default_factory=SnapshotRegistry)


class LoadReplay(Protocol):
    """Where a load hands a partition's records, as the log holds them (a shard's
    `load_replay()` makes one). It may hold records back: `close` replays them, and the
    runtime calls it before the partition becomes ACTIVE."""

    def __call__(self, offset: int, key: bytes, value: bytes | None) -> None: ...

    def close(self) -> None: ...


class DecodingReplay:
    """The plain LoadReplay: each record decoded into a record object and replayed at once.
    GroupCoordinatorShard has its own, cheaper for offset commits."""

    __slots__ = ("_shard",)

    def __init__(self, shard: CoordinatorShard) -> None:
        self._shard = shard

    def __call__(self, offset: int, key: bytes, value: bytes | None) -> None:
        self._shard.replay(offset, decode_record(key, value))

    def close(self) -> None:
        pass


class CoordinatorShard(Protocol):
    """A partition's state machine, as the runtime drives it."""

    def replay(self, offset: int, record: CoordinatorRecord) -> None:
        """Apply one record (live write or load) to the state: the only place it changes."""
        ...

    def apply(self, update: object) -> None:
        """Apply one in-memory update of a CoordinatorResult (never logged)."""
        ...

    def load_replay(self) -> LoadReplay:
        """Where a load of the partition hands its records (DecodingReplay, or the shard's
        own way of decoding them)."""
        ...

    def on_loaded(self) -> None:
        """The partition is ACTIVE: re-arm timers and periodic jobs."""
        ...

    def on_unloaded(self) -> None:
        """The partition is going away: release what it holds."""
        ...


ShardBuilder = Callable[[ShardContext], CoordinatorShard]
