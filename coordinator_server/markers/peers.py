"""Requests to the other nodes of a cluster: WriteTxnMarkers, the end of a transaction on a
log partition another node owns, and DescribeTransactions, the check of a TxnOffsetCommit
whose transaction another node coordinates.

A transaction's offsets live on its groups' log partitions, which in a cluster are often
another node's. Kafka's transaction coordinator sends WriteTxnMarkers to the broker leading
the group's `__consumer_offsets` partition; this node sends the contract's WriteTxnMarkers
to the node that owns the log partition now (the cluster's placement), through the
node's `NodeClient` (a connection of its own per request: the end of a transaction is not
the hot path). Whatever fails (no owner yet, a refused connection, a timeout) is answered as
a retriable error code; the caller retries with back-off.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    DescribeTransactionsResponseState,
    WriteTxnMarkersRequest,
    WriteTxnMarkersRequestMarker,
    WriteTxnMarkersRequestTopic,
    WriteTxnMarkersResponse,
)
from coordinator_server.node_address import NodeAddress
from coordinator_server.node_client import UNREACHABLE, NodeClient


class NodePeers:
    """Ends transactions on log partitions other nodes own (`Peers` of completion.py)."""

    def __init__(
        self,
        placement: Callable[[int], NodeAddress | None],
        this_node: int,
        log_topic: str,
        client: NodeClient,
    ) -> None:
        """`placement`: the node owning a log partition now; `client`: how this node's
        requests reach the others."""
        self._placement = placement
        self._this_node = this_node
        self._log_topic = log_topic
        self._client = client
        self.requests = 0

    async def __call__(
        self, log_partition: int, producer_id: int, producer_epoch: int, committed: bool
    ) -> int:
        owner = self._placement(log_partition)
        if owner is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if owner.node_id == self._this_node:
            # Placed here but not active yet (loading): the caller's retry finds it.
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        request = WriteTxnMarkersRequest(
            markers=[
                WriteTxnMarkersRequestMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=committed,
                    topics=[
                        WriteTxnMarkersRequestTopic(
                            name=self._log_topic, partition_indexes=[log_partition]
                        )
                    ],
                    coordinator_epoch=0,
                )
            ]
        )
        self.requests += 1
        try:
            answer = await self._client.send(owner, request)
        except ApiError as refused:
            # An error-only answer (a node of another version, a malformed request).
            return refused.code
        except UNREACHABLE:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not isinstance(answer, WriteTxnMarkersResponse):
            return ErrorCode.UNKNOWN_SERVER_ERROR
        for marker in answer.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    if partition.partition_index == log_partition:
                        return partition.error_code
        return ErrorCode.UNKNOWN_SERVER_ERROR

    async def describe_transaction(
        self, log_partition: int, transactional_id: str
    ) -> DescribeTransactionsResponseState | None:
        """DescribeTransactions of `transactional_id` from the node that owns its log
        partition (`TransactionLookup`: the check of a TxnOffsetCommit whose transaction
        another node coordinates); None when no node answered."""
        owner = self._placement(log_partition)
        if owner is None or owner.node_id == self._this_node:
            return None
        request = DescribeTransactionsRequest(transactional_ids=[transactional_id])
        self.requests += 1
        try:
            answer = await self._client.send(owner, request)
        except (ApiError, *UNREACHABLE):
            return None
        if not isinstance(answer, DescribeTransactionsResponse):
            return None
        for state in answer.transaction_states:
            if state.transactional_id == transactional_id:
                return state
        return None
