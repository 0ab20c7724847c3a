"""Requests to the other nodes of a cluster: WriteTxnMarkers, the end of a transaction on a
log partition another node owns, and DescribeTransactions, the check of a TxnOffsetCommit
whose transaction another node coordinates.

A transaction's offsets live on its groups' log partitions, which in a cluster are often
another node's. Kafka's transaction coordinator sends WriteTxnMarkers to the broker leading
the group's `__consumer_offsets` partition; this node sends the contract's WriteTxnMarkers
to the node that owns the log partition now (the cluster's placement), over a connection
of its own per request: the end of a transaction is not the hot path, and a node that just
took the partition over is reached as soon as the placement names it. Whatever fails
(no owner yet, a refused connection, a timeout) is answered as a retriable error code; the
caller retries with back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import ssl
import struct
from collections.abc import Callable

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.envelope import RequestHeader, encode_request, split_response
from coordinator_protocol.errors import ApiError, ErrorCode
from coordinator_protocol.framing import encode_frame
from coordinator_protocol.messages import Message, parse_response
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

_LENGTH = struct.Struct(">I")
# A WriteTxnMarkers answer names one partition: a few dozen bytes.
_MAX_ANSWER_BYTES = 1024 * 1024


class NodePeers:
    """Ends transactions on log partitions other nodes own (`Peers` of completion.py)."""

    def __init__(
        self,
        placement: Callable[[int], NodeAddress | None],
        this_node: int,
        log_topic: str,
        *,
        timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        """`placement`: the node owning a log partition now; `ssl_context`: how to reach
        nodes that serve TLS (the nodes of one cluster serve alike)."""
        self._placement = placement
        self._this_node = this_node
        self._log_topic = log_topic
        self._timeout_s = timeout_s
        self._ssl = ssl_context
        self._correlation = itertools.count(1)
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
            answer = await asyncio.wait_for(
                self._send(owner, request, ApiKey.WRITE_TXN_MARKERS), self._timeout_s
            )
        except ApiError as refused:
            # An error-only answer (a node of another version, a malformed request).
            return refused.code
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
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
            answer = await asyncio.wait_for(
                self._send(owner, request, ApiKey.DESCRIBE_TRANSACTIONS),
                self._timeout_s,
            )
        except (ApiError, OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            return None
        assert isinstance(answer, DescribeTransactionsResponse)
        for state in answer.transaction_states:
            if state.transactional_id == transactional_id:
                return state
        return None

    async def _send(self, owner: NodeAddress, request: Message, api_key: ApiKey) -> Message:
        reader, writer = await asyncio.open_connection(owner.host, owner.port, ssl=self._ssl)
        try:
            correlation_id = next(self._correlation) & 0x7FFFFFFF
            header = RequestHeader(
                api_key, 0, correlation_id, f"coordinator-node-{self._this_node}"
            )
            writer.write(encode_frame(encode_request(header, request.to_body())))
            await writer.drain()
            (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            if length > _MAX_ANSWER_BYTES:
                raise ValueError(f"an answer of {length} bytes")
            answered_id, body = split_response(await reader.readexactly(length))
            if answered_id != correlation_id:
                raise ValueError("the answer is for another request")
            return parse_response(api_key, 0, body)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
