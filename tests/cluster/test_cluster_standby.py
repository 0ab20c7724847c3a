"""A node's standbys follow its view: new ones after its owned partitions load, dropped ones
unloaded, a standby it comes to own left to ownership's load."""

from __future__ import annotations

import asyncio

from coordinator_server.cluster.standby import StandbyPartitions
from coordinator_server.runtime.context import CoordinatorState


class FakeRuntime:
    def __init__(self) -> None:
        self.states: dict[int, CoordinatorState] = {}
        self.calls: list[tuple[str, int]] = []

    def schedule_standby(self, partition: int) -> None:
        self.calls.append(("standby", partition))
        self.states[partition] = CoordinatorState.STANDBY

    def schedule_unload(self, partition: int, epoch: int | None) -> None:
        self.calls.append(("unload", partition))
        self.states.pop(partition, None)

    def partition_state(self, partition: int) -> CoordinatorState | None:
        return self.states.get(partition)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def loaded_already() -> None:
    pass


async def test_standbys_start_once_the_owned_partitions_are_loaded() -> None:
    runtime = FakeRuntime()
    loaded = asyncio.get_running_loop().create_future()
    standbys = StandbyPartitions(runtime, lambda: asyncio.shield(loaded))
    standbys.stand_by(frozenset({1, 2, 3}), frozenset({0, 3}))
    await settle()
    assert runtime.calls == []
    loaded.set_result(None)
    await settle()
    assert runtime.calls == [("standby", 1), ("standby", 2)]
    assert standbys.standing_by == {1, 2}
    await standbys.close()


async def test_a_dropped_standby_is_unloaded_and_an_owned_one_is_left_to_ownership() -> None:
    runtime = FakeRuntime()
    standbys = StandbyPartitions(runtime, loaded_already)
    standbys.stand_by(frozenset({1, 2, 3}), frozenset({0}))
    await settle()
    runtime.calls.clear()
    # Partition 1 moves to this node (ownership's load promotes it), 2 to another standby.
    runtime.states[1] = CoordinatorState.LOADING
    standbys.stand_by(frozenset({3, 4}), frozenset({0, 1}))
    await settle()
    assert runtime.calls == [("unload", 2), ("standby", 4)]
    assert runtime.states[1] is CoordinatorState.LOADING
    assert standbys.standing_by == {3, 4}
    await standbys.close()


async def test_a_partition_hosted_otherwise_is_not_made_a_standby() -> None:
    runtime = FakeRuntime()
    runtime.states[2] = CoordinatorState.ACTIVE
    standbys = StandbyPartitions(runtime, loaded_already)
    standbys.stand_by(frozenset({2}), frozenset())
    await settle()
    assert runtime.calls == []
    await standbys.close()


async def test_standbys_off_stand_by_for_nothing() -> None:
    runtime = FakeRuntime()
    standbys = StandbyPartitions(runtime, loaded_already, enabled=False)
    standbys.stand_by(frozenset({1, 2}), frozenset({0}))
    await settle()
    assert runtime.calls == []
    await standbys.close()
