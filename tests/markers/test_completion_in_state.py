"""A transactional id's next request waits for the end of its last transaction only until the
completion is written to the partition's state, not until the log commits it: the next write
follows the completion in the log, so it is committed after it, or fails with it.

A real runtime and shard on an in-memory log that commits only when the test says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from coordinator_server.markers.channel import TxnMarkerChannel
from coordinator_server.records import TransactionValue, new_transaction_record
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.shard import LogPartitionShard, ShardConfig
from coordinator_server.storage.error_codes import NOT_ENOUGH_REPLICAS
from coordinator_server.storage.memory import InMemoryLog
from coordinator_server.transactions.metadata import TransactionState
from coordinator_server.transactions.results import TransactionsConfig

T = TypeVar("T")

TID = "txn-1"
PID = 2**48 + 7
EPOCH = 3
PARTITION = 0
PREPARED_MS = 1_700_000_000_000


class Node:
    def __init__(self) -> None:
        self.log = InMemoryLog(1, auto_commit=False)
        self.runtime = CoordinatorRuntime[LogPartitionShard](
            shard_builder=lambda context: LogPartitionShard(
                context, ShardConfig(transactions=TransactionsConfig(num_partitions=1))
            ),
            writer=self.log.writer,
            loader=self.log.loader,
            clock=ManualClock(PREPARED_MS),
        )

    async def start(self) -> TxnMarkerChannel:
        self.runtime.schedule_load(PARTITION, 0)
        await self.runtime.wait_loaded(PARTITION)
        await self.committed(self.put(TransactionState.PREPARE_COMMIT))
        return TxnMarkerChannel(self.runtime, None, coordinator_epoch=lambda _: 0)

    def put(self, state: TransactionState) -> Awaitable[Any]:
        """The transaction's record in `state` (no partitions, no offsets), written; the
        future is done once it is committed."""
        value = TransactionValue(
            PID, PID, -1, EPOCH, -1, 60_000, int(state), (), (),
            PREPARED_MS - 100, PREPARED_MS,
        )  # fmt: skip
        record = new_transaction_record(TID, value)
        return self.runtime.schedule_write(
            "put-transaction",
            PARTITION,
            lambda _: CoordinatorResult(records=[record], response=None),
        )

    async def committed(self, write: Awaitable[T]) -> T:
        task = asyncio.ensure_future(write)
        await wait_for(lambda: self.log.writer.end_offset(PARTITION) > self.hwm(), "the append")
        self.log.writer.commit(PARTITION)
        return await asyncio.wait_for(task, 5)

    def hwm(self) -> int:
        return self.log.writer.high_watermark(PARTITION)

    async def state(self, as_of_committed: bool = False) -> str:
        """The transaction's state: the latest, or as of the committed offset."""

        def describe(shard: LogPartitionShard, offset: int) -> str:
            (described,) = shard.describe_transactions([TID], offset if as_of_committed else None)
            return described.state

        return await self.runtime.schedule_read("describe", PARTITION, describe)


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def pending_completion(node: Node) -> Any:
    (completion,) = await node.runtime.schedule_read(
        "pending", PARTITION, lambda shard, offset: shard.pending_completions(offset)
    )
    return completion


async def test_the_end_is_over_for_the_next_request_once_its_completion_is_written() -> None:
    node = Node()
    completions = await node.start()
    completions.submit(PARTITION, await pending_completion(node))
    ending = completions.ending(TID)
    assert ending is not None
    await asyncio.wait_for(ending, 5)
    # Written, not committed: the end's task still waits for the log.
    assert completions.ending(TID) is None
    assert completions.in_flight == 1
    assert await node.state() == "CompleteCommit"
    assert await node.state(as_of_committed=True) == "PrepareCommit"
    # The next write lands after the completion and is answered once both are committed.
    await wait_for(lambda: node.log.writer.end_offset(PARTITION) > node.hwm(), "the append")
    completion_end = node.log.writer.end_offset(PARTITION)
    following = asyncio.ensure_future(node.put(TransactionState.ONGOING))
    await wait_for(lambda: node.log.writer.end_offset(PARTITION) > completion_end, "the write")
    node.log.writer.commit(PARTITION, completion_end)
    await wait_for(lambda: completions.in_flight == 0, "the end's task")
    await asyncio.sleep(0.05)
    assert not following.done()
    node.log.writer.commit(PARTITION)
    await asyncio.wait_for(following, 5)
    assert await node.state(as_of_committed=True) == "Ongoing"
    await completions.stop()


async def test_a_write_after_a_completion_whose_append_fails_fails_with_it() -> None:
    node = Node()
    completions = await node.start()
    node.log.writer.pause_appends()
    completions.submit(PARTITION, await pending_completion(node))
    ending = completions.ending(TID)
    assert ending is not None
    await asyncio.wait_for(ending, 5)
    following = asyncio.ensure_future(node.put(TransactionState.ONGOING))
    await asyncio.sleep(0.05)
    node.log.writer.inject_append_failure(PARTITION, NOT_ENOUGH_REPLICAS)
    node.log.writer.resume_appends()
    with pytest.raises(Exception, match="injected"):
        await asyncio.wait_for(following, 5)
    # Nothing of either is in the log; the end is written again and committed.
    assert node.log.writer.end_offset(PARTITION) == node.hwm()
    await wait_for(lambda: node.log.writer.end_offset(PARTITION) > node.hwm(), "the retry")
    node.log.writer.commit(PARTITION)
    await wait_for(lambda: completions.in_flight == 0, "the end's task")
    assert await node.state(as_of_committed=True) == "CompleteCommit"
    await completions.stop()
