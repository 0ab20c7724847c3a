"""Partition ownership: keeps every log partition this node owns loaded, and only those.

A node owns a partition from the moment it is assigned it (by the cluster's membership, or,
alone, for the life of the process) until it is not. For each owned partition one task:

1. acquires the partition (`Acquire`): alone, nothing to do; in a cluster, Kafka's producer
   fencing at a new epoch and an ownership record appended at it, after which the previous
   owner can get nothing more into the partition (see `storage/kafka/producer_fencing.py`); the
   runtime is told first (`announce_load`), so that requests meanwhile are answered
   COORDINATOR_LOAD_IN_PROGRESS;
2. loads it into the runtime and waits until it is ACTIVE (a partition this node stood by
   for loads only the records its standby has not read);
3. waits while it stays ACTIVE; a partition that fails (its appends were fenced, or their
   fate stayed unknown) is acquired and loaded again, at a new epoch, while it is still
   owned.

Losing a partition unloads it (its waiting requests get NOT_COORDINATOR) and releases it
(appends to it fail at once), whatever step its task was at. The runtime learns of
ownership only through its load and unload operations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from coordinator_protocol.errors import NotCoordinatorError
from coordinator_server.runtime.context import CoordinatorState

logger = logging.getLogger("coordinator_server.cluster")

Acquire = Callable[[int], Awaitable[None]]
"""Make this node the only writer of a partition; raises when it could not (retried)."""

Release = Callable[[int], None]
"""Stop writing a partition: appends to it fail from now on."""

# Waits before trying a partition again, by failures in a row: a load or an acquisition
# fails on errors that waiting mends (a broker restarting) or not (a corrupt batch), so the
# waits grow long enough not to reload a large partition in a loop.
RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class PartitionHost(Protocol):
    """What ownership uses of the coordinator runtime: its load and unload operations."""

    def announce_load(self, partition: int) -> None: ...

    def schedule_load(self, partition: int, epoch: int) -> None: ...

    def schedule_unload(self, partition: int, epoch: int | None) -> None: ...

    def partition_state(self, partition: int) -> CoordinatorState | None: ...

    async def wait_loaded(self, partition: int) -> None: ...

    async def wait_left_active(self, partition: int) -> CoordinatorState | None: ...

    def fail_partition(self, partition: int, error: BaseException) -> None: ...


class PartitionOwnership:
    """The owned partitions' tasks; `own` says which partitions this node owns now."""

    def __init__(
        self,
        runtime: PartitionHost,
        acquire: Acquire,
        release: Release,
        *,
        stopped: Callable[[], str | None],
        retry_backoff_s: tuple[float, ...] = RETRY_BACKOFF_S,
    ) -> None:
        """`stopped()` is why the log stopped for good, or None: a stopped log is not loaded
        from again."""
        self._runtime = runtime
        self._acquire = acquire
        self._release = release
        self._stopped = stopped
        self._backoff = retry_backoff_s
        self._tasks: dict[int, asyncio.Task[None]] = {}
        # Set once a partition was ACTIVE, or given up on: what the start waits for.
        self._first_loads: dict[int, asyncio.Future[None]] = {}
        # The runtime's epoch of each partition: one more at every load in this process, so
        # that a load after a failure is never taken for an old one.
        self._next_epoch = 1

    @property
    def owned(self) -> frozenset[int]:
        return frozenset(self._tasks)

    def own(self, partitions: Iterable[int]) -> None:
        """Own exactly `partitions` from now on: load the new ones, unload the others."""
        wanted = set(partitions)
        for partition in sorted(set(self._tasks) - wanted):
            self._lose(partition)
        loop = asyncio.get_running_loop()
        for partition in sorted(wanted - set(self._tasks)):
            first_load = self._first_loads[partition] = loop.create_future()
            self._tasks[partition] = asyncio.create_task(
                self._keep_loaded(partition, first_load), name=f"own-partition-{partition}"
            )

    async def wait_first_loads(self) -> None:
        """Until every partition owned now was ACTIVE once (or given up on)."""
        pending = [f for f in self._first_loads.values() if not f.done()]
        if pending:
            await asyncio.gather(*pending)

    async def close(self) -> None:
        """Stop every task; the partitions stay loaded (the runtime's close unloads them)."""
        tasks = list(self._tasks.values())
        self._tasks.clear()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for future in self._first_loads.values():
            if not future.done():
                future.set_result(None)

    def _lose(self, partition: int) -> None:
        task = self._tasks.pop(partition)
        task.cancel()
        first_load = self._first_loads.pop(partition, None)
        if first_load is not None and not first_load.done():
            first_load.set_result(None)
        logger.info("partition=%d is no longer owned here: unloading it", partition)
        self._runtime.schedule_unload(partition, None)
        self._release(partition)

    def _take_epoch(self) -> int:
        epoch = self._next_epoch
        self._next_epoch += 1
        return epoch

    async def _keep_loaded(self, partition: int, first_load: asyncio.Future[None]) -> None:
        runtime = self._runtime
        failures = 0
        try:
            while self._stopped() is None:
                if failures:
                    backoff = self._backoff[min(failures - 1, len(self._backoff) - 1)]
                    await asyncio.sleep(backoff)
                if runtime.partition_state(partition) not in (
                    None,
                    CoordinatorState.INITIAL,
                    CoordinatorState.STANDBY,
                    CoordinatorState.FAILED,
                ):
                    # Loading or ACTIVE already (a load that was under way when a failed
                    # one was retried): wait for it as for our own.
                    pass
                else:
                    # Asked meanwhile, the partition is loading here, not elsewhere.
                    runtime.announce_load(partition)
                    try:
                        await self._acquire(partition)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        failures += 1
                        logger.warning(
                            "partition=%d could not be acquired (%s); trying again", partition, exc
                        )
                        continue
                    runtime.schedule_load(partition, self._take_epoch())
                try:
                    await runtime.wait_loaded(partition)
                except NotCoordinatorError:
                    if self._stopped() is not None:
                        break
                    failures += 1
                    logger.warning("partition=%d could not be loaded; trying again", partition)
                    continue
                failures = 0
                if not first_load.done():
                    first_load.set_result(None)
                state = await runtime.wait_left_active(partition)
                if state is None or state is CoordinatorState.CLOSED:
                    break
                if state is CoordinatorState.FAILED and self._stopped() is None:
                    failures = 1
                    logger.warning("partition=%d left ACTIVE; loading it again", partition)
        except NotCoordinatorError:
            # The runtime closed: the server is shutting down.
            pass
        finally:
            if not first_load.done():
                first_load.set_result(None)
