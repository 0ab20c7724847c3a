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

from completion_node import (
    EPOCH,
    PID,
    PREPARED_MS,
    TXN_PARTITION,
    CompletionNode,
    wait_for,
)

from coordinator_protocol.errors import ErrorCode
from coordinator_server.markers.channel import TxnMarkerChannel
from coordinator_server.transactions.metadata import TransactionState

# The group's log partition: another node's.
GROUP_PARTITION = 1


class Node(CompletionNode):
    def __init__(self) -> None:
        super().__init__(num_partitions=2, log_partitions=(GROUP_PARTITION,))
        self.peer_calls: list[tuple[int, int, int, bool]] = []
        self.answer: Callable[[], int] = lambda: ErrorCode.NONE

    async def peers(self, log_partition: int, pid: int, epoch: int, committed: bool) -> int:
        self.peer_calls.append((log_partition, pid, epoch, committed))
        return self.answer()

    async def channel(self) -> TxnMarkerChannel:
        return await self.start(self.peers)


async def test_a_prepared_commit_ends_its_offsets_at_the_peer_then_completes() -> None:
    node = Node()
    completions = await node.channel()
    completion = await node.pending_completion()
    completions.submit(TXN_PARTITION, completion)
    await wait_for(lambda: node.state() == "CompleteCommit", "the completion")
    assert node.peer_calls == [(GROUP_PARTITION, PID, EPOCH, True)]
    await completions.stop()


async def test_a_node_without_its_lease_sends_no_marker_to_the_peer() -> None:
    node = Node()
    completions = await node.channel()
    completion = await node.pending_completion()
    node.lease = False
    completions.submit(TXN_PARTITION, completion)
    await wait_for(lambda: completions.in_flight == 0, "the end to give up")
    assert node.peer_calls == []
    node.lease = True
    assert node.state() == "PrepareCommit", "left for whoever serves the partition"
    await completions.stop()


async def test_a_node_whose_lease_runs_out_between_retries_sends_no_more_markers() -> None:
    node = Node()
    completions = await node.channel()
    completion = await node.pending_completion()

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
    completions = await node.channel()
    completion = await node.pending_completion()
    calls = 0
    writes: list[asyncio.Future[object]] = []

    def ended_elsewhere() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            # Another owner ended it and the producer began its next transaction: the
            # record here says so (as a reload would show it).
            writes.append(
                asyncio.ensure_future(node.put(TransactionState.ONGOING, PREPARED_MS + 1_000))
            )
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    node.answer = ended_elsewhere
    completions.submit(TXN_PARTITION, completion)
    await wait_for(lambda: completions.in_flight == 0, "the end to give up")
    assert calls == 1, "a marker for the transaction that is no longer prepared"
    assert node.state() == "Ongoing"
    await completions.stop()
