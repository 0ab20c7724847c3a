"""One node's transaction coordinator for the tests of a prepared transaction's end: a real
runtime and shard on an in-memory log, a transaction `TID` written prepared on partition 0,
and the markers' channel that ends it. The log commits each append by itself, or, with
`auto_commit=False`, only when the test says so."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from coordinator_server.markers.channel import Peers, TxnMarkerChannel
from coordinator_server.records import TransactionValue, new_transaction_record
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.clock import ManualClock
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.shard import LogPartitionShard, ShardConfig
from coordinator_server.storage.memory import InMemoryLog
from coordinator_server.transactions.metadata import TransactionState
from coordinator_server.transactions.results import TransactionsConfig

T = TypeVar("T")

TID = "txn-1"
PID = 2**48 + 7
EPOCH = 3
TXN_PARTITION = 0
PREPARED_MS = 1_700_000_000_000


class CompletionNode:
    def __init__(
        self,
        *,
        num_partitions: int = 1,
        log_partitions: tuple[int, ...] = (),
        auto_commit: bool = True,
    ) -> None:
        """`log_partitions`: the log partitions holding the transaction's offsets."""
        self.lease = True
        self.log = InMemoryLog(num_partitions, auto_commit=auto_commit)
        self.runtime = CoordinatorRuntime[LogPartitionShard](
            shard_builder=lambda context: LogPartitionShard(
                context,
                ShardConfig(transactions=TransactionsConfig(num_partitions=num_partitions)),
            ),
            writer=self.log.writer,
            loader=self.log.loader,
            clock=ManualClock(PREPARED_MS),
            may_serve=lambda: self.lease,
        )
        self._log_partitions = log_partitions
        self._auto_commit = auto_commit

    async def start(self, peers: Peers | None = None) -> TxnMarkerChannel:
        """The transaction written prepared (PrepareCommit, committed), and the channel."""
        self.runtime.schedule_load(TXN_PARTITION, 0)
        await self.runtime.wait_loaded(TXN_PARTITION)
        await self.committed(self.put(TransactionState.PREPARE_COMMIT))
        return TxnMarkerChannel(self.runtime, None, coordinator_epoch=lambda _: 0, peers=peers)

    def put(self, state: TransactionState, update_ms: int = PREPARED_MS) -> Awaitable[Any]:
        """The transaction's record in `state`, as its coordinator writes it; done once
        committed."""
        value = TransactionValue(
            PID, PID, -1, EPOCH, -1, 60_000, int(state), (), self._log_partitions,
            PREPARED_MS - 100, update_ms,
        )  # fmt: skip
        record = new_transaction_record(TID, value)
        return self.runtime.schedule_write(
            "put-transaction",
            TXN_PARTITION,
            lambda _: CoordinatorResult(records=[record], response=None),
        )

    async def committed(self, write: Awaitable[T]) -> T:
        """`write`'s result, the log's high watermark moved past it by hand if need be."""
        task = asyncio.ensure_future(write)
        if not self._auto_commit:
            await wait_for(self.appended, "the append")
            self.log.writer.commit(TXN_PARTITION)
        return await asyncio.wait_for(task, 5)

    def hwm(self) -> int:
        return self.log.writer.high_watermark(TXN_PARTITION)

    def appended(self) -> bool:
        """Whether the log holds records past its high watermark."""
        return self.log.writer.end_offset(TXN_PARTITION) > self.hwm()

    def state(self) -> str:
        """The transaction's latest state."""
        shard = self.runtime.shard(TXN_PARTITION)
        assert shard is not None
        (described,) = shard.describe_transactions([TID], None)
        return described.state

    async def committed_state(self) -> str:
        """The transaction's state as of the committed offset."""

        def describe(shard: LogPartitionShard, offset: int) -> str:
            (described,) = shard.describe_transactions([TID], offset)
            return described.state

        return await self.runtime.schedule_read("describe", TXN_PARTITION, describe)

    async def pending_completion(self) -> Any:
        (completion,) = await self.runtime.schedule_read(
            "pending", TXN_PARTITION, lambda shard, offset: shard.pending_completions(offset)
        )
        return completion


async def wait_for(predicate: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")
