"""Loading a partition: a fresh shard, the committed log replayed into it, then ACTIVE.

Kafka's runtime schedules the same on its `CoordinatorLoader`: the shard is built with a new
snapshot registry and timer, the storage's loader hands it every committed record (through
the shard's `load_replay`), and the partition goes ACTIVE at the log's end. A load that
fails leaves the partition FAILED; a load overtaken by an unload or a newer load (the
context's generation moved on) drops its result.

A standby's partition is not loaded from scratch: `resume` takes the shard the standby kept
and its load replay, and reads only the log from where the standby stopped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from coordinator_protocol.errors import NotCoordinatorError
from coordinator_server.runtime.api import (
    CoordinatorShard,
    LoadReplay,
    ShardBuilder,
    ShardContext,
)
from coordinator_server.runtime.clock import RuntimeClock
from coordinator_server.runtime.context import CoordinatorContext, CoordinatorState, FailPartition
from coordinator_server.runtime.observer import RuntimeObserver
from coordinator_server.runtime.timer import PartitionTimer
from coordinator_server.storage.api import CoordinatorLoader
from coordinator_server.timeline import SnapshotRegistry

# A load that takes this long is logged on its own line, slow, as well as in the summary.
SLOW_LOAD_S = 1.0


class PartitionLoader:
    """Loads partitions into fresh shards."""

    __slots__ = (
        "_clock",
        "_fail",
        "_loader",
        "_log",
        "_new_timer",
        "_observer",
        "_shard_builder",
        "line_per_load",
    )

    def __init__(
        self,
        *,
        loader: CoordinatorLoader,
        shard_builder: ShardBuilder,
        clock: RuntimeClock,
        observer: RuntimeObserver,
        log: logging.Logger,
        new_timer: Callable[[int], PartitionTimer],
        fail: FailPartition,
    ) -> None:
        self._loader = loader
        self._shard_builder = shard_builder
        self._clock = clock
        self._observer = observer
        self._log = log
        self._new_timer = new_timer
        self._fail = fail
        # The start's loads are summed up in its ready line; once it is out, each load (a
        # takeover, a reload) has a line of its own (`CoordinatorRuntime.first_loads_done`).
        self.line_per_load = False

    def start(self, context: CoordinatorContext) -> None:
        """Go LOADING with a fresh shard, and load it from the log in a task."""
        context.transition_to(CoordinatorState.LOADING)
        try:
            shard = self.new_shard(context)
        except Exception:
            self._log.exception("partition=%d building the shard failed", context.partition)
            self._fail(context, NotCoordinatorError(f"partition {context.partition} failed"))
            return
        self._run(context, shard, shard.load_replay(), None)

    def resume(self, context: CoordinatorContext, sink: LoadReplay, start_offset: int) -> None:
        """Go LOADING with the shard a standby kept up to `start_offset` (its records handed
        to `sink`, the standby's load replay), and load the rest of the log into it."""
        context.transition_to(CoordinatorState.LOADING)
        context.generation += 1
        context.failing_since_ms = None
        shard = context.shard
        assert shard is not None, "a standby hands over its shard"
        self._run(context, shard, sink, start_offset)

    def new_shard(self, context: CoordinatorContext) -> CoordinatorShard:
        """A fresh shard for the partition, with a new snapshot registry and timer (the old
        ones dropped), its offsets at the log's start. Raises what the builder raised."""
        context.generation += 1
        if context.timer is not None:
            context.timer.cancel_all()
        registry = SnapshotRegistry()
        timer = self._new_timer(context.partition)
        context.registry = registry
        context.timer = timer
        context.last_written_offset = context.last_committed_offset = 0
        context.latest_high_watermark = 0
        context.failing_since_ms = None
        context.shard = None
        shard = context.shard = self._shard_builder(
            ShardContext(context.partition, self._clock, timer, registry)
        )
        # Records read from the log are committed already: no history to revert to.
        registry.set_tracking(False)
        return shard

    def _run(
        self,
        context: CoordinatorContext,
        shard: CoordinatorShard,
        sink: LoadReplay,
        start_offset: int | None,
    ) -> None:
        registry = context.registry
        assert registry is not None
        context.load_task = asyncio.get_running_loop().create_task(
            self._load(context, context.generation, shard, registry, sink, start_offset)
        )

    async def _load(
        self,
        context: CoordinatorContext,
        generation: int,
        shard: CoordinatorShard,
        registry: SnapshotRegistry,
        sink: LoadReplay,
        start_offset: int | None,
    ) -> None:
        partition = context.partition
        # Loaded records are committed already, so they need no history to revert to.
        registry.set_tracking(False)
        started = time.perf_counter()
        try:
            summary = await self._loader.load(partition, sink, start_offset=start_offset)
            sink.close()
        except asyncio.CancelledError:
            raise
        except Exception:
            if generation == context.generation:
                self._log.exception("partition=%d load failed", partition)
                context.load_task = None
                self._fail(context, NotCoordinatorError(f"partition {partition} failed to load"))
            return
        if generation != context.generation:
            return
        context.load_task = None
        load_seconds = time.perf_counter() - started
        self._observer.partition_loaded(partition, load_seconds, summary.records)
        registry.set_tracking(True)
        registry.reset(summary.end_offset)
        context.last_written_offset = context.last_committed_offset = summary.end_offset
        context.latest_high_watermark = summary.end_offset
        try:
            context.transition_to(CoordinatorState.ACTIVE)
            shard.on_loaded()
        except Exception:
            self._log.exception("partition=%d on_loaded failed", partition)
            self._fail(context, NotCoordinatorError(f"partition {partition} failed to load"))
            return
        # Each of the start's loads is in its summary (the ready line): a line of its own only
        # for a slow one or a takeover from a standby; after the start, every load has one.
        slow = load_seconds >= SLOW_LOAD_S
        self._log.log(
            logging.INFO
            if self.line_per_load or slow or start_offset is not None
            else logging.DEBUG,
            "partition=%d loaded %d records (%d bytes) up to offset %d in %.3f s "
            "(%.0f records/s) with epoch %d%s%s",
            partition,
            summary.records,
            summary.bytes,
            summary.end_offset,
            load_seconds,
            summary.records / load_seconds if load_seconds > 0 else 0.0,
            context.epoch,
            "" if start_offset is None else f", from offset {start_offset} where its standby was",
            ": slow" if slow else "",
        )


__all__ = ["PartitionLoader"]
