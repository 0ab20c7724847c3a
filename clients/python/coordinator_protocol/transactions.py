"""The bodies of the transaction APIs of the contract, as msgspec Structs.

Kafka's transaction coordinator APIs (InitProducerId 22, AddPartitionsToTxn 24,
AddOffsetsToTxn 25, EndTxn 26, TxnOffsetCommit 28, DescribeTransactions 65,
ListTransactions 66) and WriteTxnMarkers 27, which one node of a coordinator cluster sends
another to end a transaction's part on the log partitions that node owns. The same rules as
`messages` (which registers them with every other API): the fields of Kafka 4.4's
newest stable version of each schema, in snake_case; strict validation; requests require what
they cannot do without; responses default every field as Kafka's schema does.

Where the bodies leave Kafka's newest version (docs/PROTOCOL.md says the same):

- AddPartitionsToTxn is the client's form (Kafka's versions 0 to 3: one transaction, its
  fields without the "V3AndBelow" prefix, answered per topic in `results_by_topic`), not the
  brokers' batch form of versions 4 and 5, which only a broker sends to verify a partition.
- InitProducerId leaves out the two-phase-commit fields of version 6 (`enable2_pc`,
  `keep_prepared_txn` and the ongoing transaction's id and epoch in the answer), unstable in
  Kafka 4.4.
- TxnOffsetCommit names topics by name (versions 0 to 5), as OffsetCommit does in the
  contract: the coordinator keeps offsets by topic name.
- WriteTxnMarkers is between nodes: `topics[].name` is the name of the log topic and
  `partition_indexes` are partitions of that log.
- DescribeTransactions version 1 (each state's markers refused for good) and
  ListTransactions version 1 (the list in pages: `cursor`, `next_cursor`) are the contract's
  own versions.

A transactional id is routed like a group id: `hashing.partition_for` of it, found
with FindCoordinator key_type 1.
"""

from __future__ import annotations

from typing import ClassVar, Final

import msgspec

from coordinator_protocol.api_keys import ApiKey
from coordinator_protocol.message_base import Int8, Int16, Int32, Int64, Message

__all__ = [
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TRANSACTION_MESSAGE_PAIRS",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnRequestTopic",
    "AddPartitionsToTxnResponse",
    "AddPartitionsToTxnResponsePartition",
    "AddPartitionsToTxnResponseTopic",
    "DescribeTransactionsRequest",
    "DescribeTransactionsResponse",
    "DescribeTransactionsResponseState",
    "DescribeTransactionsResponseTopic",
    "DescribeTransactionsV1Request",
    "DescribeTransactionsV1Response",
    "DescribeTransactionsV1ResponseRefusedMarker",
    "DescribeTransactionsV1ResponseState",
    "EndTxnRequest",
    "EndTxnResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "ListTransactionsRequest",
    "ListTransactionsResponse",
    "ListTransactionsResponseState",
    "ListTransactionsV1Request",
    "ListTransactionsV1Response",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitRequestPartition",
    "TxnOffsetCommitRequestTopic",
    "TxnOffsetCommitResponse",
    "TxnOffsetCommitResponsePartition",
    "TxnOffsetCommitResponseTopic",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersRequestMarker",
    "WriteTxnMarkersRequestTopic",
    "WriteTxnMarkersResponse",
    "WriteTxnMarkersResponseMarker",
    "WriteTxnMarkersResponsePartition",
    "WriteTxnMarkersResponseTopic",
]

# Kafka's "no producer id" and "no epoch" (RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH).
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1


# InitProducerId (22)


class InitProducerIdRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.INIT_PRODUCER_ID

    # None: an idempotent producer without transactions, given a fresh producer id.
    transactional_id: str | None = None
    transaction_timeout_ms: Int32
    # Both -1 for a producer starting; its current id and epoch when it resumes after an
    # error (KIP-360), so the coordinator can tell a retry from a fenced producer.
    producer_id: Int64 = NO_PRODUCER_ID
    producer_epoch: Int16 = NO_PRODUCER_EPOCH


class InitProducerIdResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.INIT_PRODUCER_ID

    error_code: Int16 = 0
    error_message: str | None = None
    producer_id: Int64 = NO_PRODUCER_ID
    producer_epoch: Int16 = 0


# AddPartitionsToTxn (24)


class AddPartitionsToTxnRequestTopic(Message, kw_only=True):
    name: str
    partitions: list[Int32]


class AddPartitionsToTxnRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_PARTITIONS_TO_TXN

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    topics: list[AddPartitionsToTxnRequestTopic]


class AddPartitionsToTxnResponsePartition(Message, kw_only=True):
    partition_index: Int32 = 0
    partition_error_code: Int16 = 0


class AddPartitionsToTxnResponseTopic(Message, kw_only=True):
    name: str = ""
    results_by_partition: list[AddPartitionsToTxnResponsePartition] = msgspec.field(
        default_factory=list
    )


class AddPartitionsToTxnResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_PARTITIONS_TO_TXN

    # An error of the whole request (as in Kafka's versions 4+); the partitions' errors are
    # in `results_by_topic`, where Kafka's versions 0 to 3 put every error.
    error_code: Int16 = 0
    error_message: str | None = None
    results_by_topic: list[AddPartitionsToTxnResponseTopic] = msgspec.field(default_factory=list)

    def reported_error_code(self) -> int:
        """The top-level error, else the first partition's: a request refused as a whole
        (CONCURRENT_TRANSACTIONS, PRODUCER_FENCED, ...) is refused for every partition."""
        if self.error_code:
            return int(self.error_code)
        for topic in self.results_by_topic:
            for partition in topic.results_by_partition:
                return int(partition.partition_error_code)
        return 0


# AddOffsetsToTxn (25)


class AddOffsetsToTxnRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_OFFSETS_TO_TXN

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    # Optional, as in every request naming a group: the service answers INVALID_GROUP_ID.
    group_id: str | None = None


class AddOffsetsToTxnResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.ADD_OFFSETS_TO_TXN

    error_code: Int16 = 0
    error_message: str | None = None


# EndTxn (26)


class EndTxnRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.END_TXN

    transactional_id: str
    producer_id: Int64
    producer_epoch: Int16
    # True: commit; False: abort.
    committed: bool


class EndTxnResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.END_TXN

    error_code: Int16 = 0
    error_message: str | None = None
    # The producer id and epoch after the transaction ended, where ending it bumps the epoch
    # (Kafka's transaction version 2); -1 when it does not.
    producer_id: Int64 = NO_PRODUCER_ID
    producer_epoch: Int16 = NO_PRODUCER_EPOCH


# WriteTxnMarkers (27): between the nodes of a coordinator cluster


class WriteTxnMarkersRequestTopic(Message, kw_only=True):
    # The log topic's name; the partitions are partitions of the log.
    name: str
    partition_indexes: list[Int32]


class WriteTxnMarkersRequestMarker(Message, kw_only=True):
    producer_id: Int64
    producer_epoch: Int16
    # True: commit; False: abort.
    transaction_result: bool
    topics: list[WriteTxnMarkersRequestTopic]
    coordinator_epoch: Int32
    # Kafka's transaction version of the marker: 0 and 1 the classic protocol, 2 KIP-890's.
    transaction_version: Int8 = 0


class WriteTxnMarkersRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.WRITE_TXN_MARKERS

    markers: list[WriteTxnMarkersRequestMarker]


class WriteTxnMarkersResponsePartition(Message, kw_only=True):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class WriteTxnMarkersResponseTopic(Message, kw_only=True):
    name: str = ""
    partitions: list[WriteTxnMarkersResponsePartition] = msgspec.field(default_factory=list)


class WriteTxnMarkersResponseMarker(Message, kw_only=True):
    producer_id: Int64 = 0
    topics: list[WriteTxnMarkersResponseTopic] = msgspec.field(default_factory=list)


class WriteTxnMarkersResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.WRITE_TXN_MARKERS

    markers: list[WriteTxnMarkersResponseMarker] = msgspec.field(default_factory=list)

    def reported_error_code(self) -> int:
        """The first partition's error code: WriteTxnMarkers has no top-level one."""
        for marker in self.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    return int(partition.error_code)
        return 0


# TxnOffsetCommit (28)


class TxnOffsetCommitRequestPartition(Message, kw_only=True):
    partition_index: Int32
    committed_offset: Int64
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


class TxnOffsetCommitRequestTopic(Message, kw_only=True):
    name: str
    partitions: list[TxnOffsetCommitRequestPartition]


class TxnOffsetCommitRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.TXN_OFFSET_COMMIT

    transactional_id: str
    # Optional, as in every request naming a group: the service answers INVALID_GROUP_ID.
    group_id: str | None = None
    producer_id: Int64
    producer_epoch: Int16
    # The member's generation, member id and instance id (KIP-447), checked as an
    # OffsetCommit's are; -1 and "" (a producer that is no group member) skip the check.
    generation_id_or_member_epoch: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[TxnOffsetCommitRequestTopic]

    def error_response(self, code: int) -> TxnOffsetCommitResponse:
        """Every partition of the request answered with `code`, in the request's order
        (Kafka's `TxnOffsetCommitRequest.getErrorResponse`)."""
        return TxnOffsetCommitResponse(
            topics=[
                TxnOffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in self.topics
            ]
        )


class TxnOffsetCommitResponsePartition(Message, kw_only=True):
    partition_index: Int32 = 0
    error_code: Int16 = 0


class TxnOffsetCommitResponseTopic(Message, kw_only=True):
    name: str = ""
    partitions: list[TxnOffsetCommitResponsePartition] = msgspec.field(default_factory=list)


class TxnOffsetCommitResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.TXN_OFFSET_COMMIT

    topics: list[TxnOffsetCommitResponseTopic] = msgspec.field(default_factory=list)

    def reported_error_code(self) -> int:
        """The first partition's error code: TxnOffsetCommit has no top-level one, and a
        commit that fails usually fails for every partition alike."""
        for topic in self.topics:
            for partition in topic.partitions:
                return int(partition.error_code)
        return 0


# DescribeTransactions (65)


class DescribeTransactionsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TRANSACTIONS

    transactional_ids: list[str]


class DescribeTransactionsResponseTopic(Message, kw_only=True):
    topic: str = ""
    partitions: list[Int32] = msgspec.field(default_factory=list)


class DescribeTransactionsResponseState(Message, kw_only=True):
    error_code: Int16 = 0
    transactional_id: str = ""
    # Kafka's names: "Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
    # "CompleteAbort", "Dead", "PrepareEpochFence".
    transaction_state: str = ""
    transaction_timeout_ms: Int32 = 0
    # -1 while no transaction is open (Kafka's answer; 0 is only the schema's default).
    transaction_start_time_ms: Int64 = 0
    producer_id: Int64 = 0
    producer_epoch: Int16 = 0
    # The data partitions in the transaction: while it is being completed, those whose
    # markers are not written yet.
    topics: list[DescribeTransactionsResponseTopic] = msgspec.field(default_factory=list)


class DescribeTransactionsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TRANSACTIONS

    transaction_states: list[DescribeTransactionsResponseState] = msgspec.field(
        default_factory=list
    )


# DescribeTransactions version 1 (the contract's own): each state also says which data
# markers of the id's last completed transaction the brokers refused for good.


class DescribeTransactionsV1Request(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TRANSACTIONS
    API_VERSION: ClassVar[int] = 1

    transactional_ids: list[str]


class DescribeTransactionsV1ResponseRefusedMarker(Message, kw_only=True):
    topic: str = ""
    partition_index: Int32 = 0
    # The broker's error: UNKNOWN_TOPIC_OR_PARTITION (the partition stayed unknown, its topic
    # deleted), INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED (another writer of
    # the producer id has a newer epoch there).
    error_code: Int16 = 0


class DescribeTransactionsV1ResponseState(DescribeTransactionsResponseState, kw_only=True):
    # Kept until the id's next completion; empty when every marker landed.
    refused_markers: list[DescribeTransactionsV1ResponseRefusedMarker] = msgspec.field(
        default_factory=list
    )


class DescribeTransactionsV1Response(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.DESCRIBE_TRANSACTIONS
    API_VERSION: ClassVar[int] = 1

    transaction_states: list[DescribeTransactionsV1ResponseState] = msgspec.field(
        default_factory=list
    )


# ListTransactions (66)


class ListTransactionsRequest(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_TRANSACTIONS

    # Empty means no filter.
    state_filters: list[str] = msgspec.field(default_factory=list)
    producer_id_filters: list[Int64] = msgspec.field(default_factory=list)
    # Milliseconds; below 0 means no filter, else only transactions open longer than this.
    duration_filter: Int64 = -1
    # A regular expression the whole transactional id matches; None or "" means no filter.
    transactional_id_pattern: str | None = None


class ListTransactionsResponseState(Message, kw_only=True):
    transactional_id: str = ""
    producer_id: Int64 = 0
    transaction_state: str = ""


class ListTransactionsResponse(Message, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_TRANSACTIONS

    error_code: Int16 = 0
    error_message: str | None = None
    # The state filters of the request that name no state.
    unknown_state_filters: list[str] = msgspec.field(default_factory=list)
    transaction_states: list[ListTransactionsResponseState] = msgspec.field(default_factory=list)


# ListTransactions version 1 (the contract's own, after Kafka's DescribeTopicPartitions,
# KIP-966): the list in pages. A node walks its transactional ids in one order (by the log
# partition of the id, then the id), and answers as many as fit its largest answer.


class ListTransactionsV1Request(ListTransactionsRequest, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_TRANSACTIONS
    API_VERSION: ClassVar[int] = 1

    # Where the page starts: a transactional id (the `next_cursor` of the page before); None:
    # at the beginning.
    cursor: str | None = None


class ListTransactionsV1Response(ListTransactionsResponse, kw_only=True):
    API_KEY: ClassVar[ApiKey] = ApiKey.LIST_TRANSACTIONS
    API_VERSION: ClassVar[int] = 1

    # Where the next page starts (the cursor to send); None: the list is whole.
    next_cursor: str | None = None


TRANSACTION_MESSAGE_PAIRS: Final = (
    (InitProducerIdRequest, InitProducerIdResponse),
    (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    (EndTxnRequest, EndTxnResponse),
    (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    (DescribeTransactionsRequest, DescribeTransactionsResponse),
    (DescribeTransactionsV1Request, DescribeTransactionsV1Response),
    (ListTransactionsRequest, ListTransactionsResponse),
    (ListTransactionsV1Request, ListTransactionsV1Response),
)
"""(request, response) of each transaction API, which `messages` registers."""
