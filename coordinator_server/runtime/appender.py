"""Batches and appends: how a partition's records reach the log, and what the log's answers
do to the state.

Batches. Records of consecutive operations share one open batch (Kafka's
`CoordinatorBatch`). The open batch is flushed (handed to the writer) by the linger policy:
adaptively (the default) by a flush event queued at the end of the queue when the batch
opens, so it goes out once the operations already queued have run; after a fixed linger; or
after each write. A batch that fills up is sealed at once. Only one append per partition is
in flight: while it is, the open batch keeps taking records even when a flush was asked for
(group commit), and sealed batches wait behind it in order. When the append completes, the
next sealed batch, or else the open batch if its flush is due, goes out.

Commits. When the log's high watermark passes a batch, the snapshot registry forgets the
history below it and the writes parked on it complete. `revert_to(base)` undoes exactly one
batch and everything after it, and reads see the state as of `last_committed_offset`.

Failures. A failed append reverts the shard to the failed batch's base offset and fails
every operation parked above it (that batch, the sealed and open batches written on top of
it, and the no-record writes waiting on them) with the append's exception; batches appended
before it stay parked, since their records are in the log. With a writer whose append
returns only once committed, that base is the last committed offset. A replay that raises
fails the open batch the same way. An append that returns another end offset than the one
the shard was written for, or a high watermark past `last_written_offset`, means the log and
the state diverged (someone else wrote, or a failed append landed after all): the partition
goes FAILED, every parked operation fails with COORDINATOR_LOAD_IN_PROGRESS, and the
partition reloads from the log. A partition whose appends have all failed for
`append_failure_timeout_ms` (one that succeeds starts the count again) goes FAILED too,
instead of failing every write while it looks healthy; whoever loaded it decides when to
load it again (the app, with back-off).
What a partition's failure means for its lifecycle is the runtime's to carry out: the
appender is given how (`fail`, `reload`, `follow_up`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import cast

from coordinator_protocol.errors import (
    ApiError,
    MessageTooLargeError,
    NotCoordinatorError,
    UnknownServerError,
)
from coordinator_server.runtime.api import (
    CoordinatorShard,
    Records,
    TimeoutOperation,
    replay_records,
)
from coordinator_server.runtime.batch import (
    BATCH_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    CoordinatorBatch,
    record_sizes,
)
from coordinator_server.runtime.clock import RuntimeClock
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.context import (
    CoordinatorContext,
    CoordinatorState,
    FailPartition,
    ReloadPartition,
)
from coordinator_server.runtime.event_processor import EventProcessor
from coordinator_server.runtime.events import CoordinatorEvent, FlushEvent, WriteEvent
from coordinator_server.runtime.observer import RuntimeObserver
from coordinator_server.storage.api import AppendError, PartitionWriter, RawRecord
from coordinator_server.timeline import SnapshotRegistry

FollowUp = Callable[[CoordinatorContext, str, TimeoutOperation], None]
"""Run what a write asked for in case its append failed (after the revert)."""


class BatchAppender:
    """Adds write results' records to batches, appends them, and carries out the log's
    answers: commits, failures, divergence."""

    __slots__ = (
        "_clock",
        "_config",
        "_fail",
        "_follow_up",
        "_log",
        "_observer",
        "_processor",
        "_reload",
        "_waiting_for_writer",
        "_writer",
    )

    def __init__(
        self,
        *,
        writer: PartitionWriter,
        config: RuntimeConfig,
        clock: RuntimeClock,
        processor: EventProcessor[CoordinatorEvent],
        observer: RuntimeObserver,
        log: logging.Logger,
        fail: FailPartition,
        reload: ReloadPartition,
        follow_up: FollowUp,
    ) -> None:
        self._writer = writer
        self._config = config
        self._clock = clock
        self._processor = processor
        self._observer = observer
        self._log = log
        self._fail = fail
        self._reload = reload
        self._follow_up = follow_up
        # Partitions whose batch is due but waits for the writer to have room (see
        # PartitionWriter.backlogged), by partition.
        self._waiting_for_writer: dict[int, CoordinatorContext] = {}

    # Records into batches.

    def append(
        self,
        context: CoordinatorContext,
        event: WriteEvent,
        raw: Sequence[RawRecord],
        records: Records,
        atomic: bool,
        updates: Sequence[object] = (),
    ) -> None:
        """Add the records (`raw`, their bytes) to the open batch, opening and sealing
        batches as they fill up, and replay each batch's part of `records` into the shard
        under that batch's epoch; then apply `updates` and park `event` until its records
        are committed."""
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
                    if start == 0 and stop == count:
                        replay_records(shard, offset, records)
                        batch.records.extend(raw)
                    else:
                        replay_records(shard, offset, records, start, stop)
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
            self.flush(context)

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
            self.flush(context)

    # Flushes and appends.

    def flush_batch(self, context: CoordinatorContext, batch_epoch: int) -> None:
        """A flush event's turn: flush the batch it was queued for, if it is still open."""
        batch = context.open_batch
        # The batch may be gone already (sealed when full, or failed); a newer batch has
        # its own flush event further back in the queue.
        if batch is not None and batch.epoch == batch_epoch:
            self.flush(context)

    def flush(self, context: CoordinatorContext) -> None:
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

    def on_writer_ready(self) -> None:
        """The writer has room again: flush the batches that waited for it."""
        waiting = self._waiting_for_writer
        if not waiting:
            return
        self._waiting_for_writer = {}
        for context in waiting.values():
            batch = context.open_batch
            if not context.queue.closed and batch is not None and batch.flush_due:
                self.flush(context)

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
            self._reload(context)
            return
        context.batches_appended += 1
        context.records_appended += len(batch.records)
        context.bytes_appended += batch.size_bytes
        context.last_batch_records = len(batch.records)
        context.last_batch_bytes = batch.size_bytes
        if context.latest_high_watermark > context.last_committed_offset:
            # The high watermark came before this append's answer (the log reports it as the
            # answer arrives): it commits now. A reload it starts ends this partition's turn.
            generation = context.generation
            self.on_high_watermark(context, context.latest_high_watermark)
            if context.generation != generation:
                return
        self._append_next(context)

    def _append_next(self, context: CoordinatorContext) -> None:
        if context.sealed:
            self._start_append(context, context.sealed.popleft())
            return
        batch = context.open_batch
        if batch is not None and batch.flush_due:
            self.flush(context)

    # The log's answers: commits and failures.

    def on_high_watermark(self, context: CoordinatorContext, high_watermark: int) -> None:
        """The log committed up to `high_watermark` on this ACTIVE partition."""
        if high_watermark > context.last_written_offset:
            # Only records this runtime wrote can commit; more means someone else wrote to
            # the partition, or an append reported as failed landed after all.
            self._log.error(
                "partition=%d the high watermark %d passed the last written offset %d; reloading",
                context.partition,
                high_watermark,
                context.last_written_offset,
            )
            self._reload(context)
            return
        if high_watermark > context.latest_high_watermark:
            context.latest_high_watermark = high_watermark
        # Only what this runtime's appends have returned commits: the records below the
        # append in flight, or below the first sealed batch not yet sent (appends go one at
        # a time, in order). Until an append returns, the offsets it was written for may
        # hold another writer's records: its end offset says so, and a reload follows,
        # before any of it counts as state.
        unreturned = context.inflight
        if unreturned is None and context.sealed:
            unreturned = context.sealed[0]
        if unreturned is not None and unreturned.base_offset < high_watermark:
            high_watermark = unreturned.base_offset
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

    def _on_append_failed(
        self, context: CoordinatorContext, batch: CoordinatorBatch, error: Exception
    ) -> None:
        context.inflight = None
        context.append_future = None
        context.append_failures += 1
        if isinstance(error, AppendError) and error.stops_partition:
            # The log takes nothing more of this partition from us (another node took it
            # over, or an append's fate is unknown): what we hold may already be behind the
            # log, so nothing more is served from it, reads included.
            self._log.error("partition=%d stops: %s", context.partition, error)
            self._fail(context, NotCoordinatorError(f"partition {context.partition}: {error}"))
            return
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
            self._reload(context)
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

    def _fail_parked_above(
        self, context: CoordinatorContext, offset: int, error: BaseException
    ) -> None:
        failed = context.deferred.fail_above(offset, error)
        for event in failed:
            on_failure = event.on_failure
            if on_failure is not None and context.state is CoordinatorState.ACTIVE:
                self._follow_up(context, event.name, on_failure)

    def _drop_open_batch(self, context: CoordinatorContext) -> None:
        batch = context.open_batch
        if batch is None:
            return
        context.open_batch = None
        if batch.linger_handle is not None:
            batch.linger_handle.cancel()
            batch.linger_handle = None

    def discard(self, context: CoordinatorContext) -> None:
        """The shard is thrown away: so are its batches, and the outcome of the append in
        flight no longer matters."""
        if context.append_future is not None:
            context.append_future.cancel()
            context.append_future = None
        self._drop_open_batch(context)
        context.sealed.clear()
        context.batch_ends.clear()
        context.inflight = None


__all__ = ["BatchAppender", "FollowUp"]
