"""Types shared by the runtime and the pure state machines.

This module holds types and protocols, and the two functions that encode a result's records
and replay them through the shard's one dispatch (no asyncio): it is the one runtime module
the pure layers (`groups/`, `offsets/`, `shard/`) may import.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from coordinator_server.records import CoordinatorRecord, decode_record, encode_record
from coordinator_server.timeline import SnapshotRegistry

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request: the header's client id, the peer's address as Kafka writes
    it ("/1.2.3.4"), and the principal its connection authenticated as (Kafka's
    "User:ANONYMOUS" where nobody authenticated)."""

    client_id: str
    client_host: str
    principal: str = "User:ANONYMOUS"


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


class RecordRun(ABC):
    """Records that follow each other in the log, which the shard replays as one.

    A write that emits many records of one kind (an OffsetCommit, one record per partition)
    can return them as a run: built in one loop, encoded in one call, and replayed in one
    `CoordinatorShard.replay(offset, run)` instead of one call per record object. A load
    reads such records back as runs of its own and hands them to the same `replay`, so a
    run is one more record type of the shard's one dispatch, not a way around it. A run
    owes the runtime:

    - `encode()`: the exact bytes the log holds for each of its records, in order (the
      documented format: a load decodes them like any other record);
    - `replay(offset, run)` changes the shard exactly as replaying its records, decoded from
      those bytes, one by one from `offset` on would (a loaded run's records follow each
      other in the log, with the gaps compaction left between them);
    - `slice(start, stop)`: the run of records start..stop-1, for a write that is not
      atomic and spills into a new batch (each part is replayed under its own batch's
      snapshot epoch).
    """

    __slots__ = ()

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def encode(self) -> Sequence[EncodedRecord]: ...

    @abstractmethod
    def slice(self, start: int, stop: int) -> RecordRun: ...


Records = Sequence[CoordinatorRecord] | RecordRun
"""What a write emits: record objects, or one run of records."""


def encode_records(records: Records) -> Sequence[EncodedRecord]:
    """The bytes the log holds for `records`, one pair per record."""
    if isinstance(records, RecordRun):
        return records.encode()
    return [encode_record(record) for record in records]


def replay_records(
    shard: CoordinatorShard,
    offset: int,
    records: Records,
    start: int = 0,
    stop: int | None = None,
) -> None:
    """Replay records start..stop-1 of `records` (stop None: all of them from `start`), the
    first at `offset`, through the shard's one dispatch: a run in one call, record objects
    one at a time."""
    if isinstance(records, RecordRun):
        if start != 0 or stop is not None:
            records = records.slice(start, len(records) if stop is None else stop)
        shard.replay(offset, records)
        return
    replay = shard.replay
    for index in range(start, len(records) if stop is None else stop):
        replay(offset + index - start, records[index])


@dataclass(slots=True)
class CoordinatorResult(Generic[T]):
    """What a write operation returns: records to append and the response to give once
    they are committed (Kafka's CoordinatorResult: records, response, isAtomic, and what its
    appendFuture is used for).

    The operation itself changes nothing: the runtime replays `records` into the shard
    through its one dispatch (`CoordinatorShard.replay`, the same one a load feeds), appends
    them, and completes the caller's future with `response` once the log's high watermark
    has passed them. `records` are record objects or one RecordRun (an OffsetCommit's
    records, encoded and replayed as one); everything said of them here holds for both.
    Every record is replayed: Kafka's `replayRecords=false` has no counterpart, since what it
    is for (a classic group already changed in place) is `updates` here.

    What else a result carries, and why it cannot be a record:

    - `atomic`: all the records land in one batch (an OffsetCommit's): how they are
      appended, not what they say.
    - `updates`: in-memory state changes that are not logged, applied through `shard.apply`
      right after the records' replay, under the same snapshot epoch, so a failed append
      reverts them with the records. A classic group holds state no record has: its members
      between two GroupMetadata records (who is joining, their protocols, the rebalance's
      progress) and their parked requests. Kafka keeps the same state in memory only and
      changes it in place in its handlers; here the handlers are pure, so they return the
      group's next snapshot instead, and the log still holds exactly what Kafka's does.
    - `park`: the caller's response comes later through a completion of its handle
      (parkable writes only; `response` is ignored): a JoinGroup waits for the join phase
      to end, a follower's SyncGroup for its leader, as Kafka parks their futures.
    - `completions`: (handle, response or ApiError) pairs delivered once this result's
      records (or, with none, every pending write) are committed, and failed with the
      append's error if it fails: answers to other callers, parked earlier, that this
      write releases (Kafka completes them from the append future).
    - `on_append_failure`: a write operation the runtime runs after reverting, when the
      append of these records fails (a SyncGroup whose assignment could not be persisted
      starts a new rebalance; Kafka's handlers do it in the append future's callback).
    """

    records: Records = ()
    response: T | None = None
    atomic: bool = False
    updates: Sequence[object] = ()
    park: bool = False
    completions: Sequence[tuple[ResponseHandle, object]] = ()
    on_append_failure: Callable[[], CoordinatorResult[Any]] | None = None


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
    LogPartitionShard has its own, cheaper for offset commits."""

    __slots__ = ("_shard",)

    def __init__(self, shard: CoordinatorShard) -> None:
        self._shard = shard

    def __call__(self, offset: int, key: bytes, value: bytes | None) -> None:
        self._shard.replay(offset, decode_record(key, value))

    def close(self) -> None:
        pass


class CoordinatorShard(Protocol):
    """A partition's state machine, as the runtime drives it."""

    def replay(self, offset: int, record: CoordinatorRecord | RecordRun) -> None:
        """Apply one record, or one run of records from `offset` on (live write or load), to
        the state: the one dispatch through which records change it."""
        ...

    def apply(self, update: object) -> None:
        """Apply one in-memory update of a CoordinatorResult (never logged; see
        CoordinatorResult.updates), after the result's records were replayed."""
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
