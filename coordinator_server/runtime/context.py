"""A partition's context: its lifecycle state machine and everything held for it.

This is Kafka's `CoordinatorContext`, with what Kafka keeps in its `SnapshottableCoordinator`
(the shard, its snapshot registry and the last written and committed offsets) held here
too: those offsets outlive the shard (a FAILED partition still reports them) and the write
path reads them on every call.

Lifecycle (Kafka's `CoordinatorState`). Loads and unloads carry the partition leader epoch
and are ignored when stale. A load builds a fresh shard, replays the committed log into it
and goes ACTIVE; requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS, and any other
non-ACTIVE state gets NOT_COORDINATOR. An unload cancels the partition's timers and fails
every parked or queued operation with NOT_COORDINATOR.

STANDBY is ours, not Kafka's: a warm standby, whose shard follows the log while another
node serves the partition (see `standby`). It serves nothing (NOT_COORDINATOR, as for a
partition not hosted); a load makes it LOADING, reading only what its shard has not seen.

Offsets. `last_written_offset` is the end of every batch sealed (in flight or waiting); the
open batch's records lie above it. `last_committed_offset` follows the high watermark down to
the last batch boundary below it, since the snapshot registry's epoch is the base offset of
the batch being filled: state can be read, and reverted, as of batch boundaries only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from coordinator_protocol.errors import (
    ApiError,
    CoordinatorLoadInProgressError,
    NotCoordinatorError,
)
from coordinator_server.runtime.api import CoordinatorShard
from coordinator_server.runtime.batch import CoordinatorBatch
from coordinator_server.runtime.deferred import DeferredEventCollection
from coordinator_server.runtime.event_processor import EventQueue
from coordinator_server.runtime.events import CoordinatorEvent, ParkedCaller
from coordinator_server.runtime.timer import PartitionTimer
from coordinator_server.timeline import SnapshotRegistry


class CoordinatorState(Enum):
    """A partition context's lifecycle state (Kafka's `CoordinatorState`)."""

    INITIAL = "INITIAL"
    STANDBY = "STANDBY"
    LOADING = "LOADING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    CLOSED = "CLOSED"

    def can_transition_from(self, previous: CoordinatorState) -> bool:
        return previous in _ALLOWED_PREVIOUS[self]


_ALLOWED_PREVIOUS: dict[CoordinatorState, frozenset[CoordinatorState]] = {
    CoordinatorState.INITIAL: frozenset(),
    CoordinatorState.STANDBY: frozenset({CoordinatorState.INITIAL}),
    CoordinatorState.LOADING: frozenset(
        {CoordinatorState.INITIAL, CoordinatorState.FAILED, CoordinatorState.STANDBY}
    ),
    CoordinatorState.ACTIVE: frozenset({CoordinatorState.LOADING, CoordinatorState.ACTIVE}),
    CoordinatorState.FAILED: frozenset({CoordinatorState.LOADING, CoordinatorState.ACTIVE}),
    CoordinatorState.CLOSED: frozenset(CoordinatorState),
}


class IllegalStateError(RuntimeError):
    """A lifecycle transition that Kafka's state machine does not allow."""


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """A partition's counters at one moment, for metrics and tests."""

    partition: int
    state: CoordinatorState
    epoch: int
    last_written_offset: int
    last_committed_offset: int
    queued_events: int
    parked_operations: int
    """Writes waiting for the high watermark (ones that timed out meanwhile included)."""
    open_batch_records: int
    open_batch_bytes: int
    pending_batches: int
    """Sealed batches, the one in flight included."""
    batches_appended: int
    records_appended: int
    bytes_appended: int
    last_batch_records: int
    last_batch_bytes: int
    append_failures: int
    timers: int
    high_watermark: int = 0
    """The latest high watermark the log reported (a standby's lag is this minus its
    last committed offset, the offset it has read to)."""


