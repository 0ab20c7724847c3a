"""Partition lifecycle: states, epoch-guarded loads and unloads, on_loaded, unload failures."""

from __future__ import annotations

import asyncio
import logging

import pytest
from runtime_harness import Harness, KeyValueShard, get_latest, put_record, settle

from coordinator_protocol.errors import CoordinatorLoadInProgressError, NotCoordinatorError
from coordinator_server.records import encode_record
from coordinator_server.runtime.api import CoordinatorResult, ShardContext
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.context import CoordinatorState, IllegalStateError
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.storage.memory import InMemoryLog

State = CoordinatorState

# A3: Kafka's allowed transitions, and the errors of each state; and ours, a warm standby
# (INITIAL -> STANDBY -> LOADING).

ALLOWED = {
    (State.INITIAL, State.LOADING),
    (State.INITIAL, State.STANDBY),
    (State.STANDBY, State.LOADING),
    (State.FAILED, State.LOADING),
    (State.LOADING, State.ACTIVE),
    (State.ACTIVE, State.ACTIVE),
    (State.LOADING, State.FAILED),
    (State.ACTIVE, State.FAILED),
    *((previous, State.CLOSED) for previous in State),
}


@pytest.mark.parametrize("previous", list(State), ids=lambda s: s.name)
@pytest.mark.parametrize("target", list(State), ids=lambda s: s.name)
def test_state_transitions_follow_kafka(previous: State, target: State) -> None:
    assert target.can_transition_from(previous) == ((previous, target) in ALLOWED)


async def test_an_illegal_transition_raises(harness: Harness) -> None:
    context = harness.runtime.context(0)
    assert context is not None
    with pytest.raises(IllegalStateError):
        context.transition_to(State.LOADING)
    assert harness.runtime.partition_state(0) is State.ACTIVE


async def test_operations_while_loading_fail_with_load_in_progress(harness: Harness) -> None:
    harness.loader.pause_loads()
    harness.runtime.schedule_load(1, 0)
    assert harness.runtime.partition_state(1) is State.LOADING
    with pytest.raises(CoordinatorLoadInProgressError):
        await harness.put(1, "k", 1)
    with pytest.raises(CoordinatorLoadInProgressError):
        await harness.read(1, "k")
    harness.loader.resume_loads()
    await harness.runtime.wait_loaded(1)
    harness.put(1, "k", 1)


async def test_a_partition_announced_answers_load_in_progress_until_it_loads(
    harness: Harness,
) -> None:
    """Between its acquisition (fencing, in a cluster) and its load, a partition this node
    takes over is loading as far as a client can tell."""
    harness.runtime.announce_load(1)
    assert harness.runtime.partition_state(1) is State.INITIAL
    with pytest.raises(CoordinatorLoadInProgressError, match="taken over"):
        await harness.put(1, "k", 1)
    with pytest.raises(CoordinatorLoadInProgressError):
        await harness.read(1, "k")
    harness.runtime.schedule_load(1, 0)
    await harness.runtime.wait_loaded(1)
    written = harness.put(1, "k", 1)
    await settle()
    harness.commit(1)
    await written
    assert await harness.read(1, "k") == 1


async def test_a_partition_announced_then_unloaded_or_failed_is_not_coordinator(
    harness: Harness,
) -> None:
    harness.runtime.announce_load(1)
    harness.runtime.schedule_unload(1, None)
    assert harness.runtime.partition_state(1) is None
    with pytest.raises(NotCoordinatorError):
        await harness.put(1, "k", 1)
    # A load that fails: not loading any more, whatever was announced.
    harness.runtime.announce_load(2)
    harness.loader.inject_load_failure(2)
    harness.runtime.schedule_load(2, 0)
    with pytest.raises(NotCoordinatorError):
        await harness.runtime.wait_loaded(2)
    with pytest.raises(NotCoordinatorError):
        await harness.put(2, "k", 1)


async def test_operations_on_a_partition_not_hosted_fail_with_not_coordinator(
    harness: Harness,
) -> None:
    assert harness.runtime.partition_state(2) is None
    with pytest.raises(NotCoordinatorError):
        await harness.put(2, "k", 1)
    with pytest.raises(NotCoordinatorError):
        await harness.read(2, "k")
    with pytest.raises(NotCoordinatorError):
        await harness.runtime.wait_loaded(2)


async def test_a_node_that_may_not_serve_answers_not_coordinator_at_once_and_serves_again() -> None:
    """A cluster node whose lease ran out answers nothing from its state, reads included,
    asked synchronously: no timer of its has to run first."""
    serving = [True]
    harness = Harness(auto_commit=True, may_serve=lambda: serving[0])
    await harness.load(0)
    await harness.put(0, "k", 1)
    serving[0] = False
    with pytest.raises(NotCoordinatorError, match="lease"):
        await harness.put(0, "k", 2)
    with pytest.raises(NotCoordinatorError, match="lease"):
        await harness.read(0, "k")
    serving[0] = True
    assert await harness.read(0, "k") == 1
    await harness.put(0, "k", 3)
    assert await harness.read(0, "k") == 3


