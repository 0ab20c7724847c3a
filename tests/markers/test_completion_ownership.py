"""The end of a prepared transaction stops as soon as the transaction is no longer this node's
to end: nothing fences the end of its offsets on a log partition (as the brokers fence data
markers by coordinator epoch), so a node that lost its lease, or whose transaction another
node ended meanwhile, must send no more of them. Otherwise a node resumed after a pause would
end the offsets of the producer's next transaction (the same producer id and epoch).

A real runtime and shard on an in-memory log; the transaction's offsets live on a log
partition this node does not serve, so they go to the other node (`peers`), faked here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from coordinator_protocol.errors import ErrorCode
from coordinator_server.markers.channel import TxnMarkerChannel
from coordinator_server.records import TransactionValue, new_transaction_record
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.shard import LogPartitionShard, ShardConfig
from coordinator_server.storage.memory import InMemoryLog
from coordinator_server.transactions.metadata import TransactionState
from coordinator_server.transactions.results import TransactionsConfig

TID = "txn-1"
PID = 2**48 + 7
EPOCH = 3
TXN_PARTITION = 0
# The group's log partition: another node's.
GROUP_PARTITION = 1
PREPARED_MS = 1_700_000_000_000


class Node:
    def __init__(self) -> None:
        self.lease = True
        self.runtime = CoordinatorRuntime[LogPartitionShard](
            shard_builder=lambda context: LogPartitionShard(
                context, ShardConfig(transactions=TransactionsConfig(num_partitions=2))
            ),
            writer=(log := InMemoryLog(2)).writer,
            loader=log.loader,
            clock=ManualClock(PREPARED_MS),
            may_serve=lambda: self.lease,
        )
        self.peer_calls: list[tuple[int, int, int, bool]] = []
        self.answer: Callable[[], int] = lambda: ErrorCode.NONE

    async def peers(self, log_partition: int, pid: int, epoch: int, committed: bool) -> int:
        self.peer_calls.append((log_partition, pid, epoch, committed))
        return self.answer()

    async def start(self) -> TxnMarkerChannel:
        self.runtime.schedule_load(TXN_PARTITION, 0)
        await self.runtime.wait_loaded(TXN_PARTITION)
        await self.put(TransactionState.PREPARE_COMMIT)
        return TxnMarkerChannel(self.runtime, None, coordinator_epoch=lambda _: 0, peers=self.peers)

    async def put(self, state: TransactionState, update_ms: int = PREPARED_MS) -> None:
        """The transaction's record, as its coordinator writes it."""
        value = TransactionValue(
            PID, PID, -1, EPOCH, -1, 60_000, int(state), (), (GROUP_PARTITION,),
            PREPARED_MS - 100, update_ms,
        )  # fmt: skip
        record = new_transaction_record(TID, value)
        await self.runtime.schedule_write(
            "put-transaction",
            TXN_PARTITION,
            lambda _: CoordinatorResult(records=[record], response=None),
        )

    def state(self) -> str:
        shard = self.runtime.shard(TXN_PARTITION)
        assert shard is not None
        (described,) = shard.describe_transactions([TID], None)
        return described.state


async def pending(node: Node) -> list:
    return await node.runtime.schedule_read(
        "pending", TXN_PARTITION, lambda shard, offset: shard.pending_completions(offset)
    )


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_prepared_commit_ends_its_offsets_at_the_peer_then_completes() -> None:
    node = Node()
    completions = await node.start()
    (completion,) = await pending(node)
    completions.submit(TXN_PARTITION, completion)
    await wait_for(lambda: node.state() == "CompleteCommit", "the completion")
    assert node.peer_calls == [(GROUP_PARTITION, PID, EPOCH, True)]
    await completions.stop()


async def test_a_node_without_its_lease_sends_no_marker_to_the_peer() -> None:
    node = Node()
    completions = await node.start()
    (completion,) = await pending(node)
    node.lease = False
    completions.submit(TXN_PARTITION, completion)
    await wait_for(lambda: completions.in_flight == 0, "the end to give up")
    assert node.peer_calls == []
    node.lease = True
    assert node.state() == "PrepareCommit", "left for whoever serves the partition"
    await completions.stop()


async def test_a_node_whose_lease_runs_out_between_retries_sends_no_more_markers() -> None:
    node = Node()
    completions = await node.start()
    (completion,) = await pending(node)

    def paused_past_its_session() -> int:
        # The peer could not be reached; meanwhile the node's lease ran out (a pause): the
        # partition is still ACTIVE here, as a resumed node sees it before its membership
        # catches up.
        node.lease = False
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    node.answer = paused_past_its_session
    completions.submit(TXN_PARTITION, completion)
    await wait_for(lambda: completions.in_flight == 0, "the end to give up")
    assert len(node.peer_calls) == 1
    await completions.stop()


async def test_a_transaction_ended_meanwhile_is_not_ended_again() -> None:
    node = Node()
    completions = await node.start()
    (completion,) = await pending(node)
    calls = 0

    def ended_elsewhere() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            # Another owner ended it and the producer began its next transaction: the
            # record here says so (as a reload would show it).
            asyncio.get_running_loop().create_task(
                node.put(TransactionState.ONGOING, PREPARED_MS + 1_000)
            )
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    node.answer = ended_elsewhere
    completions.submit(TXN_PARTITION, completion)
    await wait_for(lambda: completions.in_flight == 0, "the end to give up")
    assert calls == 1, "a marker for the transaction that is no longer prepared"
    assert node.state() == "Ongoing"
    await completions.stop()
