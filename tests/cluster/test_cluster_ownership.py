"""Ownership's order with the runtime: a partition's load is announced before it is acquired
(so that requests meanwhile are COORDINATOR_LOAD_IN_PROGRESS), loaded only once acquired, and
unloaded and released when lost at any step."""

from __future__ import annotations

import asyncio

from coordinator_server.cluster.ownership import PartitionOwnership
from coordinator_server.runtime.context import CoordinatorState


class RecordingHost:
    """The runtime's load and unload operations, recorded; a load is ACTIVE at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.states: dict[int, CoordinatorState] = {}
        self.left_active = asyncio.Event()

    def announce_load(self, partition: int) -> None:
        self.calls.append(("announce", partition))
        self.states.setdefault(partition, CoordinatorState.INITIAL)

    def schedule_load(self, partition: int, epoch: int) -> None:
        self.calls.append(("load", partition))
        self.states[partition] = CoordinatorState.ACTIVE

    def schedule_unload(self, partition: int, epoch: int | None) -> None:
        self.calls.append(("unload", partition))
        self.states.pop(partition, None)

    def partition_state(self, partition: int) -> CoordinatorState | None:
        return self.states.get(partition)

    async def wait_loaded(self, partition: int) -> None:
        assert self.states.get(partition) is CoordinatorState.ACTIVE

    async def wait_left_active(self, partition: int) -> CoordinatorState | None:
        await self.left_active.wait()
        return None

    def fail_partition(self, partition: int, error: BaseException) -> None:
        raise AssertionError("not expected")


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_load_is_announced_before_the_acquisition_and_made_after_it() -> None:
    host = RecordingHost()
    acquired = asyncio.Event()
    released: list[int] = []

    async def acquire(partition: int) -> None:
        await acquired.wait()

    ownership = PartitionOwnership(host, acquire, released.append, stopped=lambda: None)
    ownership.own([1])
    await settle()
    # Being fenced to this node: announced, not loaded.
    assert host.calls == [("announce", 1)]
    acquired.set()
    await settle()
    assert host.calls == [("announce", 1), ("load", 1)]
    await ownership.close()


async def test_a_partition_lost_while_acquired_is_unloaded_and_released() -> None:
    host = RecordingHost()

    async def acquire(partition: int) -> None:
        await asyncio.Event().wait()

    released: list[int] = []
    ownership = PartitionOwnership(host, acquire, released.append, stopped=lambda: None)
    ownership.own([1, 2])
    await settle()
    ownership.own([2])
    await settle()
    assert ("unload", 1) in host.calls and released == [1]
    assert host.partition_state(1) is None
    assert ("load", 1) not in host.calls
    await ownership.close()