async def test_operations_on_a_failed_partition_fail_with_not_coordinator(
    harness: Harness,
) -> None:
    harness.loader.inject_load_failure(1)
    harness.runtime.schedule_load(1, 0)
    with pytest.raises(NotCoordinatorError):
        await harness.runtime.wait_loaded(1)
    assert harness.runtime.partition_state(1) is State.FAILED
    with pytest.raises(NotCoordinatorError):
        await harness.put(1, "k", 1)
    with pytest.raises(NotCoordinatorError):
        await harness.read(1, "k")


async def test_queued_writes_fail_when_the_partition_leaves_active_first(
    harness: Harness,
) -> None:
    queued = harness.put(0, "k", 1)
    harness.runtime.schedule_unload(0, None)
    with pytest.raises(NotCoordinatorError):
        await queued


# A4: epoch-guarded loads.


async def test_load_replays_the_committed_log_into_a_fresh_shard(harness: Harness) -> None:
    writer = harness.writer
    await writer.append(1, [encode_record(put_record("a", 1)), encode_record(put_record("b", 2))])
    writer.commit(1)
    await writer.append(1, [encode_record(put_record("uncommitted", 3))])

    shard = await harness.load(1, epoch=4)

    assert harness.runtime.partition_state(1) is State.ACTIVE
    assert shard.replayed == [(0, "a"), (1, "b")]
    assert shard.latest() == {"a": 1, "b": 2}
    assert harness.committed_state(1) == {"a": 1, "b": 2}
    assert harness.runtime.last_written_offset(1) == 2
    assert harness.runtime.last_committed_offset(1) == 2
    # Loaded state is committed: nothing to revert, and the registry kept no history.
    assert shard.context.snapshot_registry.uncommitted_changes == 0
    stats = harness.runtime.partition_stats(1)
    assert stats is not None and stats.epoch == 4


async def test_load_with_an_epoch_not_above_the_current_one_is_ignored(harness: Harness) -> None:
    await harness.load(1, epoch=5)
    first = harness.shard(1)
    harness.runtime.schedule_load(1, 5)
    harness.runtime.schedule_load(1, 3)
    await settle()
    assert harness.shards[1] == [first]
    stats = harness.runtime.partition_stats(1)
    assert stats is not None and stats.epoch == 5


async def test_load_with_a_higher_epoch_of_an_active_partition_only_takes_the_epoch(
    harness: Harness,
) -> None:
    await harness.load(1, epoch=5)
    harness.runtime.schedule_load(1, 6)
    await settle()
    assert len(harness.shards[1]) == 1
    assert harness.runtime.partition_state(1) is State.ACTIVE
    stats = harness.runtime.partition_stats(1)
    assert stats is not None and stats.epoch == 6


async def test_load_with_a_higher_epoch_while_loading_only_takes_the_epoch(
    harness: Harness,
) -> None:
    harness.loader.pause_loads()
    harness.runtime.schedule_load(1, 1)
    harness.runtime.schedule_load(1, 2)
    harness.loader.resume_loads()
    await harness.runtime.wait_loaded(1)
    assert len(harness.shards[1]) == 1
    stats = harness.runtime.partition_stats(1)
    assert stats is not None and stats.epoch == 2


async def test_failed_load_goes_failed_and_a_higher_epoch_retries(harness: Harness) -> None:
    await harness.writer.append(1, [encode_record(put_record("a", 1))])
    harness.writer.commit(1)
    harness.loader.inject_load_failure(1)
    harness.runtime.schedule_load(1, 3)
    await settle()
    assert harness.runtime.partition_state(1) is State.FAILED
    failed = harness.shard(1)
    assert failed.unloaded == 1 and failed.loaded == 0

    harness.runtime.schedule_load(1, 3)
    await settle()
    assert harness.runtime.partition_state(1) is State.FAILED
    assert harness.shards[1] == [failed]

    shard = await harness.load(1, epoch=4)
    assert shard is not failed
    assert shard.latest() == {"a": 1}


async def test_a_replay_error_while_loading_fails_the_load(harness: Harness) -> None:
    await harness.writer.append(1, [(b"not msgpack", b"")])
    harness.writer.commit(1)
    harness.runtime.schedule_load(1, 0)
    await settle()
    assert harness.runtime.partition_state(1) is State.FAILED


async def test_a_shard_that_cannot_be_built_fails_the_load() -> None:
    def build(context: ShardContext) -> KeyValueShard:
        raise RuntimeError("no shard today")

    log = InMemoryLog(2)
    runtime: CoordinatorRuntime[KeyValueShard] = CoordinatorRuntime(
        shard_builder=build, writer=log.writer, loader=log.loader, clock=ManualClock()
    )
    runtime.schedule_load(1, 0)
    assert runtime.partition_state(1) is State.FAILED
    runtime.close()
    await settle()


