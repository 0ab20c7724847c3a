"""A transactional id's next request waits for the end of its last transaction only until the
completion is written to the partition's state, not until the log commits it: the next write
follows the completion in the log, so it is committed after it, or fails with it.

A real runtime and shard on an in-memory log that commits only when the test says so.
"""

from __future__ import annotations

import asyncio

import pytest
from completion_node import TID, TXN_PARTITION, CompletionNode, wait_for

from coordinator_server.storage.error_codes import NOT_ENOUGH_REPLICAS
from coordinator_server.transactions.metadata import TransactionState


async def test_the_end_is_over_for_the_next_request_once_its_completion_is_written() -> None:
    node = CompletionNode(auto_commit=False)
    completions = await node.start()
    completions.submit(TXN_PARTITION, await node.pending_completion())
    ending = completions.ending(TID)
    assert ending is not None
    await asyncio.wait_for(ending, 5)
    # Written, not committed: the end's task still waits for the log.
    assert completions.ending(TID) is None
    assert completions.in_flight == 1
    assert node.state() == "CompleteCommit"
    assert await node.committed_state() == "PrepareCommit"
    # The next write lands after the completion and is answered once both are committed.
    await wait_for(node.appended, "the append")
    completion_end = node.log.writer.end_offset(TXN_PARTITION)
    following = asyncio.ensure_future(node.put(TransactionState.ONGOING))
    await wait_for(lambda: node.log.writer.end_offset(TXN_PARTITION) > completion_end, "the write")
    node.log.writer.commit(TXN_PARTITION, completion_end)
    await wait_for(lambda: completions.in_flight == 0, "the end's task")
    await asyncio.sleep(0.05)
    assert not following.done()
    node.log.writer.commit(TXN_PARTITION)
    await asyncio.wait_for(following, 5)
    assert await node.committed_state() == "Ongoing"
    await completions.stop()


async def test_a_write_after_a_completion_whose_append_fails_fails_with_it() -> None:
    node = CompletionNode(auto_commit=False)
    completions = await node.start()
    node.log.writer.pause_appends()
    completions.submit(TXN_PARTITION, await node.pending_completion())
    ending = completions.ending(TID)
    assert ending is not None
    await asyncio.wait_for(ending, 5)
    following = asyncio.ensure_future(node.put(TransactionState.ONGOING))
    await asyncio.sleep(0.05)
    node.log.writer.inject_append_failure(TXN_PARTITION, NOT_ENOUGH_REPLICAS)
    node.log.writer.resume_appends()
    with pytest.raises(Exception, match="injected"):
        await asyncio.wait_for(following, 5)
    # Nothing of either is in the log; the end is written again and committed.
    assert node.log.writer.end_offset(TXN_PARTITION) == node.hwm()
    await wait_for(node.appended, "the retry")
    node.log.writer.commit(TXN_PARTITION)
    await wait_for(lambda: completions.in_flight == 0, "the end's task")
    assert await node.committed_state() == "CompleteCommit"
    await completions.stop()
