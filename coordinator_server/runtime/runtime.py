"""The coordinator runtime: one replicated state machine ("shard") per log partition.

This is Kafka's `CoordinatorRuntime` on asyncio. Each partition the runtime hosts has a
context holding its lifecycle state and epoch, its shard and snapshot registry, its timers,
a serial event queue and its write batches.

Write operations. `schedule_write` queues an operation on the partition's queue; one task
per partition drains the queue, so two operations of a partition never interleave while
partitions run independently. An operation is a pure function of the shard: it returns a
`CoordinatorResult(records, response)` and changes nothing itself. The runtime replays the
records into the shard at once (so the next operation sees them; this is the only place
state changes), adds them to the partition's open batch, and parks the caller's future at
the offset just after its last record. When the log's high watermark reaches that offset the
future completes with the response. A write that returns no records is a read of the latest
state: it completes at once when nothing is pending, else once every pending write is
committed, so a caller never sees state that could still be rolled back.

An operation may also return its records already encoded, with a replay of its own for any
run of them (`CoordinatorResult.encoded`, see `EncodedRecords`): the runtime then appends the
bytes as they are and calls that replay once per batch the records land in, in place of one
`shard.replay` per record object. Everything else (parking, batching, revert) is the same.

Batches. Records of consecutive operations share one open batch. The open batch is flushed
(handed to the writer) by the linger policy: adaptively (the default) by a flush event queued
at the end of the queue when the batch opens, so it goes out once the operations already
queued have run; after a fixed linger; or after each write. A batch that fills up is sealed
at once. Only one append per partition is in flight: while it is, the open batch keeps
taking records even when a flush was asked for (group commit), and sealed batches wait
behind it in order. When the append completes, the next sealed batch, or else the open batch
if its flush is due, goes out.

Offsets. `last_written_offset` is the end of every batch sealed (in flight or waiting); the
open batch's records lie above it. `last_committed_offset` follows the high watermark down to
the last batch boundary below it, since the snapshot registry's epoch is the base offset of
the batch being filled: state can be read, and reverted, as of batch boundaries only.
`revert_to(base)` undoes exactly one batch and everything after it, and reads see the state
as of `last_committed_offset`. Parked writes with the default timeout share one clock
callback per partition; a write with its own timeout has its own.

Failures. A failed append reverts the shard to the failed batch's base offset and fails
every operation parked above it (that batch, the sealed and open batches written on top of
it, and the no-record writes waiting on them) with the append's exception; batches appended
before it stay parked, since their records are in the log. With a writer whose append
returns only once committed, that base is the last committed offset. A replay that raises
fails the open batch the same way. An append that returns another end offset than the one
the shard was written for, or a high watermark past `last_written_offset`, means the log and
the state diverged (someone else wrote, or a failed append landed after all): the partition
goes FAILED, every parked operation fails with NOT_COORDINATOR, and the partition reloads
from the log. A partition whose appends have all failed for `append_failure_timeout_ms` (one
that succeeds starts the count again) goes FAILED too, instead of failing every write while
it looks healthy; whoever loaded it decides when to load it again (the app, with back-off).

Lifecycle (Kafka's `CoordinatorState`). Loads and unloads carry the partition leader epoch
and are ignored when stale. A load builds a fresh shard, replays the committed log into it
and goes ACTIVE; requests meanwhile get COORDINATOR_LOAD_IN_PROGRESS, and any other
non-ACTIVE state gets NOT_COORDINATOR. An unload cancels the partition's timers and fails
every parked or queued operation with NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, cast

from coordinator_server.records import CoordinatorRecord, encode_record
from coordinator_server.runtime.api import (
    CoordinatorResult,
    CoordinatorShard,
    EncodedReplay,
    ResponseHandle,
    ShardBuilder,
    TimeoutOperation,
)
from coordinator_server.runtime.batch import (
    BATCH_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    CoordinatorBatch,
    record_sizes,
)
from coordinator_server.runtime.clock import RuntimeClock
from coordinator_server.runtime.config import RUNTIME_DEFAULTS, RuntimeConfig
from coordinator_server.runtime.context import (
    CoordinatorContext,
    CoordinatorState,
    PartitionStats,
)
from coordinator_server.runtime.deferred import DeferredEventCollection
from coordinator_server.runtime.event_processor import EventProcessor, EventQueue
from coordinator_server.runtime.events import (
    BarrierEvent,
    CoordinatorEvent,
    FlushEvent,
    ParkedCaller,
    WriteEvent,
    WriteOutcome,
)
from coordinator_server.runtime.loading import PartitionLoader
from coordinator_server.runtime.observer import NoObserver, RuntimeObserver
from coordinator_server.runtime.timer import PartitionTimer
from coordinator_server.storage.api import (
    AppendError,
    CoordinatorLoader,
    PartitionWriter,
    RawRecord,
)
from coordinator_server.timeline import SnapshotRegistry
from protocol.errors import (
    ApiError,
    CoordinatorNotAvailableError,
    MessageTooLargeError,
    NotCoordinatorError,
    UnknownServerError,
)

S = TypeVar("S", bound=CoordinatorShard)


T = TypeVar("T")


def _replay_each(shard: CoordinatorShard, records: Sequence[CoordinatorRecord]) -> EncodedReplay:
    """The replay of record objects: one `shard.replay` each."""

    def replay(offset: int, start: int, stop: int) -> None:
        for index in range(start, stop):
            shard.replay(offset + index - start, records[index])

    return replay


def _not_active_error(partition: int, context: CoordinatorContext | None) -> ApiError:
    if context is None:
        return NotCoordinatorError(f"partition {partition} is not hosted here")
    return context.not_active_error()


class CoordinatorRuntime(Generic[S]):
    """Hosts a shard per partition and runs reads, writes, timers, loads and unloads."""

    def __init__(
        self,
        *,
        shard_builder: ShardBuilder,
        writer: PartitionWriter,
        loader: CoordinatorLoader,
        clock: RuntimeClock,
        config: RuntimeConfig = RUNTIME_DEFAULTS,
        logger: logging.Logger | None = None,
        observer: RuntimeObserver | None = None,
        event_processor: type[EventProcessor[CoordinatorEvent]] = EventProcessor,
    ) -> None:
        self._writer = writer
        self._clock = clock
        self._config = config
        self._log = log = logger or logging.getLogger(__name__)
        self._observer: RuntimeObserver = observer or NoObserver()
        self._processor = event_processor(
            run_when_idle=config.run_when_idle, max_queued_events=config.max_queued_events
        )
        self._loading = PartitionLoader(
            loader=loader,
            shard_builder=shard_builder,
            clock=clock,
            observer=self._observer,
            log=log,
            new_timer=self._new_timer,
            fail=self._fail,
        )
        self._contexts: dict[int, CoordinatorContext] = {}
        self._closing = False
        self._closed = False
        writer.register_listener(self._on_high_watermark)
        writer.register_ready_listener(self._on_writer_ready)
        # Partitions whose batch is due but waits for the writer to have room (see
        # PartitionWriter.backlogged), by partition.
        self._waiting_for_writer: dict[int, CoordinatorContext] = {}

    @property
    def config(self) -> RuntimeConfig:
        return self._config

    @property
    def clock(self) -> RuntimeClock:
        return self._clock

    @property
    def event_processor(self) -> EventProcessor[CoordinatorEvent]:
        return self._processor

    # Lifecycle.

    def schedule_load(self, partition: int, epoch: int) -> None:
        """Become the coordinator of `partition` as of leader epoch `epoch`.

        A load with an epoch not above the partition's current one is ignored. A partition
        that is INITIAL or FAILED starts loading; one LOADING or ACTIVE only takes the epoch.

        Raises:
            NotCoordinatorError: the runtime is closed.
        """
        if self._closed:
            raise NotCoordinatorError("the coordinator runtime is closed")
        context = self._contexts.get(partition)
        if context is None:
            context = CoordinatorContext(
                partition,
                asyncio.get_running_loop(),
                DeferredEventCollection(self._clock, self._config.write_timeout_ms),
                self._open_queue,
                self._log,
            )
            self._contexts[partition] = context
        if epoch <= context.epoch:
            self._log.info(
                "partition=%d load with epoch %d ignored: the current epoch is %d",
                partition,
                epoch,
                context.epoch,
            )
            return
        context.epoch = epoch
        if context.state in (CoordinatorState.INITIAL, CoordinatorState.FAILED):
            self._log.debug("partition=%d loading with epoch %d", partition, epoch)
            self._loading.start(context)
        else:
            self._log.info(
                "partition=%d is %s already; epoch is now %d", partition, context.state.name, epoch
            )

    def schedule_unload(self, partition: int, epoch: int | None) -> None:
        """Stop being the coordinator of `partition`.

        `epoch` is the new leader epoch, or None when the partition was deleted. An unload
        whose epoch is not above the current one is ignored, and so is one of a partition
        never loaded.
        """
        context = self._contexts.get(partition)
        if context is None:
            self._log.info("partition=%d unload ignored: it was never loaded", partition)
            return
        if epoch is not None and epoch <= context.epoch:
            self._log.info(
                "partition=%d unload with epoch %d ignored: the current epoch is %d",
                partition,
                epoch,
                context.epoch,
            )
            return
        self._log.info("partition=%d unloading (epoch %s)", partition, epoch)
        self._close_context(context)

    def partition_state(self, partition: int) -> CoordinatorState | None:
        context = self._contexts.get(partition)
        return None if context is None else context.state

    def partitions(self) -> dict[int, CoordinatorState]:
        return {partition: context.state for partition, context in self._contexts.items()}

    def fail_partition(self, partition: int, error: BaseException) -> None:
        """Stop serving `partition` now: a LOADING or ACTIVE partition goes FAILED, its load
        stops and whatever waits on it fails with `error` (requests get NOT_COORDINATOR from
        then on). For a log that can no longer be trusted; it stays FAILED until loaded
        again."""
        context = self._contexts.get(partition)
        if context is None or context.state not in (
            CoordinatorState.LOADING,
            CoordinatorState.ACTIVE,
        ):
            return
        self._log.error("partition=%d stops: %s", partition, error)
        self._fail(context, error)

    async def wait_left_active(self, partition: int) -> CoordinatorState | None:
        """Wait while `partition` is ACTIVE; its state once it is not (None: not hosted)."""
        while True:
            context = self._contexts.get(partition)
            if context is None:
                return None
            if context.state is not CoordinatorState.ACTIVE:
                return context.state
            waiter = asyncio.get_running_loop().create_future()
            context.state_waiters.append(waiter)
            await waiter

    async def wait_loaded(self, partition: int) -> None:
        """Wait until `partition` is ACTIVE.

        Raises:
            NotCoordinatorError: the partition is not hosted, or it failed or closed first.
        """
        while True:
            context = self._contexts.get(partition)
            if context is None:
                raise NotCoordinatorError(f"partition {partition} is not hosted here")
            state = context.state
            if state is CoordinatorState.ACTIVE:
                return
            if state is CoordinatorState.FAILED or state is CoordinatorState.CLOSED:
                raise NotCoordinatorError(f"partition {partition} is {state.name}")
            waiter = asyncio.get_running_loop().create_future()
            context.state_waiters.append(waiter)
            await waiter

    async def flush_and_close(self) -> None:
        """Shut down gracefully.

        New writes are refused with COORDINATOR_NOT_AVAILABLE, the queued ones run, the open
        batches are flushed, and the parked ones get until they commit or time out (each
        has its write timeout); then every partition is unloaded.
        """
        if self._closed:
            return
        self._closing = True
        loop = asyncio.get_running_loop()
        barriers: list[asyncio.Future[None]] = []
        for context in self._contexts.values():
            if context.state is CoordinatorState.ACTIVE:
                barrier: asyncio.Future[None] = loop.create_future()
                self._processor.enqueue(context.queue, BarrierEvent(barrier))
                barriers.append(barrier)
        if barriers:
            await asyncio.gather(*barriers)
        parked: list[asyncio.Future[Any]] = []
        for context in self._contexts.values():
            if context.state is CoordinatorState.ACTIVE:
                self._flush(context)
                parked.extend(e.future for e in context.deferred if e.future is not None)
        pending = [future for future in parked if not future.done()]
        if pending:
            await asyncio.wait(pending)
        queues = [context.queue for context in self._contexts.values()]
        self.close()
        await self._processor.wait_closed(queues)

    def close(self) -> None:
        """Unload every partition now, failing whatever waits with NOT_COORDINATOR."""
        if self._closed:
            return
        self._closing = True
        self._closed = True
        for context in list(self._contexts.values()):
            self._close_context(context)

    # Operations.

    def write(
        self,
        name: str,
        partition: int,
        op: Callable[[S], CoordinatorResult[T]],
        *,
        timeout_ms: int | None = None,
    ) -> WriteOutcome[T]:
        """Run a write operation on `partition`; its caller gets the response once the
        records it returned are committed.

        The write fails with COORDINATOR_LOAD_IN_PROGRESS while the partition loads,
        NOT_COORDINATOR when it is not hosted or not active, COORDINATOR_NOT_AVAILABLE when
        its queue is full or the runtime is shutting down, REQUEST_TIMED_OUT after
        `timeout_ms` (default: the config's write timeout) parked, MESSAGE_TOO_LARGE for
        records that cannot fit a batch, the ApiError the operation raised (anything else
        it raises becomes UNKNOWN_SERVER_ERROR), or the AppendError of a failed append.
        """
        context = self._contexts.get(partition)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            return WriteOutcome(None, _not_active_error(partition, context))
        queue = context.queue
        processor = self._processor
        if not self._closing and processor.claim(queue):
            try:
                return self._run_write(context, None, name, op, timeout_ms)
            finally:
                processor.release(queue)
        return self._enqueue_write(context, name, op, timeout_ms, None)

    def parkable_write(
        self,
        name: str,
        partition: int,
        op: Callable[[S, ResponseHandle], CoordinatorResult[T]],
        *,
        timeout_ms: int | None = None,
    ) -> WriteOutcome[T]:
        """Like `write`, for an operation that may park its caller.

        `op` also gets the caller's ResponseHandle. When its result says `park`, the caller
        is answered later, by the completion of that handle in another operation's result
        (or fails with NOT_COORDINATOR when the partition unloads, or with the append's
        error when the records of the operation that parked it fail). The handle's caller
        waits on a future from the start.
        """
        context = self._contexts.get(partition)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            return WriteOutcome(None, _not_active_error(partition, context))
        future: asyncio.Future[T] = context.loop.create_future()
        parked_callers = context.parked_callers
        handle = ResponseHandle(ParkedCaller(future, parked_callers))
        future.add_done_callback(lambda _: parked_callers.discard(ParkedCaller.of(handle)))
        return self._enqueue_write(
            context, name, lambda shard: op(shard, handle), timeout_ms, future
        )

    def schedule_write(
        self,
        name: str,
        partition: int,
        op: Callable[[S], CoordinatorResult[T]],
        *,
        timeout_ms: int | None = None,
    ) -> asyncio.Future[T]:
        """`write`, answered as a future, for callers that await or gather it."""
        outcome = self.write(name, partition, op, timeout_ms=timeout_ms)
        future = outcome.future
        if future is not None:
            return future
        future = asyncio.get_running_loop().create_future()
        if outcome.error is None:
            future.set_result(cast(T, outcome.response))
        else:
            future.set_exception(outcome.error)
        return future

    def _enqueue_write(
        self,
        context: CoordinatorContext,
        name: str,
        op: Callable[[S], CoordinatorResult[T]],
        timeout_ms: int | None,
        future: asyncio.Future[T] | None,
    ) -> WriteOutcome[T]:
        """Queue the write, or run it at once if the partition is idle; with `future` None
        (a write `write` could not run at once), its caller gets a new future."""
        processor = self._processor
        queue = context.queue
        refusal: ApiError | None = None
        if self._closing:
            refusal = CoordinatorNotAvailableError("the coordinator is shutting down")
        elif processor.full(queue):
            refusal = CoordinatorNotAvailableError(
                f"partition {context.partition} has {len(queue)} events queued already"
            )
        if refusal is not None:
            if future is None:
                return WriteOutcome(None, refusal)
            future.set_exception(refusal)
            return WriteOutcome(None, None, future)
        if future is None:
            future = context.loop.create_future()
        timeout = self._config.write_timeout_ms if timeout_ms is None else timeout_ms
        event = WriteEvent(name, op, timeout, future)
        if not processor.run_now(queue, event):
            event.queued_at = time.perf_counter()
            processor.enqueue(queue, event)
        return event

    def schedule_read(
        self, name: str, partition: int, op: Callable[[S, int], T]
    ) -> asyncio.Future[T]:
        """Run a read operation on `partition` now, against the committed state.

        `op` gets the shard and the last committed offset, and must read the shard as of
        that offset. The future fails as `schedule_write`'s does for the partition's state,
        or with the ApiError `op` raised (anything else becomes UNKNOWN_SERVER_ERROR).
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        context = self._contexts.get(partition)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            future.set_exception(_not_active_error(partition, context))
            return future
        try:
            future.set_result(op(cast(S, context.shard), context.last_committed_offset))
        except ApiError as error:
            future.set_exception(error)
        except Exception as error:
            self._log.exception("partition=%d read %s failed", partition, name)
            future.set_exception(UnknownServerError(f"{name} failed: {error!r}"))
        return future

    # Counters.

    def shard(self, partition: int) -> S | None:
        """The partition's shard while it is ACTIVE, for gauges read at scrape time (its
        latest state, committed or not)."""
        context = self._contexts.get(partition)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            return None
        return cast(S, context.shard)

    def partition_stats(self, partition: int) -> PartitionStats | None:
        context = self._contexts.get(partition)
        return None if context is None else context.stats()

    def last_written_offset(self, partition: int) -> int | None:
        context = self._contexts.get(partition)
        return None if context is None else context.last_written_offset

    def last_committed_offset(self, partition: int) -> int | None:
        context = self._contexts.get(partition)
        return None if context is None else context.last_committed_offset

    def queue_depth(self, partition: int) -> int:
        context = self._contexts.get(partition)
        return 0 if context is None else len(context.queue)

    # Events.

    def _open_queue(self, context: CoordinatorContext) -> EventQueue[CoordinatorEvent]:
        return self._processor.open(
            f"coordinator-partition-{context.partition}",
            functools.partial(self._run_event, context),
        )

    def _run_event(self, context: CoordinatorContext, event: CoordinatorEvent) -> None:
        """Run one event of the partition's queue: what the event processor calls."""
        try:
            if isinstance(event, WriteEvent):
                self._run_write(context, event, event.name, event.op, event.timeout_ms)
            elif isinstance(event, FlushEvent):
                self._flush_batch(context, event.batch_epoch)
            else:
                event.release()
        except Exception as error:
            self._log.exception("partition=%d event %r failed", context.partition, event)
            event.fail(UnknownServerError(f"internal error: {error!r}"))

    # Writes.

    def _run_write(
        self,
        context: CoordinatorContext,
        event: WriteEvent | None,
        name: str,
        op: Callable[[Any], CoordinatorResult[Any]],
        timeout_ms: int | None,
    ) -> WriteOutcome[Any]:
        """Run a write operation and carry out its result: the path of every write.

        `event` is the write as it was queued (or run at once from `_enqueue_write`), with
        its caller's future; None for a write `write` runs at once on an idle partition,
        which gets an event only if it needs more than its answer, and a future only if it
        must wait for the log. The caller's outcome is returned.
        """
        if event is None:
            self._observer.event_queued(0.0)
        else:
            queued_at = event.queued_at
            self._observer.event_queued(time.perf_counter() - queued_at if queued_at else 0.0)
            if event.done():
                # The caller gave up before the operation ran.
                return event
            if context.state is not CoordinatorState.ACTIVE:
                event.reject(context.not_active_error())
                return event
        try:
            result = op(context.shard)
        except ApiError as error:
            return self._refuse(event, error)
        except Exception as error:
            self._log.exception("partition=%d write %s failed", context.partition, name)
            return self._refuse(event, UnknownServerError(f"{name} failed: {error!r}"))
        if event is None:
            if (
                not result.records
                and result.encoded is None
                and not result.updates
                and not result.park
                and not result.completions
            ):
                # Nothing but its answer, and nothing pending before it (a heartbeat):
                # answered without an event or a future.
                batch = context.open_batch
                pending_end = context.last_written_offset if batch is None else batch.next_offset
                if pending_end <= context.last_committed_offset:
                    return WriteOutcome(result.response)
            timeout = self._config.write_timeout_ms if timeout_ms is None else timeout_ms
            event = WriteEvent(name, op, timeout)
        try:
            self._apply_result(context, event, result)
        except Exception as error:
            self._log.exception("partition=%d write %s failed", context.partition, name)
            event.fail(UnknownServerError(f"internal error: {error!r}"))
        # Waiting for the log: from here on its caller waits on a future.
        event.wait_on(context.loop)
        return event

    @staticmethod
    def _refuse(event: WriteEvent | None, error: BaseException) -> WriteOutcome[Any]:
        if event is None:
            return WriteOutcome(None, error)
        event.reject(error)
        return event

    def _apply_result(
        self, context: CoordinatorContext, event: WriteEvent, result: CoordinatorResult[Any]
    ) -> None:
        """Carry out what a write operation returned: its records, updates and answer."""
        shard = cast(CoordinatorShard, context.shard)
        try:
            encoded = result.encoded
            replay: EncodedReplay | None
            if encoded is not None:
                if result.records:
                    raise ValueError("a result carries records or encoded records, not both")
                raw = encoded.records
                replay = encoded.replay
            elif result.records:
                raw = [encode_record(record) for record in result.records]
                replay = _replay_each(shard, result.records)
            else:
                raw = ()
                replay = None
        except ApiError as error:
            event.reject(error)
            return
        except Exception as error:
            self._log.exception("partition=%d write %s failed", context.partition, event.name)
            event.reject(UnknownServerError(f"{event.name} failed: {error!r}"))
            return
        event.response = result.response
        event.park = result.park
        event.completions = result.completions
        event.on_failure = result.on_append_failure
        if not raw:
            batch = context.open_batch
            if result.updates and not self._apply_updates(context, event, result.updates):
                return
            pending_end = context.last_written_offset if batch is None else batch.next_offset
            if pending_end <= context.last_committed_offset:
                event.complete()
            else:
                context.deferred.add(event, pending_end)
            return
        self._append_records(
            context,
            event,
            raw,
            replay if result.replay_records else None,
            result.atomic,
            result.updates,
        )

    def _apply_updates(
        self, context: CoordinatorContext, event: WriteEvent, updates: Sequence[object]
    ) -> bool:
        """Apply a result's in-memory updates; False (and the partition reloads) if the
        shard rejects one, since such a bug leaves the state unknown."""
        registry = cast(SnapshotRegistry, context.registry)
        if context.open_batch is None:
            # No batch to belong to: the updates are part of the state at the log's end.
            registry.set_epoch_at(context.last_written_offset)
        shard = cast(CoordinatorShard, context.shard)
        try:
            for update in updates:
                shard.apply(update)
        except Exception as error:
            self._log.exception(
                "partition=%d applying the updates of %s failed; reloading",
                context.partition,
                event.name,
            )
            event.fail(UnknownServerError(f"{event.name} failed: {error!r}"))
            self._fail_and_reload(context)
            return False
        return True

    def _append_records(
        self,
        context: CoordinatorContext,
        event: WriteEvent,
        raw: Sequence[RawRecord],
        replay: EncodedReplay | None,
        atomic: bool,
        updates: Sequence[object] = (),
    ) -> None:
        """Replay the records into the shard (unless `replay` is None) and add them to the
        open batch, opening and sealing batches as they fill up."""
        max_bytes = self._config.max_batch_bytes
        count = len(raw)
        remaining = RECORD_OVERHEAD_BYTES * count
        for key, value in raw:
            remaining += len(key) if value is None else len(key) + len(value)
        # Record sizes one by one only when the records cannot all go in one batch.
        sizes: list[int] | None = None
        if remaining + BATCH_OVERHEAD_BYTES > max_bytes:
            too_large: str | None
            if atomic:
                too_large = f"{count} records of {remaining} bytes"
            else:
                sizes = record_sizes(raw)
                largest = max(sizes)
                fits = largest + BATCH_OVERHEAD_BYTES <= max_bytes
                too_large = None if fits else f"a record of {largest} bytes"
            if too_large is not None:
                event.fail(
                    MessageTooLargeError(
                        f"{event.name}: {too_large} cannot fit a {max_bytes}-byte batch"
                    )
                )
                return
        batch = context.open_batch
        if atomic and batch is not None and batch.size_bytes + remaining > max_bytes:
            self._seal(context)
            batch = None
        if batch is None:
            batch = self._open_batch(context)
        shard = cast(CoordinatorShard, context.shard)
        try:
            start = 0
            while True:
                if batch.size_bytes + remaining <= max_bytes:
                    stop = count
                    size = remaining
                else:
                    # Only a write that is not atomic gets here: the records that do not fit
                    # go on in a new batch (each fits an empty one).
                    if sizes is None:
                        sizes = record_sizes(raw)
                    stop = start
                    size = 0
                    while batch.size_bytes + size + sizes[stop] <= max_bytes:
                        size += sizes[stop]
                        stop += 1
                if stop > start:
                    offset = batch.next_offset
                    if replay is not None:
                        replay(offset, start, stop)
                    if start == 0 and stop == count:
                        batch.records.extend(raw)
                    else:
                        batch.records.extend(raw[start:stop])
                    batch.size_bytes += size
                    batch.next_offset = offset + stop - start
                if stop == count:
                    break
                remaining -= size
                start = stop
                self._seal(context)
                batch = self._open_batch(context)
            for update in updates:
                shard.apply(update)
        except Exception as error:
            # A replay should never fail; when it does (a bug), nothing of the open batch
            # can be trusted, so the whole batch goes, as in Kafka.
            self._log.exception(
                "partition=%d replay of %s failed; failing the open batch",
                context.partition,
                event.name,
            )
            failure = error if isinstance(error, ApiError) else UnknownServerError(repr(error))
            event.fail(failure)
            self._fail_open_batch(context, failure)
            return
        context.deferred.add(event, batch.next_offset)
        if batch.size_bytes + RECORD_OVERHEAD_BYTES > max_bytes:
            self._seal(context)
        elif self._config.append_linger_ms == 0:
            self._flush(context)

    def _open_batch(self, context: CoordinatorContext) -> CoordinatorBatch:
        context.batch_epoch += 1
        batch = CoordinatorBatch(context.last_written_offset, context.batch_epoch)
        cast(SnapshotRegistry, context.registry).set_epoch(batch.base_offset)
        linger_ms = self._config.append_linger_ms
        if linger_ms < 0:
            if context.queue.inline:
                # Run outside the queue (the idle fast path): the writes that arrive in this
                # turn of the event loop run at once too and join the batch; it flushes once
                # they are done, when the flush event queued at the end of the turn runs.
                context.loop.call_soon(self._queue_flush, context, batch.epoch)
            else:
                self._queue_flush(context, batch.epoch)
        elif linger_ms > 0:
            batch.linger_handle = self._clock.call_later(
                linger_ms, lambda: self._on_linger_expired(context, batch)
            )
        context.open_batch = batch
        return batch

    def _queue_flush(self, context: CoordinatorContext, batch_epoch: int) -> None:
        queue = context.queue
        if queue.closed:
            return
        # Nothing queued: the flush runs next anyway, so it runs now (spares the wake-up).
        self._processor.submit(queue, FlushEvent(batch_epoch))

    def _on_linger_expired(self, context: CoordinatorContext, batch: CoordinatorBatch) -> None:
        if context.open_batch is batch:
            batch.linger_handle = None
            self._flush(context)

    def _flush_batch(self, context: CoordinatorContext, batch_epoch: int) -> None:
        """A flush event's turn: flush the batch it was queued for, if it is still open."""
        batch = context.open_batch
        # The batch may be gone already (sealed when full, or failed); a newer batch has
        # its own flush event further back in the queue.
        if batch is not None and batch.epoch == batch_epoch:
            self._flush(context)

    def _flush(self, context: CoordinatorContext) -> None:
        """Send the open batch to the writer, or, while an append is in flight or the
        writer is backlogged, as soon as that ends (the batch keeps taking records
        meanwhile)."""
        batch = context.open_batch
        if batch is None or not batch.records:
            return
        if context.inflight is not None:
            batch.flush_due = True
        elif self._writer.backlogged(context.partition):
            batch.flush_due = True
            self._waiting_for_writer[context.partition] = context
        else:
            self._seal(context)

    def _on_writer_ready(self) -> None:
        waiting = self._waiting_for_writer
        if not waiting:
            return
        self._waiting_for_writer = {}
        for context in waiting.values():
            batch = context.open_batch
            if not context.queue.closed and batch is not None and batch.flush_due:
                self._flush(context)

    def _seal(self, context: CoordinatorContext) -> None:
        """Close the open batch to new records and queue it for the writer."""
        batch = context.open_batch
        if batch is None:
            return
        self._drop_open_batch(context)
        if not batch.records:
            return
        context.last_written_offset = batch.next_offset
        context.batch_ends.append(batch.next_offset)
        if context.inflight is None:
            self._start_append(context, batch)
        else:
            context.sealed.append(batch)

    def _start_append(self, context: CoordinatorContext, batch: CoordinatorBatch) -> None:
        context.inflight = batch
        future = self._writer.append(context.partition, batch.records)
        context.append_future = future
        future.add_done_callback(
            functools.partial(
                self._on_append_done, context, batch, context.generation, time.perf_counter()
            )
        )

    def _on_append_done(
        self,
        context: CoordinatorContext,
        batch: CoordinatorBatch,
        generation: int,
        started: float,
        done: asyncio.Future[int],
    ) -> None:
        current = generation == context.generation
        if done.cancelled():
            if current:
                # Cancelled inside the writer, not by the runtime: the append did not
                # complete, and the partition must not wait for it forever.
                self._on_append_failed(context, batch, AppendError(-1, "the append was cancelled"))
            return
        error = done.exception()
        if error is not None:
            self._observer.append_failed()
            if current:
                failure = error if isinstance(error, Exception) else AppendError(-1, repr(error))
                self._on_append_failed(context, batch, failure)
            return
        self._observer.batch_appended(
            len(batch.records), batch.size_bytes, time.perf_counter() - started
        )
        if current:
            self._on_append_succeeded(context, batch, done.result())

    def _on_append_succeeded(
        self, context: CoordinatorContext, batch: CoordinatorBatch, end_offset: int
    ) -> None:
        context.inflight = None
        context.append_future = None
        context.failing_since_ms = None
        if end_offset != batch.next_offset:
            self._log.error(
                "partition=%d the log and the state machine diverged: the append ended at %d "
                "where %d was expected; reloading",
                context.partition,
                end_offset,
                batch.next_offset,
            )
            self._fail_and_reload(context)
            return
        context.batches_appended += 1
        context.records_appended += len(batch.records)
        context.bytes_appended += batch.size_bytes
        context.last_batch_records = len(batch.records)
        context.last_batch_bytes = batch.size_bytes
        self._append_next(context)

    def _append_next(self, context: CoordinatorContext) -> None:
        if context.sealed:
            self._start_append(context, context.sealed.popleft())
            return
        batch = context.open_batch
        if batch is not None and batch.flush_due:
            self._flush(context)

    def _on_append_failed(
        self, context: CoordinatorContext, batch: CoordinatorBatch, error: Exception
    ) -> None:
        context.inflight = None
        context.append_future = None
        context.append_failures += 1
        if self._config.append_failure_timeout_ms and self._failing_too_long(context):
            return
        base_offset = batch.base_offset
        if base_offset < context.last_committed_offset:
            # The high watermark covers records the log says it did not take.
            self._log.error(
                "partition=%d append at %d failed below the high watermark %d; reloading",
                context.partition,
                base_offset,
                context.last_committed_offset,
            )
            self._fail_and_reload(context)
            return
        self._log.warning(
            "partition=%d append of %d records at %d failed: %s; reverting to %d",
            context.partition,
            len(batch.records),
            base_offset,
            error,
            base_offset,
        )
        self._drop_open_batch(context)
        context.sealed.clear()
        cast(SnapshotRegistry, context.registry).revert_to(base_offset)
        context.last_written_offset = base_offset
        batch_ends = context.batch_ends
        while batch_ends and batch_ends[-1] > base_offset:
            batch_ends.pop()
        self._fail_parked_above(context, base_offset, error)

    def _failing_too_long(self, context: CoordinatorContext) -> bool:
        """After a failed append: True (and the partition is FAILED) when every append since
        the first of this run of failures has failed, for `append_failure_timeout_ms` or
        more. Checked as appends fail, so a partition that fails once and then writes
        nothing stays ACTIVE: only one whose writes keep failing stops."""
        now_ms = self._clock.now_ms()
        since_ms = context.failing_since_ms
        if since_ms is None:
            context.failing_since_ms = now_ms
            return False
        failed_ms = now_ms - since_ms
        if failed_ms < self._config.append_failure_timeout_ms:
            return False
        self._log.error(
            "partition=%d every append has failed for %d ms (%d failures in all); it stops "
            "serving until it is loaded again",
            context.partition,
            failed_ms,
            context.append_failures,
        )
        self._fail(
            context,
            NotCoordinatorError(
                f"partition {context.partition} stopped: its appends have failed for {failed_ms} ms"
            ),
        )
        return True

    def _fail_open_batch(self, context: CoordinatorContext, error: BaseException) -> None:
        batch = context.open_batch
        if batch is None:
            return
        self._drop_open_batch(context)
        cast(SnapshotRegistry, context.registry).revert_to(batch.base_offset)
        self._fail_parked_above(context, batch.base_offset, error)

    def _drop_open_batch(self, context: CoordinatorContext) -> None:
        batch = context.open_batch
        if batch is None:
            return
        context.open_batch = None
        if batch.linger_handle is not None:
            batch.linger_handle.cancel()
            batch.linger_handle = None

    def _fail_parked_above(
        self, context: CoordinatorContext, offset: int, error: BaseException
    ) -> None:
        failed = context.deferred.fail_above(offset, error)
        for event in failed:
            on_failure = event.on_failure
            if on_failure is not None and context.state is CoordinatorState.ACTIVE:
                self._schedule_follow_up(context, event.name, on_failure)

    def _schedule_follow_up(
        self, context: CoordinatorContext, name: str, operation: TimeoutOperation
    ) -> None:
        """Run what an operation asked for in case its append failed (after the revert)."""
        follow_up = self.schedule_write(
            f"{name}:after-append-failure", context.partition, lambda _shard: operation()
        )
        follow_up.add_done_callback(self._log_follow_up_failure)

    def _log_follow_up_failure(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            self._log.warning(
                "an operation run after a failed append failed: %s", future.exception()
            )

    def _on_high_watermark(self, partition: int, high_watermark: int) -> None:
        context = self._contexts.get(partition)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            return
        if high_watermark > context.last_written_offset:
            # Only records this runtime wrote can commit; more means someone else wrote to
            # the partition, or an append reported as failed landed after all.
            self._log.error(
                "partition=%d the high watermark %d passed the last written offset %d; reloading",
                partition,
                high_watermark,
                context.last_written_offset,
            )
            self._fail_and_reload(context)
            return
        # The state can be read as of batch boundaries only (the registry's epochs), so a
        # high watermark inside a batch commits up to the batch before it.
        batch_ends = context.batch_ends
        offset = context.last_committed_offset
        while batch_ends and batch_ends[0] <= high_watermark:
            offset = batch_ends.popleft()
        if offset <= context.last_committed_offset:
            return
        context.last_committed_offset = offset
        cast(SnapshotRegistry, context.registry).commit(offset)
        context.deferred.complete_up_to(offset)

    # Loading and unloading.

    def _new_timer(self, partition: int) -> PartitionTimer:
        return PartitionTimer(
            partition,
            self._clock,
            self._config.timer_retry_backoff_ms,
            lambda name, op: self.schedule_write(name, partition, op),
            self._log,
        )

    def _fail(self, context: CoordinatorContext, error: BaseException) -> None:
        context.transition_to(CoordinatorState.FAILED)
        self._unload_shard(context, error)

    def _fail_and_reload(self, context: CoordinatorContext) -> None:
        self._fail(
            context,
            NotCoordinatorError(f"partition {context.partition} is reloading after a divergence"),
        )
        self._loading.start(context)

    def _close_context(self, context: CoordinatorContext) -> None:
        context.transition_to(CoordinatorState.CLOSED)
        error = NotCoordinatorError(f"partition {context.partition} was unloaded")
        try:
            self._unload_shard(context, error)
        finally:
            # Always forget the context, or the partition could never load again.
            if self._contexts.get(context.partition) is context:
                del self._contexts[context.partition]
            for event in self._processor.close(context.queue):
                event.fail(error)

    def _unload_shard(self, context: CoordinatorContext, error: BaseException) -> None:
        """Throw the shard away: timers, batches and parked writes go with it."""
        context.generation += 1
        if context.load_task is not None:
            context.load_task.cancel()
            context.load_task = None
        if context.timer is not None:
            context.timer.cancel_all()
        if context.append_future is not None:
            # Its outcome no longer matters: the records belong to a shard thrown away.
            context.append_future.cancel()
            context.append_future = None
        self._drop_open_batch(context)
        context.sealed.clear()
        context.batch_ends.clear()
        context.inflight = None
        context.deferred.fail_all(error)
        for parked in list(context.parked_callers):
            parked.fail(error)
        context.parked_callers.clear()
        shard = context.shard
        context.shard = None
        if shard is not None:
            try:
                shard.on_unloaded()
            except Exception:
                self._log.exception("partition=%d on_unloaded failed", context.partition)


__all__ = ["CoordinatorRuntime"]