async def test_a_failing_on_loaded_fails_the_load(harness: Harness) -> None:
    def explode(shard: KeyValueShard) -> None:
        raise RuntimeError("cannot arm timers")

    harness.on_loaded_hooks[1] = explode
    harness.runtime.schedule_load(1, 0)
    with pytest.raises(NotCoordinatorError):
        await harness.runtime.wait_loaded(1)
    assert harness.runtime.partition_state(1) is State.FAILED
    assert harness.shard(1).unloaded == 1


# A5: epoch-guarded unloads.


async def test_unload_with_an_epoch_not_above_the_current_one_is_ignored(
    harness: Harness,
) -> None:
    shard = await harness.load(1, epoch=5)
    harness.runtime.schedule_unload(1, 5)
    harness.runtime.schedule_unload(1, 4)
    assert harness.runtime.partition_state(1) is State.ACTIVE
    assert shard.unloaded == 0

    harness.runtime.schedule_unload(1, 6)
    assert harness.runtime.partition_state(1) is None
    assert 1 not in harness.runtime.partitions()
    assert shard.unloaded == 1


async def test_unload_without_an_epoch_always_unloads(harness: Harness) -> None:
    shard = await harness.load(1, epoch=9)
    harness.runtime.schedule_unload(1, None)
    assert harness.runtime.partition_state(1) is None
    assert shard.unloaded == 1


async def test_unload_of_a_partition_never_loaded_does_nothing(harness: Harness) -> None:
    harness.runtime.schedule_unload(2, 7)
    assert harness.runtime.partitions() == {0: State.ACTIVE}


async def test_unload_while_loading_abandons_the_load(harness: Harness) -> None:
    harness.loader.pause_loads()
    harness.runtime.schedule_load(1, 0)
    harness.runtime.schedule_unload(1, None)
    harness.loader.resume_loads()
    await settle()
    assert harness.runtime.partition_state(1) is None
    assert harness.shard(1).loaded == 0


async def test_reload_after_unload_rebuilds_the_state_from_the_log(harness: Harness) -> None:
    future = harness.put(0, "k", 1)
    await settle()
    harness.commit(0)
    await future
    first = harness.shard(0)
    harness.runtime.schedule_unload(0, 1)
    shard = await harness.load(0, epoch=2)
    assert shard is not first
    assert shard.latest() == {"k": 1}
    assert await harness.read(0, "k") == 1


async def test_unload_fails_parked_and_queued_operations_with_not_coordinator(
    harness: Harness,
) -> None:
    appended = harness.put(0, "a", 1)
    await settle()
    harness.writer.pause_appends()
    in_flight = harness.put(0, "b", 2)
    await settle()
    open_batch = harness.put(0, "c", 3)
    waiting = harness.write(0, get_latest("c"))
    await settle()
    queued = harness.put(0, "d", 4)
    shard = harness.shard(0)

    harness.runtime.schedule_unload(0, None)

    for future in (appended, in_flight, open_batch, waiting, queued):
        with pytest.raises(NotCoordinatorError):
            await future
    assert shard.unloaded == 1
    assert harness.clock.pending_timers == 0
    # An append that lands after the unload changes nothing.
    harness.writer.resume_appends()
    await settle()
    harness.commit(0)
    await settle()
    assert harness.runtime.partition_state(0) is None


# A6: on_loaded runs once the partition is active.


async def test_on_loaded_runs_when_the_partition_becomes_active(harness: Harness) -> None:
    states: list[State | None] = []
    harness.on_loaded_hooks[1] = lambda shard: states.append(harness.runtime.partition_state(1))
    shard = await harness.load(1)
    assert shard.loaded == 1
    assert states == [State.ACTIVE]


async def test_on_loaded_may_arm_timers_that_write(harness: Harness) -> None:
    def arm(shard: KeyValueShard) -> None:
        shard.context.timer.schedule(
            "sweep", 100, lambda: CoordinatorResult([put_record("swept", 1)])
        )

    harness.on_loaded_hooks[1] = arm
    shard = await harness.load(1)
    harness.clock.advance(100)
    await settle()
    assert shard.latest() == {"swept": 1}


async def test_wait_loaded_waits_for_the_load(harness: Harness) -> None:
    harness.loader.pause_loads()
    harness.runtime.schedule_load(1, 0)
    waiting = asyncio.ensure_future(harness.runtime.wait_loaded(1))
    await settle()
    assert not waiting.done()
    harness.loader.resume_loads()
    await waiting
    assert harness.runtime.partition_state(1) is State.ACTIVE


async def test_the_starts_loads_are_summed_up_and_every_later_load_has_its_line(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """The start's loads are in the server's ready line; a load after it (a takeover, a
    reload) is logged at INFO, which operators and the failover bench read."""

    def loaded(partition: int) -> list[int]:
        return [
            record.levelno
            for record in caplog.records
            if record.getMessage().startswith(f"partition={partition} loaded ")
        ]

    caplog.set_level(logging.DEBUG, logger="coordinator_server.runtime")
    await harness.load(1)
    assert loaded(1) == [logging.DEBUG]
    harness.runtime.first_loads_done()
    await harness.load(2)
    assert loaded(2) == [logging.INFO]
