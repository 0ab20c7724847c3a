"""The shard's door for the end of a transaction on the log, shared by the transaction
service (WriteTxnMarkers between nodes) and the markers' completion: the writes that commit
or drop a producer's transactional offsets on a log partition and that complete the
transaction, scheduled on the runtime and their failures mapped to Kafka's codes in one place.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from coordinator_protocol.errors import ErrorCode
from coordinator_server.records import RefusedMarkers
from coordinator_server.runtime.api import CoordinatorResult
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service.errors import map_operation_error
from coordinator_server.shard import TransactionShard
from coordinator_server.transactions.results import CompleteTransactionResult, PendingCompleteTxn

__all__ = ["TransactionEnds"]

END_OFFSETS = "end-transaction-offsets"
COMPLETE = "complete-transaction"


class TransactionEnds:
    __slots__ = ("_runtime",)

    def __init__(self, runtime: CoordinatorRuntime[TransactionShard]) -> None:
        self._runtime = runtime

    def end_offsets(
        self, log_partition: int, producer_id: int, producer_epoch: int, committed: bool
    ) -> asyncio.Future[int]:
        """Commit or drop the producer's transactional offsets on `log_partition` (a repeat
        is a no-op); the future's result is NONE once written, or the failure's code."""
        outcome = self._runtime.write(
            END_OFFSETS,
            log_partition,
            lambda shard: shard.complete_transaction_offsets(
                producer_id, producer_epoch, committed
            ),
        )
        code: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future = outcome.future
        if future is None:
            code.set_result(_code(outcome.error))
            return code

        def written(f: asyncio.Future[Any]) -> None:
            if not code.done():
                code.set_result(_code(asyncio.CancelledError() if f.cancelled() else f.exception()))

        future.add_done_callback(written)
        return code

    async def complete(
        self,
        partition: int,
        completion: PendingCompleteTxn,
        refused: RefusedMarkers,
        in_state: Callable[[], None] | None = None,
    ) -> CompleteTransactionResult | ErrorCode:
        """Write CompleteCommit or CompleteAbort for `completion` on its partition: the
        write's result once committed, or the code of its failure. `in_state` is called as
        soon as the write has run on the partition, before its record is committed: the
        partition's next write sees the transaction complete, and is committed after it or
        fails with it."""

        def complete(shard: TransactionShard) -> CoordinatorResult[CompleteTransactionResult]:
            result = shard.complete_txn(
                completion.transactional_id,
                completion.producer_id,
                completion.producer_epoch,
                completion.committed,
                completion.prepared_ms,
                refused,
            )
            if in_state is not None:
                in_state()
            return result

        outcome = self._runtime.write(COMPLETE, partition, complete)
        try:
            if outcome.future is None:
                if outcome.error is not None:
                    raise outcome.error
                return cast(CompleteTransactionResult, outcome.response)
            return await outcome.future
        except asyncio.CancelledError:
            raise
        except Exception as error:
            return map_operation_error(COMPLETE, error)[0]


def _code(error: BaseException | None) -> int:
    return ErrorCode.NONE if error is None else map_operation_error(END_OFFSETS, error)[0]
