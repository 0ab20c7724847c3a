"""Taking a log partition over: the one way a node becomes a partition's writer in a cluster.

1. The membership must still give this node the partition, on a lease it renewed recently: a
   node that was paused or cut off past its session does not take anything back from the
   node Kafka gave it to meanwhile.
2. Kafka's producer fencing (`FencedLog.acquire`): the partition's transactional id gets a
   new producer epoch at Kafka's transaction coordinator.
3. The ownership record, appended at that epoch: from the moment it is in the partition, the
   partition's leader rejects every batch of an older epoch, so no earlier owner can get a
   write into the log, or have one acknowledged, again. It also tells a reader of the log who
   owned the partition from where.

Only then does the runtime load the partition: the load reads up to the high watermark, past
the ownership record, so it holds every write of the earlier owners that made it in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Protocol

from coordinator_server.records import encode_record, new_partition_ownership_record


class NotOwnerError(Exception):
    """The membership does not give this node the partition (now, or on a valid lease)."""


class FencedLog(Protocol):
    """What taking over needs of the log: its fencing and an append."""

    async def check(self) -> None:
        """Raise, saying why, when the log cannot fence partitions to their owner."""
        ...

    async def acquire(self, partition: int) -> tuple[int, int]:
        """Become the partition's only writer: (producer id, producer epoch)."""
        ...

    def release(self, partition: int) -> None: ...

    def append(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]]
    ) -> asyncio.Future[int]: ...


class Takeover:
    def __init__(
        self,
        log: FencedLog,
        node_id: int,
        owns: Callable[[int], bool],
        now_ms: Callable[[], int],
    ) -> None:
        """`owns(partition)`: whether the membership gives this node the partition now, on
        a lease still valid."""
        self._log = log
        self._node_id = node_id
        self._owns = owns
        self._now_ms = now_ms
        # The producer id and epoch of each partition taken over, for /status and metrics.
        self.epochs: dict[int, tuple[int, int]] = {}

    async def acquire(self, partition: int) -> None:
        if not self._owns(partition):
            raise NotOwnerError(f"partition {partition} is not this node's (or its lease ran out)")
        producer_id, epoch = await self._log.acquire(partition)
        record = new_partition_ownership_record(self._node_id, producer_id, epoch, self._now_ms())
        await self._log.append(partition, [encode_record(record)])
        self.epochs[partition] = (producer_id, epoch)

    def release(self, partition: int) -> None:
        self.epochs.pop(partition, None)
        self._log.release(partition)
