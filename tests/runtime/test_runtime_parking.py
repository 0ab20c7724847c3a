"""Parked callers, in-memory updates, completions and follow-ups after a failed append.

These extend Kafka's model for the classic group protocol, where a JoinGroup waits for
other members and is answered by whichever operation ends the join phase.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from runtime_harness import Harness, KeyValueShard, put_record, settle

from coordinator_protocol.errors import NotCoordinatorError, RebalanceInProgressError
from coordinator_server.runtime.api import CoordinatorResult, ResponseHandle
from coordinator_server.storage.api import AppendError


class Lobby:
    """Holds parked handles by name (test-side state, as a group holds its members')."""

    def __init__(self) -> None:
        self.waiting: dict[str, ResponseHandle] = {}


def wait_op(
    lobby: Lobby, name: str, *, record: bool = False
) -> Callable[[KeyValueShard, ResponseHandle], CoordinatorResult[Any]]:
    def op(shard: KeyValueShard, handle: ResponseHandle) -> CoordinatorResult[Any]:
        lobby.waiting[name] = handle
        records = [put_record(name, 1)] if record else []
        return CoordinatorResult(records, park=True)

    return op


def release_op(
    lobby: Lobby, answer: object, *, record: bool = True, on_failure: Any = None
) -> Callable[[KeyValueShard], CoordinatorResult[Any]]:
    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        completions = [(h, answer) for h in lobby.waiting.values()]
        records = [put_record("released", 1)] if record else []
        return CoordinatorResult(
            records, "released", completions=completions, on_append_failure=on_failure
        )

    return op


async def test_a_parked_caller_is_answered_by_a_later_operation_once_it_commits(
    harness: Harness,
) -> None:
    lobby = Lobby()
    waiting = harness.parkable_write("wait", 0, wait_op(lobby, "a"))
    await settle()
    assert not waiting.done() and "a" in lobby.waiting
    release = harness.write(0, release_op(lobby, "go"))
    await settle()
    # The completion waits for the releasing operation's records to commit.
    assert not waiting.done() and not release.done()
    harness.commit(0)
    await settle()
    assert waiting.result() == "go"
    assert release.result() == "released"


async def test_a_parked_caller_outlives_the_write_timeout_once_its_records_commit(
    harness: Harness,
) -> None:
    lobby = Lobby()
    waiting = harness.parkable_write("wait", 0, wait_op(lobby, "a", record=True))
    await settle()
    harness.commit(0)
    await settle()
    harness.clock.advance(harness.config.write_timeout_ms * 3)
    await settle()
    assert not waiting.done()
    harness.write(0, release_op(lobby, "late", record=False))
    await settle()
    assert waiting.result() == "late"


async def test_a_parked_caller_whose_records_do_not_commit_in_time_times_out(
    harness: Harness,
) -> None:
    from coordinator_protocol.errors import RequestTimedOutError

    lobby = Lobby()
    waiting = harness.parkable_write("wait", 0, wait_op(lobby, "a", record=True))
    await settle()
    harness.clock.advance(harness.config.write_timeout_ms)
    await settle()
    with pytest.raises(RequestTimedOutError):
        waiting.result()


async def test_an_error_completion_fails_the_parked_caller(harness: Harness) -> None:
    lobby = Lobby()
    waiting = harness.parkable_write("wait", 0, wait_op(lobby, "a"))
    await settle()
    harness.write(0, release_op(lobby, RebalanceInProgressError("again"), record=False))
    await settle()
    with pytest.raises(RebalanceInProgressError):
        waiting.result()


async def test_a_failed_append_fails_the_completions_and_runs_the_follow_up(
    harness: Harness,
) -> None:
    lobby = Lobby()
    waiting = harness.parkable_write("wait", 0, wait_op(lobby, "a"))
    await settle()
    followed: list[str] = []

    def follow_up() -> CoordinatorResult[Any]:
        followed.append("ran")
        return CoordinatorResult([put_record("after", 2)], None)

    harness.writer.inject_append_failure(0, 19)
    release = harness.write(0, release_op(lobby, "go", on_failure=follow_up))
    await settle()
    with pytest.raises(AppendError):
        release.result()
    with pytest.raises(AppendError):
        waiting.result()
    assert followed == ["ran"]
    harness.commit(0)
    await settle()
    assert harness.committed_state(0) == {"after": 2}


async def test_unload_fails_every_parked_caller_with_not_coordinator(harness: Harness) -> None:
    lobby = Lobby()
    waiters = [harness.parkable_write("wait", 0, wait_op(lobby, name)) for name in ("a", "b")]
    await settle()
    harness.runtime.schedule_unload(0, 1)
    await settle()
    for waiter in waiters:
        with pytest.raises(NotCoordinatorError):
            waiter.result()


async def test_updates_without_records_are_visible_at_once_when_nothing_is_pending(
    harness: Harness,
) -> None:
    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult(updates=[("set", "transient", 5)], response="done")

    done = harness.write(0, op)
    await settle()
    assert done.result() == "done"
    assert await harness.read(0, "transient") == 5


async def test_updates_outside_a_batch_survive_a_later_failed_append(harness: Harness) -> None:
    def set_transient(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult(updates=[("set", "transient", 5)], response="done")

    await asyncio.wait_for(harness.write(0, set_transient), 1)
    harness.writer.inject_append_failure(0, 19)
    failed = harness.put(0, "k", 1)
    await settle()
    with pytest.raises(AppendError):
        failed.result()
    assert harness.shard(0).latest() == {"transient": 5}


async def test_updates_with_records_are_reverted_with_them(harness: Harness) -> None:
    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult([put_record("k", 1)], "ok", updates=[("set", "transient", 5)])

    harness.writer.inject_append_failure(0, 19)
    failed = harness.write(0, op)
    await settle()
    with pytest.raises(AppendError):
        failed.result()
    assert harness.shard(0).latest() == {}


async def test_updates_are_applied_after_the_records_are_replayed(harness: Harness) -> None:
    # An update carries what the records do not: it has the last word over their replay.
    def op(shard: KeyValueShard) -> CoordinatorResult[Any]:
        return CoordinatorResult([put_record("k", 1)], "ok", updates=[("set", "k", 7)])

    done = harness.write(0, op)
    await settle()
    assert harness.shard(0).replayed == [(0, "k")]
    assert harness.shard(0).latest() == {"k": 7}
    harness.commit(0)
    await settle()
    assert done.result() == "ok"
    assert len(harness.writer.entries(0)) == 1
    assert harness.committed_state(0) == {"k": 7}
