"""A partition whose appends keep failing leaves ACTIVE (append_failure_timeout_ms), and the
runtime's calls for stopping a partition from outside and for noticing it stopped."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from runtime_harness import Harness, settle

from coordinator_protocol.errors import NotCoordinatorError
from coordinator_server.runtime.config import RuntimeConfig
from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.storage.api import AppendError

TIMEOUT_MS = 1000
NOT_ENOUGH_REPLICAS = 19


async def failing_put(harness: Harness, key: str, value: int) -> BaseException | None:
    """A put whose append fails; the error it got."""
    harness.writer.inject_append_failure(0, NOT_ENOUGH_REPLICAS, "not enough replicas")
    future = harness.put(0, key, value)
    await settle()
    assert future.done()
    return future.exception()


@pytest.fixture
async def failing(make_harness: Callable[..., Harness]) -> Harness:
    harness = make_harness(
        config=RuntimeConfig(append_failure_timeout_ms=TIMEOUT_MS), auto_commit=True
    )
    await harness.load(0)
    assert await harness.put(0, "kept", 1) == "put kept=1"
    return harness


async def test_a_partition_whose_appends_all_fail_for_the_timeout_goes_failed(
    failing: Harness,
) -> None:
    assert isinstance(await failing_put(failing, "a", 1), AppendError)
    failing.clock.advance(TIMEOUT_MS - 1)
    assert isinstance(await failing_put(failing, "a", 2), AppendError)
    assert failing.runtime.partition_state(0) is CoordinatorState.ACTIVE

    failing.clock.advance(1)
    error = await failing_put(failing, "a", 3)
    assert isinstance(error, NotCoordinatorError) and "have failed for 1000 ms" in str(error)
    assert failing.runtime.partition_state(0) is CoordinatorState.FAILED
    with pytest.raises(NotCoordinatorError):
        await failing.put(0, "b", 1)

    # Loaded again (the app does it), it serves what was committed before the failures.
    failing.runtime.schedule_load(0, 1)
    await failing.runtime.wait_loaded(0)
    assert failing.committed_state() == {"kept": 1}
    assert await failing.put(0, "b", 1) == "put b=1"


async def test_one_append_that_succeeds_starts_the_count_again(failing: Harness) -> None:
    await failing_put(failing, "a", 1)
    failing.clock.advance(TIMEOUT_MS - 1)
    assert await failing.put(0, "b", 1) == "put b=1"
    failing.clock.advance(1)
    await failing_put(failing, "a", 2)
    failing.clock.advance(TIMEOUT_MS - 1)
    await failing_put(failing, "a", 3)
    assert failing.runtime.partition_state(0) is CoordinatorState.ACTIVE


async def test_a_failure_followed_by_no_writes_leaves_the_partition_active(
    failing: Harness,
) -> None:
    await failing_put(failing, "a", 1)
    failing.clock.advance(10 * TIMEOUT_MS)
    await settle()
    assert failing.runtime.partition_state(0) is CoordinatorState.ACTIVE
    assert await failing.put(0, "b", 1) == "put b=1"


async def test_without_the_timeout_appends_fail_forever_while_active(
    make_harness: Callable[..., Harness],
) -> None:
    harness = make_harness(config=RuntimeConfig(append_failure_timeout_ms=0), auto_commit=True)
    await harness.load(0)
    for value in range(5):
        await failing_put(harness, "a", value)
        harness.clock.advance(60_000)
    assert harness.runtime.partition_state(0) is CoordinatorState.ACTIVE


async def test_fail_partition_stops_loading_and_active_partitions(harness: Harness) -> None:
    parked = harness.put(0, "k", 1)
    harness.loader.pause_loads()
    harness.runtime.schedule_load(1, 0)
    await settle()
    error = NotCoordinatorError("the log stopped")
    harness.runtime.fail_partition(0, error)
    harness.runtime.fail_partition(1, error)
    harness.runtime.fail_partition(2, error)  # never hosted: nothing to do
    assert harness.runtime.partitions() == {0: CoordinatorState.FAILED, 1: CoordinatorState.FAILED}
    assert parked.exception() is error
    harness.loader.resume_loads()
    await settle()
    assert harness.runtime.partition_state(1) is CoordinatorState.FAILED


async def test_wait_left_active_returns_the_state_the_partition_left_for(
    harness: Harness,
) -> None:
    waiting: asyncio.Future[Any] = asyncio.ensure_future(harness.runtime.wait_left_active(0))
    await settle()
    assert not waiting.done()
    harness.runtime.fail_partition(0, NotCoordinatorError("stop"))
    assert await waiting is CoordinatorState.FAILED
    assert await harness.runtime.wait_left_active(2) is None