class CoordinatorContext:
    """Everything the runtime holds for one partition."""

    __slots__ = (
        "append_failures",
        "append_future",
        "batch_ends",
        "batch_epoch",
        "batches_appended",
        "bytes_appended",
        "deferred",
        "epoch",
        "failing_since_ms",
        "generation",
        "inflight",
        "last_batch_bytes",
        "last_batch_records",
        "last_committed_offset",
        "last_written_offset",
        "latest_high_watermark",
        "load_announced",
        "load_task",
        "log",
        "loop",
        "open_batch",
        "parked_callers",
        "partition",
        "queue",
        "records_appended",
        "registry",
        "sealed",
        "shard",
        "state",
        "state_waiters",
        "timer",
    )

    def __init__(
        self,
        partition: int,
        loop: asyncio.AbstractEventLoop,
        deferred: DeferredEventCollection,
        open_queue: Callable[[CoordinatorContext], EventQueue[CoordinatorEvent]],
        log: logging.Logger,
    ) -> None:
        self.partition = partition
        # Kept because asyncio.get_running_loop() costs a getpid() system call each time,
        # and writes need the loop on their busiest paths.
        self.loop = loop
        self.log = log
        self.state = CoordinatorState.INITIAL
        # Set by `announce_load`: the partition is to load here once acquired.
        self.load_announced = False
        self.epoch = -1
        # Bumped whenever the shard is thrown away, so that loads and appends started for
        # an older shard find out and drop their results.
        self.generation = 0
        self.shard: CoordinatorShard | None = None
        self.registry: SnapshotRegistry | None = None
        self.timer: PartitionTimer | None = None
        self.load_task: asyncio.Task[None] | None = None
        self.last_written_offset = 0
        self.last_committed_offset = 0
        # The latest high watermark the log reported. It commits only what this runtime's
        # appends have returned: a high watermark that arrives while an append is in flight
        # is applied when that append returns (see BatchAppender.on_high_watermark).
        self.latest_high_watermark = 0
        self.open_batch: CoordinatorBatch | None = None
        self.sealed: deque[CoordinatorBatch] = deque()
        self.inflight: CoordinatorBatch | None = None
        self.append_future: asyncio.Future[int] | None = None
        self.batch_epoch = 0
        # End offsets of the sealed batches not committed yet, oldest first.
        self.batch_ends: deque[int] = deque()
        # Writes waiting for the high watermark.
        self.deferred = deferred
        self.state_waiters: list[asyncio.Future[None]] = []
        # Callers of parkable writes still waiting for a completion.
        self.parked_callers: set[ParkedCaller] = set()
        self.batches_appended = 0
        self.records_appended = 0
        self.bytes_appended = 0
        self.last_batch_records = 0
        self.last_batch_bytes = 0
        self.append_failures = 0
        # When the appends started failing, every one since (None: the last one worked).
        self.failing_since_ms: int | None = None
        self.queue = open_queue(self)

    def transition_to(self, state: CoordinatorState) -> None:
        """Move to `state`, waking whoever waits for the partition to leave LOADING or
        ACTIVE.

        Raises:
            IllegalStateError: Kafka's state machine does not allow it.
        """
        if not state.can_transition_from(self.state):
            raise IllegalStateError(
                f"partition {self.partition} cannot go from {self.state.name} to {state.name}"
            )
        self.log.debug("partition=%d %s -> %s", self.partition, self.state.name, state.name)
        self.state = state
        if state is not CoordinatorState.LOADING and self.state_waiters:
            waiters, self.state_waiters = self.state_waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    @property
    def loading(self) -> bool:
        """Whether the partition loads here, or is announced to (`announce_load`)."""
        return self.state is CoordinatorState.LOADING or (
            self.load_announced
            and (self.state is CoordinatorState.INITIAL or self.state is CoordinatorState.STANDBY)
        )

    def not_active_error(self) -> ApiError:
        """What an operation gets while the partition is not ACTIVE."""
        if self.state is CoordinatorState.LOADING:
            return CoordinatorLoadInProgressError(f"partition {self.partition} is loading")
        if self.loading:
            return CoordinatorLoadInProgressError(
                f"partition {self.partition} is being taken over here"
            )
        return NotCoordinatorError(f"partition {self.partition} is {self.state.name}")

    def stats(self) -> PartitionStats:
        batch = self.open_batch
        return PartitionStats(
            partition=self.partition,
            state=self.state,
            epoch=self.epoch,
            last_written_offset=self.last_written_offset,
            last_committed_offset=self.last_committed_offset,
            queued_events=len(self.queue),
            parked_operations=len(self.deferred),
            open_batch_records=0 if batch is None else len(batch.records),
            open_batch_bytes=0 if batch is None else batch.size_bytes,
            pending_batches=len(self.sealed) + (self.inflight is not None),
            batches_appended=self.batches_appended,
            records_appended=self.records_appended,
            bytes_appended=self.bytes_appended,
            last_batch_records=self.last_batch_records,
            last_batch_bytes=self.last_batch_bytes,
            append_failures=self.append_failures,
            timers=0 if self.timer is None else self.timer.size(),
            high_watermark=self.latest_high_watermark,
        )


FailPartition = Callable[[CoordinatorContext, BaseException], None]
"""Make the partition FAILED, failing whatever waits on it with the error."""

ReloadPartition = Callable[[CoordinatorContext], None]
"""The log and the state diverged: make the partition FAILED and load it again."""


__all__ = [
    "CoordinatorContext",
    "CoordinatorState",
    "FailPartition",
    "IllegalStateError",
    "PartitionStats",
    "ReloadPartition",
]
