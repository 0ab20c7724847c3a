"""Warm standbys: this node keeps loaded, without serving them, the partitions the cluster's
view says it would take over next, so that a takeover reads only their newest records.

The view names one standby per partition, never on its owner's node (see `assignor`). This
node stands by for exactly the partitions its view gives it to stand by for and does not own:
a new one becomes a runtime standby (`schedule_standby`) once the partitions this node owns
have loaded (an owner's load serves clients, a standby's only a later failover); one the view
no longer gives it, and that it does not own, is unloaded. A standby partition the view
gives this node to own is taken over by ownership (`PartitionOwnership`), whose load
then promotes the standby. The runtime learns of standbys only through these operations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from coordinator_server.runtime.context import CoordinatorState

logger = logging.getLogger("coordinator_server.cluster")

# How long new standbys wait for the owned partitions' loads: a partition that cannot load
# (retried with back-off by ownership) must not keep this node from standing by for ever.
OWNED_LOADS_WAIT_S = 30.0


class StandbyRuntime(Protocol):
    """What standbys use of the coordinator runtime."""

    def schedule_standby(self, partition: int) -> None: ...

    def schedule_unload(self, partition: int, epoch: int | None) -> None: ...

    def partition_state(self, partition: int) -> CoordinatorState | None: ...


class StandbyPartitions:
    """The partitions this node stands by for; `stand_by` says which, as each view comes."""

    def __init__(
        self,
        runtime: StandbyRuntime,
        owned_loaded: Callable[[], Awaitable[None]],
        *,
        enabled: bool = True,
    ) -> None:
        """`owned_loaded()` waits until the partitions this node owns now were loaded once;
        with `enabled` False this node stands by for nothing."""
        self._runtime = runtime
        self._owned_loaded = owned_loaded
        self._enabled = enabled
        # What the latest view wants, and what the runtime was told to stand by for (both
        # within the log's partitions).
        self._wanted: frozenset[int] = frozenset()
        self._standing_by: set[int] = set()
        self._starting: asyncio.Task[None] | None = None

    @property
    def standing_by(self) -> frozenset[int]:
        return frozenset(self._standing_by)

    def stand_by(self, standby: frozenset[int], owned: frozenset[int]) -> None:
        """Stand by for the partitions of `standby` not in `owned` from now on (called after
        ownership has taken the view's `owned`)."""
        if not self._enabled:
            return
        self._wanted = standby - owned
        for partition in sorted(self._standing_by - self._wanted):
            self._standing_by.discard(partition)
            if partition in owned:
                # Taken over: ownership's load promotes the standby.
                continue
            if self._runtime.partition_state(partition) is CoordinatorState.STANDBY:
                logger.info("partition=%d is no longer stood by for here: unloading it", partition)
                self._runtime.schedule_unload(partition, None)
        if self._wanted - self._standing_by and (self._starting is None or self._starting.done()):
            self._starting = asyncio.create_task(self._start(), name="start-standbys")

    async def _start(self) -> None:
        try:
            await asyncio.wait_for(self._owned_loaded(), OWNED_LOADS_WAIT_S)
        except TimeoutError:
            logger.warning(
                "the partitions owned here are not all loaded after %.0f s: standing by anyway",
                OWNED_LOADS_WAIT_S,
            )
        for partition in sorted(self._wanted - self._standing_by):
            if self._runtime.partition_state(partition) is not None:
                # Still hosted here otherwise (unloading is synchronous, so this is a
                # partition owned again meanwhile): ownership has it.
                continue
            try:
                self._runtime.schedule_standby(partition)
            except Exception:
                # The runtime is closing, or its log cannot be followed.
                logger.exception("partition=%d cannot stand by", partition)
                return
            self._standing_by.add(partition)

    async def close(self) -> None:
        task, self._starting = self._starting, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
