"""DescribeTransactions and ListTransactions: the transaction coordinator's views, read from
the committed state of the partitions this node serves (Kafka's
`TransactionCoordinator.handleDescribeTransactions` and `handleListTransactions`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from typing import cast

from coordinator_server.runtime.context import CoordinatorState
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.service import PendingReply, Reply
from coordinator_server.service_errors import NO_OWNERSHIP, map_operation_error
from coordinator_server.shard import GroupCoordinatorShard
from coordinator_server.transactions.results import TransactionDescription
from protocol.errors import ErrorCode
from protocol.messages import Message
from protocol.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseState,
    DescribeTransactionsResponseTopic,
    DescribeTransactionsV1Request,
    DescribeTransactionsV1Response,
    DescribeTransactionsV1ResponseRefusedMarker,
    DescribeTransactionsV1ResponseState,
    ListTransactionsRequest,
    ListTransactionsResponse,
    ListTransactionsResponseState,
)


class TransactionViews:
    def __init__(
        self,
        runtime: CoordinatorRuntime[GroupCoordinatorShard],
        partition_for: Callable[[str], int],
        *,
        log_topic: str,
        refused: Callable[[str], bool],
    ) -> None:
        """`refused`: whether a transactional id is refused as the request's (empty, too
        long); `log_topic` names the log partitions a transaction added."""
        self._runtime = runtime
        self._partition_for = partition_for
        self._log_topic = log_topic
        self._refused = refused

    def describe_transactions(
        self, request: DescribeTransactionsRequest | DescribeTransactionsV1Request
    ) -> Reply:
        """Version 1 also answers the markers the id's last completed transaction was
        completed without (refused for good by the brokers)."""
        loop = asyncio.get_running_loop()
        version_1 = isinstance(request, DescribeTransactionsV1Request)
        state_type: type[DescribeTransactionsResponseState] = (
            DescribeTransactionsV1ResponseState if version_1 else DescribeTransactionsResponseState
        )

        def refused_markers(described: TransactionDescription) -> dict[str, object]:
            if not version_1:
                return {}
            return {
                "refused_markers": [
                    DescribeTransactionsV1ResponseRefusedMarker(
                        topic=topic, partition_index=partition, error_code=code
                    )
                    for topic, partition, code in described.refused_markers
                ]
            }

        reads: list[tuple[str, asyncio.Future[list[TransactionDescription]] | None]] = []
        for transactional_id in request.transactional_ids:
            if self._refused(transactional_id):
                reads.append((transactional_id, None))
                continue
            reads.append(
                (
                    transactional_id,
                    self._runtime.schedule_read(
                        "describe-transactions",
                        self._partition_for(transactional_id),
                        _describe_one(transactional_id),
                    ),
                )
            )

        def state_of(
            transactional_id: str, read: asyncio.Future[list[TransactionDescription]] | None
        ) -> DescribeTransactionsResponseState:
            if read is None:
                return state_type(
                    error_code=ErrorCode.INVALID_REQUEST, transactional_id=transactional_id
                )
            if read.cancelled() or read.exception() is not None:
                code, _ = map_operation_error(
                    "describe-transactions", read.exception() or asyncio.CancelledError()
                )
                return state_type(error_code=code, transactional_id=transactional_id)
            (described,) = read.result()
            return state_type(
                error_code=described.error,
                transactional_id=transactional_id,
                transaction_state=described.state,
                transaction_timeout_ms=described.timeout_ms,
                transaction_start_time_ms=described.start_time_ms,
                producer_id=described.producer_id,
                producer_epoch=described.producer_epoch,
                topics=[
                    DescribeTransactionsResponseTopic(topic=topic, partitions=list(partitions))
                    for topic, partitions in described.topics
                ]
                # The log partitions of AddOffsetsToTxn, as Kafka lists its
                # __consumer_offsets partitions.
                + (
                    [
                        DescribeTransactionsResponseTopic(
                            topic=self._log_topic, partitions=list(described.log_partitions)
                        )
                    ]
                    if described.log_partitions
                    else []
                ),
                **refused_markers(described),
            )

        def answer() -> Message:
            states = [state_of(tid, read) for tid, read in reads]
            if version_1:
                return DescribeTransactionsV1Response(
                    transaction_states=cast("list[DescribeTransactionsV1ResponseState]", states)
                )
            return DescribeTransactionsResponse(transaction_states=states)

        futures = [read for _, read in reads if read is not None]
        if not futures:
            return answer()
        reply: asyncio.Future[Message] = loop.create_future()
        gathered = asyncio.gather(*futures, return_exceptions=True)
        gathered.add_done_callback(lambda _: _settle(reply, answer))
        return PendingReply(reply)

    def list_transactions(self, request: ListTransactionsRequest) -> Reply:
        """Every transaction of the partitions this node serves (a client asks every node,
        as Kafka's admin client asks every broker); COORDINATOR_LOAD_IN_PROGRESS while one
        of them loads, as Kafka answers, and COORDINATOR_NOT_AVAILABLE while the node does
        not know which partitions it owns: a list without them would be taken as whole."""
        if not self._runtime.may_serve():
            return ListTransactionsResponse(
                error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=NO_OWNERSHIP
            )
        loading = self._runtime.loading_partitions()
        if loading:
            return ListTransactionsResponse(
                error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                error_message=f"partitions {loading} are loading",
            )
        loop = asyncio.get_running_loop()
        reads = [
            self._runtime.schedule_read(
                "list-transactions",
                partition,
                lambda shard, offset: shard.list_transactions(
                    request.state_filters,
                    request.producer_id_filters,
                    request.duration_filter,
                    offset,
                ),
            )
            for partition, state in sorted(self._runtime.partitions().items())
            if state is CoordinatorState.ACTIVE
        ]

        def answer() -> Message:
            unknown: Sequence[str] = ()
            states: list[ListTransactionsResponseState] = []
            pattern = request.transactional_id_pattern
            matcher = _pattern(pattern)
            for read in reads:
                if read.cancelled() or read.exception() is not None:
                    # The partition unloaded meanwhile: its transactions are another
                    # node's to list now.
                    continue
                result = read.result()
                unknown = result.unknown_state_filters
                states.extend(
                    ListTransactionsResponseState(
                        transactional_id=txn.transactional_id,
                        producer_id=txn.producer_id,
                        transaction_state=txn.state,
                    )
                    for txn in result.transactions
                    if matcher is None or matcher(txn.transactional_id)
                )
            if not reads:
                unknown = [
                    name for name in request.state_filters if name not in _TRANSACTION_STATES
                ]
            return ListTransactionsResponse(
                unknown_state_filters=list(unknown), transaction_states=states
            )

        if not reads:
            return answer()
        reply: asyncio.Future[Message] = loop.create_future()
        gathered = asyncio.gather(*reads, return_exceptions=True)
        gathered.add_done_callback(lambda _: _settle(reply, answer))
        return PendingReply(reply)


def _settle(reply: asyncio.Future[Message], answer: Callable[[], Message]) -> None:
    if not reply.done():
        reply.set_result(answer())


def _describe_one(
    transactional_id: str,
) -> Callable[[GroupCoordinatorShard, int], list[TransactionDescription]]:
    def read(shard: GroupCoordinatorShard, offset: int) -> list[TransactionDescription]:
        return shard.describe_transactions([transactional_id], offset)

    return read


_TRANSACTION_STATES = frozenset(
    (
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "PrepareAbort",
        "CompleteCommit",
        "CompleteAbort",
        "Dead",
        "PrepareEpochFence",
    )
)


def _pattern(pattern: str | None) -> Callable[[str], bool] | None:
    """ListTransactions' `transactional_id_pattern` (KIP-1152): a Java regular expression
    the whole id must match; None or empty: every id."""
    if not pattern:
        return None
    try:
        compiled = re.compile(pattern)
    except re.error:
        return lambda _: False
    return lambda transactional_id: compiled.fullmatch(transactional_id) is not None
