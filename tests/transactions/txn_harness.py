"""What the transaction tests share: a shard test context with the transaction settings, and
metadata put in place through its record, as Kafka's tests put a TransactionMetadata in
their mocked state manager."""

from __future__ import annotations

from typing import Any

from shard_context import ShardTestContext

from coordinator_server.records import TransactionValue, new_transaction_record
from coordinator_server.shard import ShardConfig
from coordinator_server.transactions.metadata import TransactionMetadata, TransactionState
from coordinator_server.transactions.results import TransactionsConfig

TID = "txn-1"
PID = 2**48 + 7
TIMEOUT_MS = 60_000
PARTITIONS = (("orders", (0, 1)),)


def txn_context(**settings: Any) -> ShardTestContext:
    return ShardTestContext(ShardConfig(transactions=TransactionsConfig(**settings)))


def seed(
    ctx: ShardTestContext,
    state: TransactionState,
    *,
    tid: str = TID,
    producer_id: int = PID,
    previous_producer_id: int = PID,
    producer_epoch: int = 5,
    last_producer_epoch: int = -1,
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None,
    log_partitions: tuple[int, ...] = (),
    start_ms: int | None = None,
    update_ms: int | None = None,
) -> None:
    """A transactional id in `state`, written to the log and committed."""
    now = ctx.clock.now_ms()
    busy = state in (
        TransactionState.ONGOING,
        TransactionState.PREPARE_COMMIT,
        TransactionState.PREPARE_ABORT,
    )
    value = TransactionValue(
        producer_id,
        previous_producer_id,
        -1,
        producer_epoch,
        last_producer_epoch,
        TIMEOUT_MS,
        int(state),
        (PARTITIONS if busy else ()) if partitions is None else partitions,
        log_partitions,
        (now if busy else -1) if start_ms is None else start_ms,
        now if update_ms is None else update_ms,
    )
    ctx.replay_all([new_transaction_record(tid, value)])
    ctx.commit()


def txn(ctx: ShardTestContext, tid: str = TID) -> TransactionMetadata:
    metadata = ctx.shard.managers.transactions.transaction(tid)
    assert metadata is not None
    return metadata
