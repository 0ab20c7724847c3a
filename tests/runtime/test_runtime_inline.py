"""run_when_idle: a write scheduled while its partition is idle runs at once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from runtime_harness import Harness, KeyValueShard, get_latest, put, settle

from coordinator_protocol.errors import (
    InvalidGroupIdError,
    NotCoordinatorError,
    RequestTimedOutError,
)
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.config import RuntimeConfig


async def inline_harness(make_harness: Callable[..., Harness]) -> Harness:
    h = make_harness(config=RuntimeConfig(run_when_idle=True))
    await h.load(0)
    return h


async def test_a_write_without_records_completes_before_schedule_returns(
    make_harness: Callable[..., Harness],
) -> None:
    h = await inline_harness(make_harness)
    future = h.write(0, get_latest("k"))
    assert future.done()
    assert future.result() is None
    assert h.runtime.queue_depth(0) == 0


async def test_writes_of_one_turn_still_share_one_append(
    make_harness: Callable[..., Harness],
) -> None:
    h = await inline_harness(make_harness)
    futures = [h.put(0, f"k{i}", i) for i in range(50)]
    # They ran already (the state has them) but wait for the log.
    assert h.shard(0).latest() == {f"k{i}": i for i in range(50)}
    assert not any(future.done() for future in futures)
    await settle()
    assert h.writer.batches(0) == [(0, 50)]
    h.commit(0)
    assert len(await asyncio.gather(*futures)) == 50


async def test_a_read_of_the_latest_state_still_waits_for_pending_writes(
    make_harness: Callable[..., Harness],
) -> None:
    h = await inline_harness(make_harness)
    written = h.put(0, "k", 7)
    read = h.write(0, get_latest("k"))
    assert not read.done()
    await settle()
    h.commit(0)
    assert await written == "put k=7"
    assert await read == 7


async def test_a_write_scheduled_by_a_running_operation_waits_its_turn(
    make_harness: Callable[..., Harness],
) -> None:
    h = await inline_harness(make_harness)
    order: list[str] = []
    inner: list[asyncio.Future[object]] = []

    def outer(shard: KeyValueShard) -> CoordinatorResult[object]:
        order.append("outer starts")
        inner.append(h.write(0, lambda s: (order.append("inner"), put("b", 2)(s))[1]))
        order.append("outer ends")
        return put("a", 1)(shard)

    h.write(0, outer)
    assert order == ["outer starts", "outer ends"]
    await settle()
    assert order == ["outer starts", "outer ends", "inner"]
    h.commit(0)
    assert await inner[0] == "put b=2"


# write(): an outcome with no future when the write is over before it returns.


async def test_write_answers_at_once_what_needs_no_append(
    make_harness: Callable[..., Harness],
) -> None:
    h = await inline_harness(make_harness)
    done = h.runtime.write("read", 0, get_latest("k"))
    assert done.future is None
    assert (done.response, done.error) == (None, None)


async def test_write_answers_a_refusal_at_once(make_harness: Callable[..., Harness]) -> None:
    h = await inline_harness(make_harness)
    refused = h.runtime.write("read", 1, get_latest("k"))
    assert refused.future is None
    assert isinstance(refused.error, NotCoordinatorError)

    def failing(shard: KeyValueShard) -> CoordinatorResult[None]:
        raise InvalidGroupIdError("bad")

    failed = h.runtime.write("fail", 0, failing)
    assert failed.future is None
    assert isinstance(failed.error, InvalidGroupIdError)


async def test_write_hands_a_future_to_what_waits_for_the_log(
    make_harness: Callable[..., Harness],
) -> None:
    h = await inline_harness(make_harness)
    written = h.runtime.write("put", 0, put("k", 1)).future
    assert written is not None and not written.done()
    # Run at once, but it must wait for the pending put: it parks, and gets a future.
    behind = h.runtime.write("read", 0, get_latest("k")).future
    assert behind is not None and not behind.done()
    await settle()
    h.commit(0)
    assert await written == "put k=1"
    assert await behind == 1


async def test_a_parked_inline_write_still_times_out(make_harness: Callable[..., Harness]) -> None:
    h = await inline_harness(make_harness)
    h.runtime.write("put", 0, put("k", 1))
    behind = h.runtime.write("read", 0, get_latest("k")).future
    assert behind is not None
    await settle()
    h.clock.advance(h.config.write_timeout_ms + 1)
    with pytest.raises(RequestTimedOutError):
        await behind


async def test_write_applies_the_updates_of_a_write_run_at_once(
    make_harness: Callable[..., Harness],
) -> None:
    h = await inline_harness(make_harness)

    def update(shard: KeyValueShard) -> CoordinatorResult[str]:
        return CoordinatorResult(updates=[("set", "transient", 5)], response="done")

    done = h.runtime.write("update", 0, update)
    assert done.future is None
    assert done.response == "done"
    assert h.shard(0).latest() == {"transient": 5}
