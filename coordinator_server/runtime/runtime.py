"""The coordinator runtime: one replicated state machine ("shard") per log partition.

This is Kafka's `CoordinatorRuntime` on asyncio. Each partition the runtime hosts has a
context (`context`: its lifecycle state and epoch, its shard and snapshot registry, its
offsets) with a serial event queue (`event_processor`), its timers (`timer`), its parked
writes (`deferred`) and its write batches (`appender`); `loading` loads it from the log, and
`standby` keeps a partition it does not serve loaded, for a later load to read only the rest.
This module ties them together: the scheduling API, the dispatch of events, and the one
path every write takes.

Write operations. `write` runs an operation on the partition's queue, so two operations of
a partition never interleave while partitions run independently; on an idle partition it
runs at once, in the caller's call (the event processor's idle fast path), which is how
the server runs. An operation is a pure function of the shard: it returns a
`CoordinatorResult(records, response)` and changes nothing itself. The runtime replays the
records into the shard at once (so the next operation sees them; this is the only place
state changes), adds them to the partition's open batch, and parks the caller at the offset
just after its last record. When the log's high watermark reaches that offset the caller
gets the response. A write that returns no records is a read of the latest state: it
completes at once when nothing is pending, else once every pending write is committed, so a
caller never sees state that could still be rolled back. Whichever way a write ran, its
caller gets a `WriteOutcome`: over already (a heartbeat on an idle partition needs no future
at all), or with the future its answer comes through.

An operation may return its records as one run (`RecordRun`: an OffsetCommit's records,
built and encoded in one go): the runtime appends the run's bytes and replays it through the
same `shard.replay`, in one call per batch the records land in instead of one per record.
Everything else (parking, batching, revert) is the same.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, cast

from coordinator_protocol.errors import (
    ApiError,
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    UnknownServerError,
)
from coordinator_server.runtime.api import (
    CoordinatorResult,
    CoordinatorShard,
    ResponseHandle,
    ShardBuilder,
    TimeoutOperation,
    encode_records,
)
from coordinator_server.runtime.appender import BatchAppender
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
from coordinator_server.runtime.standby import StandbyFollower
from coordinator_server.runtime.timer import PartitionTimer
from coordinator_server.storage.api import CoordinatorLoader, LogFollower, PartitionWriter
from coordinator_server.timeline import SnapshotRegistry

# Covariant: a runtime of a shard is a runtime of each door the shard has (the services
# are typed by the door they use, `shard.GroupShard` or `shard.TransactionShard`).
S = TypeVar("S", bound=CoordinatorShard, covariant=True)
T = TypeVar("T")


def _no_lease_error() -> ApiError:
    return NotCoordinatorError(
        "this node may not serve now (its lease in the cluster ran out): it answers from no "
        "partition until it knows what it owns"
    )


def _not_active_error(partition: int, context: CoordinatorContext | None) -> ApiError:
    if context is None:
        return NotCoordinatorError(f"partition {partition} is not hosted here")
    return context.not_active_error()


class CoordinatorRuntime(Generic[S]):
    """Hosts a shard per partition and runs reads, writes, timers, loads and unloads.

    `event_processor` is the kind of processor that runs the partitions' queues (a
    `ManualEventProcessor` lets a test run queued events one at a time); it is built with
    the config's `run_when_idle` and `max_queued_events`. `follower` reads the log for
    standbys (None: the log has none, and `schedule_standby` is not available).
    """

    def __init__(
        self,
        *,
        shard_builder: ShardBuilder,
        writer: PartitionWriter,
        loader: CoordinatorLoader,
        clock: RuntimeClock,
        follower: LogFollower | None = None,
        config: RuntimeConfig = RUNTIME_DEFAULTS,
        logger: logging.Logger | None = None,
        observer: RuntimeObserver | None = None,
        event_processor: type[EventProcessor[CoordinatorEvent]] = EventProcessor,
        may_serve: Callable[[], bool] | None = None,
    ) -> None:
        """`may_serve()`: whether this node may answer from any partition's state now (a
        cluster node's lease at Kafka; None: always). Asked synchronously at every
        operation a caller starts: a node resumed after a pause handles the requests that
        waited in its sockets before any timer of its runs, and must not answer them from
        a state another node may have moved past meanwhile."""
        self._may_serve = may_serve
        self._clock = clock
        self._config = config
        self._log = log = logger or logging.getLogger(__name__)
        self._observer: RuntimeObserver = observer or NoObserver()
        self._processor = processor = event_processor(
            run_when_idle=config.run_when_idle, max_queued_events=config.max_queued_events
        )
        self._run_when_idle = processor.run_when_idle
        self._appender = BatchAppender(
            writer=writer,
            config=config,
            clock=clock,
            processor=processor,
            observer=self._observer,
            log=log,
            fail=self._fail,
            reload=self._fail_and_reload,
            follow_up=self._schedule_follow_up,
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
        self._standby = StandbyFollower(
            follower=follower, new_shard=self._loading.new_shard, config=config, log=log
        )
        self._contexts: dict[int, CoordinatorContext] = {}
        self._closing = False
        self._closed = False
        writer.register_listener(self._on_high_watermark)
        writer.register_ready_listener(self._appender.on_writer_ready)

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
        that is INITIAL or FAILED starts loading; one STANDBY loads only the log past its
        standby's shard, into that shard; one LOADING or ACTIVE only takes the epoch.

        Raises:
            NotCoordinatorError: the runtime is closed.
        """
        context = self._context_to_load(partition)
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
        elif context.state is CoordinatorState.STANDBY:
            handover = self._standby.promote(context)
            if handover is None:
                self._log.info(
                    "partition=%d its standby had nothing to hand over: loading it whole",
                    partition,
                )
                self._loading.start(context)
            else:
                self._loading.resume(context, *handover)
        else:
            self._log.info(
                "partition=%d is %s already; epoch is now %d", partition, context.state.name, epoch
            )

    def first_loads_done(self) -> None:
        """The start's loads are over and summed up (the server's ready line): from now on
        each load, a takeover or a reload, is logged on a line of its own."""
        self._loading.line_per_load = True

    def announce_load(self, partition: int) -> None:
        """`partition` is to be loaded here (`schedule_load`) as soon as it is acquired: in a
        cluster, fenced to this node first, a round trip to Kafka's transaction coordinator
        and an append at least. Until its load starts, or it is unloaded, its operations fail
        with COORDINATOR_LOAD_IN_PROGRESS rather than NOT_COORDINATOR, as Kafka answers for a
        partition it is becoming the coordinator of: a client waits and asks this node again,
        which FindCoordinator names already. A partition that fails later answers
        NOT_COORDINATOR again. A standby goes on following the log meanwhile.

        Raises:
            NotCoordinatorError: the runtime is closed.
        """
        context = self._context_to_load(partition)
        context.load_announced = True

    def schedule_standby(self, partition: int) -> None:
        """Stand by for `partition`: keep a shard of it up to date from the log, serving
        nothing (requests get NOT_COORDINATOR), so that a later `schedule_load` reads only
        the records appended since. `schedule_unload` ends the standby. A partition hosted
        already, in any state, is left as it is.

        Raises:
            NotCoordinatorError: the runtime is closed.
            NotImplementedError: the log has no follower.
        """
        if self._closed:
            raise NotCoordinatorError("the coordinator runtime is closed")
        if not self._standby.available:
            raise NotImplementedError("this runtime's log cannot be followed by a standby")
        context = self._contexts.get(partition)
        if context is not None:
            self._log.info(
                "partition=%d standby ignored: it is %s here already",
                partition,
                context.state.name,
            )
            return
        self._log.info("partition=%d standing by", partition)
        self._standby.start(self._new_context(partition))

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

    def context(self, partition: int) -> CoordinatorContext | None:
        """The partition's context (its state, epochs and queue), None when the runtime
        holds none: for tests and a debugger; the runtime alone moves it."""
        return self._contexts.get(partition)

    def partition_state(self, partition: int) -> CoordinatorState | None:
        context = self._contexts.get(partition)
        return None if context is None else context.state

    def partitions(self) -> dict[int, CoordinatorState]:
        return {partition: context.state for partition, context in self._contexts.items()}

    def may_serve(self) -> bool:
        """Whether this node may answer from its partitions now (see `__init__`): False
        for a cluster node that has no lease, among them one that has not yet been told
        which partitions it owns."""
        return self._may_serve is None or self._may_serve()

    def loading_partitions(self) -> list[int]:
        """The partitions whose operations get COORDINATOR_LOAD_IN_PROGRESS now: loading,
        or announced to load here."""
        return sorted(partition for partition, c in self._contexts.items() if c.loading)

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
                self._appender.flush(context)
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
        self._standby.close()
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
        if self._may_serve is not None and not self._may_serve():
            return WriteOutcome(None, _no_lease_error())
        queue = context.queue
        if not queue.events and not queue.running and self._run_when_idle and not self._closing:
            # The idle fast path: the write runs now, in the caller's call, the queue marked
            # as the event processor marks it (its protocol, spelt out here: two calls would
            # cost a heartbeat about 45 ns).
            queue.running = queue.inline = True
            started = time.perf_counter()
            try:
                return self._run_write(context, None, name, op, timeout_ms)
            finally:
                queue.running = queue.inline = False
                self._observer.event_ran(0.0, time.perf_counter() - started)
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
        if self._may_serve is not None and not self._may_serve():
            return WriteOutcome(None, _no_lease_error())
        future: asyncio.Future[T] = context.loop.create_future()
        parked_callers = context.parked_callers
        handle = ResponseHandle(ParkedCaller(future, parked_callers))
        future.add_done_callback(lambda _: parked_callers.discard(ParkedCaller.of(handle)))

        # Typed Any, not S: S is covariant (a service typed by its door of the shard takes
        # the runtime of the whole shard), and a covariant type is no parameter's type.
        def with_handle(shard: Any) -> CoordinatorResult[T]:
            return op(shard, handle)

        return self._enqueue_write(context, name, with_handle, timeout_ms, future)

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

    def schedule_read(
        self, name: str, partition: int, op: Callable[[S, int], T]
    ) -> asyncio.Future[T]:
        """Run a read operation on `partition` now, against the committed state.

        `op` gets the shard and the last committed offset, and must read the shard as of
        that offset. The future fails as `write` does for the partition's state, or with
        the ApiError `op` raised (anything else becomes UNKNOWN_SERVER_ERROR).
        """
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        context = self._contexts.get(partition)
        if context is None or context.state is not CoordinatorState.ACTIVE:
            future.set_exception(_not_active_error(partition, context))
            return future
        if self._may_serve is not None and not self._may_serve():
            future.set_exception(_no_lease_error())
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

    def _context_to_load(self, partition: int) -> CoordinatorContext:
        """The partition's context, a new INITIAL one when it has none; raises
        NotCoordinatorError when the runtime is closed."""
        if self._closed:
            raise NotCoordinatorError("the coordinator runtime is closed")
        context = self._contexts.get(partition)
        return self._new_context(partition) if context is None else context

    def _new_context(self, partition: int) -> CoordinatorContext:
        context = self._contexts[partition] = CoordinatorContext(
            partition,
            asyncio.get_running_loop(),
            DeferredEventCollection(self._clock, self._config.write_timeout_ms),
            self._open_queue,
            self._log,
        )
        return context

    def _open_queue(self, context: CoordinatorContext) -> EventQueue[CoordinatorEvent]:
        return self._processor.open(
            f"coordinator-partition-{context.partition}",
            functools.partial(self._run_event, context),
        )

    def _run_event(self, context: CoordinatorContext, event: CoordinatorEvent) -> None:
        """Run one event of the partition's queue: what the event processor calls."""
        try:
            if isinstance(event, WriteEvent):
                started = time.perf_counter()
                queued_at = event.queued_at
                try:
                    self._run_write(context, event, event.name, event.op, event.timeout_ms)
                finally:
                    self._observer.event_ran(
                        started - queued_at if queued_at else 0.0, time.perf_counter() - started
                    )
            elif isinstance(event, FlushEvent):
                self._appender.flush_batch(context, event.batch_epoch)
            else:
                event.release()
        except Exception as error:
            self._log.exception("partition=%d event %r failed", context.partition, event)
            event.fail(UnknownServerError(f"internal error: {error!r}"))

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
        if event is not None:
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
        records = result.records
        try:
            raw = encode_records(records)
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
        self._appender.append(
            context,
            event,
            raw,
            records,
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

    def _schedule_follow_up(
        self, context: CoordinatorContext, name: str, operation: TimeoutOperation
    ) -> None:
        """Run what an operation asked for in case its append failed (after the revert)."""

        def follow_up_op(_shard: Any) -> CoordinatorResult[Any]:
            return operation()

        follow_up = self.schedule_write(
            f"{name}:after-append-failure", context.partition, follow_up_op
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
        self._appender.on_high_watermark(context, high_watermark)

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
        # What waited on the partition is answered as what follows will be: the partition
        # loads here again, so its clients wait and ask this node again (Kafka's answer for
        # a partition that loads), rather than look for another coordinator.
        self._fail(
            context,
            CoordinatorLoadInProgressError(
                f"partition {context.partition} is reloading after a divergence"
            ),
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
        self._standby.discard(context)
        if context.load_task is not None:
            context.load_task.cancel()
            context.load_task = None
        if context.timer is not None:
            context.timer.cancel_all()
        self._appender.discard(context)
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
